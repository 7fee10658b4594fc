"""The package is a one-way house: no import circles (lazy imports inside functions count) and no import that climbs a floor.
Results draw nothing themselves: only the plots and report floors import `plots`, and no notebook view draws.
Its notebooks are numbered the same way: one two-digit number per floor, and each sorts after those of what it imports.

Every module's imports are read with `ast` and every notebook's `#| default_exp` from its JSON, so nothing is run here."""
import ast
import functools
import json
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "reward_auditor"
NBS = PKG.parent / "nbs"

# Floors, bottom up (CONTRIBUTING.md, "The house of floors"). A module may import modules on its own floor or below.
FLOORS = [
    ("ground", {"safety", "resources", "tables", "cache", "guards", "store", "generations"}),
    ("data", {"records", "data", "steps", "leaderboard_readers"}),
    ("statistics", {"effects", "stats", "multiplicity", "heterogeneity", "meta", "paired", "run_settings",
                    "pair_tests", "compare", "calibration_inputs", "calibration", "planning", "leaderboard_stats",
                    "sampled", "sequential"}),
    ("plots", {"plots"}),
    ("perturbations", {"rewriters", "perturbation_base", "synonyms", "meaning_check", "translation", "probes",
                       "perturbations"}),
    ("scorer kinds", {"scorer_base", "model_inputs", "scorer_kinds", "verdicts"}),
    ("scorer families", {"checkpoints", "families", "endpoints", "prm", "genjudge"}),
    ("scorers", {"scorers"}),
    ("runs", {"engines", "specs", "audit_settings", "audit_conditions", "audit_scoring", "family_tests", "findings",
              "headlines", "run_folder", "audit_result", "audit_sequential", "audit", "verifier_answers", "verifier_transforms",
              "verifiers", "protocol", "prm_audit", "leaderboard"}),
    ("reports", {"report_html", "report_sections", "report_analyses", "report", "leaderboard_page"}),
    ("command line", {"cli_common", "cli_audit_args", "cli_audit", "cli_diagnostics", "cli_runs", "cli_plan",
                      "cli_inventory", "cli_leaderboard", "cli"}),
]
FLOOR = {m: i for i, (_, mods) in enumerate(FLOORS) for m in mods}
NAME = {i: name for i, (name, _) in enumerate(FLOORS)}
# named exceptions to "own floor or below" (none today: compare and calibration read run folders, not the audit)
CLIMBS_ALLOWED: set[tuple[str, str]] = set()
# what each of these may never import, directly or not, beyond the floor rule
STATISTICS = {"effects", "stats", "multiplicity", "heterogeneity", "meta", "paired", "run_settings", "pair_tests",
              "compare", "calibration_inputs", "calibration", "planning", "leaderboard_stats", "sampled", "sequential"}
HEAVY = {"torch", "transformers"}


def package_modules() -> dict[str, Path]:
    return {p.stem: p for p in PKG.glob("*.py") if not p.stem.startswith("_")}


def imports_of(path: Path, modules, tree: ast.AST | None = None) -> dict[str, int]:
    "The package modules a file (or `tree`, a part of it) imports (module level or inside functions, relative or absolute), with a line each."
    found = {}
    for node in ast.walk(tree or ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 0 and mod != "reward_auditor" and not mod.startswith("reward_auditor."):
                continue
            parts = mod.split(".")[0 if node.level else 1:] if mod else []
            if node.level > 1:
                continue  # above the package: not ours
            names = [parts[0]] if parts else [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names if a.name.startswith("reward_auditor.")]
        for n in names:
            if n in modules and n != path.stem:
                found.setdefault(n, node.lineno)
    return found


def third_party_of(path: Path, tree: ast.AST | None = None) -> set[str]:
    "Top-level names of the libraries a file (or `tree`, a part of it) imports anywhere."
    out = set()
    for node in ast.walk(tree or ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@functools.cache
def graph() -> dict[str, dict[str, int]]:
    "Each package module's imports, read once per test session (callers only read it)."
    mods = package_modules()
    return {m: imports_of(p, mods) for m, p in mods.items()}


def circles(g: dict[str, dict]) -> list[list[str]]:
    "Strongly connected components with more than one module (Tarjan), each sorted."
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def chapter_notebooks(folder: Path = NBS) -> dict[str, str]:
    "Module → the file name of the notebook that exports it (`#| default_exp`), read from the JSON; nothing is run."
    out = {}
    for nb in sorted(folder.glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            found = re.search(r"^#\|\s*default_exp\s+(\w+)", src, re.M) if cell["cell_type"] == "code" else None
            if found:
                out[found.group(1)] = nb.name
                break
    return out


def misordered_notebooks(nbs: dict[str, str], g: dict[str, dict]) -> list[str]:
    "Where sorting the notebooks by name breaks the floors (bottom up) or puts a module before one it imports."
    bad, ranked = [], sorted(nbs.items(), key=lambda kv: kv[1])
    for (low, low_nb), (high, high_nb) in zip(ranked, ranked[1:]):
        if FLOOR[high] < FLOOR[low]:
            bad.append(f"{high_nb} ({NAME[FLOOR[high]]}) sorts after {low_nb} ({NAME[FLOOR[low]]})")
    for m, deps in sorted(g.items()):
        bad += [f"{nbs[m]} ({m}) imports {d}, whose notebook {nbs[d]} does not sort before it"
                for d in sorted(deps) if m in nbs and d in nbs and (m, d) not in CLIMBS_ALLOWED and nbs[d] >= nbs[m]]
    return bad


def test_the_reader_sees_lazy_relative_and_absolute_imports(tmp_path):
    (tmp_path / "a.py").write_text("from .b import x\nimport reward_auditor.c\n"
                                   "def f():\n    from reward_auditor import d\n    from . import e as E\n"
                                   "from reward_auditor.nothing_here import y\nimport numpy\n")
    got = imports_of(tmp_path / "a.py", {"a", "b", "c", "d", "e"})
    assert set(got) == {"b", "c", "d", "e"} and got["d"] == 4


def test_circles_are_found():
    assert circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert circles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_circles():
    found = circles(graph())
    assert not found, "import circles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_every_module_has_a_floor():
    missing = sorted(set(package_modules()) - set(FLOOR))
    assert not missing, f"place {missing} on a floor in tests/test_layers.py FLOORS (and in CONTRIBUTING.md's list)"


def test_imports_never_climb():
    bad = [f"{m}.py:{line} imports {d} ({NAME[FLOOR[d]]}, above {NAME[FLOOR[m]]})"
           for m, deps in graph().items() if m in FLOOR
           for d, line in deps.items() if d in FLOOR and FLOOR[d] > FLOOR[m] and (m, d) not in CLIMBS_ALLOWED]
    assert not bad, "\n".join(bad)


def test_statistics_never_reach_scorers_engines_or_torch():
    g, mods = graph(), package_modules()
    for m in sorted(STATISTICS & set(mods)):
        seen, todo = set(), [d for d in g[m] if (m, d) not in CLIMBS_ALLOWED]
        while todo:
            d = todo.pop()
            if d not in seen:
                seen.add(d)
                todo.extend(g.get(d, ()))
        # guards: the capped readers of a user's compressed file (ground floor, no scorer, engine or model)
        assert not seen - STATISTICS - {"safety", "guards", "tables", "data", "steps", "resources"}, (m, sorted(seen))
        assert not third_party_of(mods[m]) & HEAVY, m


def test_plots_only_draw():
    deps = set(graph()["plots"])
    assert deps <= {"stats", "tables", "safety"}, f"plots imports {sorted(deps)}: it draws what it is given"


# The display rule: results hand plain frames to the floors that draw; they keep no drawing code themselves.
DRAWS = {"plots", "reports"}  # the floors that may import `plots` (the package's face, `__init__`, attaches views)
DRAWING_LIBS = {"matplotlib", "seaborn", "plotly"}


def drawing_views(path: Path, modules) -> list[str]:
    "Notebook views (`_repr_html_`, defined in a class or assigned to one) that import `plots` or a plotting library."
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assigned = {node.value.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and any(isinstance(t, ast.Attribute) and t.attr == "_repr_html_" for t in node.targets)}
    bad = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and (fn.name == "_repr_html_" or fn.name in assigned):
            ours = {d for d in imports_of(path, modules, tree=fn) if d == "plots"}
            libs = third_party_of(path, tree=fn) & DRAWING_LIBS
            bad += [(fn.lineno, f"{path.stem}.py:{fn.lineno} {fn.name} imports {d}") for d in sorted(ours | libs)]
    return [b for _, b in sorted(bad)]


def test_the_display_check_sees_a_view_that_draws(tmp_path):
    (tmp_path / "audit.py").write_text(
        "class R:\n    def _repr_html_(self):\n        import matplotlib.pyplot as plt\n\n"
        "class S:\n    def _repr_html_(self):\n        return '<p>'\n\n"
        "def _view(self):\n    from reward_auditor import plots as P\n    return P.risk_styler(self.t).to_html()\n\n"
        "S._repr_html_ = _view\n")
    assert drawing_views(tmp_path / "audit.py", {"audit", "plots"}) == [
        "audit.py:2 _repr_html_ imports matplotlib", "audit.py:9 _view imports plots"]


def test_only_the_drawing_floors_import_plots():
    bad = [f"{m}.py:{line} imports plots ({NAME[FLOOR[m]]} floor): hand the frames to a view on the plots or report floor"
           for m, deps in graph().items() if m in FLOOR and NAME[FLOOR[m]] not in DRAWS
           for d, line in deps.items() if d == "plots"]
    assert not bad, "\n".join(bad)


def test_result_views_do_not_draw():
    mods = package_modules()
    bad = [b for m, p in sorted(mods.items()) if m in FLOOR and NAME[FLOOR[m]] not in DRAWS for b in drawing_views(p, mods)]
    assert not bad, "\n".join(bad)


def test_scorers_face_is_the_only_way_up_the_scorer_layer():
    g = graph()
    below = {m for m, f in FLOOR.items() if f < FLOOR["scorers"]}
    assert not [m for m in below if "scorers" in g.get(m, {})], "a module below the scorers' face imports it"


def test_notebook_order_check_sees_floors_and_imports():
    nbs = {"data": "00_data.ipynb", "safety": "01_safety.ipynb", "steps": "02_steps.ipynb"}
    got = misordered_notebooks(nbs, {"data": {"steps": 3}, "safety": {}, "steps": {}})
    assert got == ["01_safety.ipynb (ground) sorts after 00_data.ipynb (data)",
                   "00_data.ipynb (data) imports steps, whose notebook 02_steps.ipynb does not sort before it"]
    assert misordered_notebooks({"compare": "02_compare.ipynb", "audit": "08_audit.ipynb"}, {"compare": {"audit": 1}}) \
        == ["02_compare.ipynb (compare) imports audit, whose notebook 08_audit.ipynb does not sort before it"]


def test_notebooks_sort_by_floor_then_imports():
    nbs = chapter_notebooks()
    missing = sorted(set(package_modules()) - set(nbs))
    assert not missing, f"modules without a notebook (#| default_exp): {missing}"
    bad = misordered_notebooks(nbs, graph())
    assert not bad, "number nbs/ bottom up (CONTRIBUTING.md, The house of floors):\n" + "\n".join(bad)


def test_a_notebooks_number_is_its_floor_and_the_readme_names_them():
    nbs = chapter_notebooks()
    readme = (PKG.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")  # "The house of floors"
    for i, (name, mods) in enumerate(FLOORS):
        stems = sorted(nbs[m].removesuffix(".ipynb") for m in mods if m in nbs)
        assert all(s[:2] == f"{i:02d}" and not s[2].isdigit() for s in stems), (name, stems)
        line = next((ln for ln in readme.splitlines() if ln.startswith(f"{i}. **{name.capitalize()}** (")), "")
        assert f"`{stems[0]}`" in line and f"`{stems[-1]}`" in line, f"CONTRIBUTING.md's floor {i} should name {stems[0]} … {stems[-1]}"


# The house rule "no module over ~800 lines": a module is one chapter of one idea.
MAX_LINES = 800


def long_modules(pkg: Path = PKG, limit: int = MAX_LINES) -> dict[str, int]:
    "Each module of the package (the generated `_modidx.py` aside) with more than `limit` lines → its line count."
    counts = {p.relative_to(pkg).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
              for p in sorted(pkg.rglob("*.py")) if p.name != "_modidx.py"}
    return {m: n for m, n in counts.items() if n > limit}


def test_the_length_check_names_each_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * 800)
    (tmp_path / "long.py").write_text("x = 1\n" * 801)
    (tmp_path / "_modidx.py").write_text("d = {}\n" * 2000)
    assert long_modules(tmp_path) == {"long.py": 801}


def test_no_module_is_longer_than_a_chapter():
    long = long_modules()
    assert not long, (f"split into chapters of one idea, each at most {MAX_LINES} lines: "
                      + ", ".join(f"{m} has {n} lines" for m, n in sorted(long.items())))
