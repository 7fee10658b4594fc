"""Every shown line runs as written, or is marked with why a test cannot run it.

The shown lines are the fenced shell lines and Python blocks of README.md, of the guide pages (docs/guide/*.md)
and of the tutorials' and chapters' prose (nbs/; their code cells run under nbdev-test). Like the
bad-input table: a new line fails here until it runs offline in seconds or is given a reason.

Shell lines run in one scratch folder per document, in order (a `report` or a `--resume` finds the run the line
before made), through `main()` with `--no-report` added (the reports' rendering has tests of its own). A line that
needs a reward model's weights or a GPU runs with a stand-in: a control scorer in the model's place, the bundled
sample's subsets in place of RM-Bench's files, the CPU in place of CUDA; so the sequence a page shows (audit,
resume, report, heterogeneity) is checked with everything but the weights as written."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from reward_auditor.cli import main

REPO = Path(__file__).resolve().parents[1]
WALKTHROUGH = REPO / "nbs" / "tutorials" / "walkthrough.ipynb"
DOCS = [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md")),
        *sorted((REPO / "nbs" / "tutorials").glob("*.ipynb")), *sorted((REPO / "nbs").glob("*.ipynb"))]

# a fragment of the line → why it is not run here (weights that no stand-in replaces, servers, big data or minutes)
NOT_HERE = {
    "--kind genjudge": "run in order against the stand-in judge server by test_readme_genjudge_lines_run_in_order",
    "scripts/setup.sh": "builds the virtual environment: network and minutes",
    "scripts/test.sh": "the whole test suite",
    "--endpoint": "needs a running vLLM server",
    "hh-rlhf/": "reads the HH-RLHF download",
    "verifier-audit": "about a minute of verifier calls; tests/test_cli.py runs a quick form",
    "reward-auditor report runs/skywork": "renders a report of the model's run; tests/test_report.py renders reports",
    "reward-auditor demo": "the full demo (all perturbations, 10,000 draws); tests/test_cli.py runs it end to end",
    "--rewriter-url": "needs a rewriting LLM behind an endpoint; tests/test_store.py round-trips a pack",
    "chat-pack.parquet": "audits the pack that the rewriting LLM above writes",
    "--kind prm": "needs a process reward model's weights and step data; tests/test_prm.py runs a tiny one",
    "runs/model-a": "compares two runs of real reward models; tests/test_compare.py runs the command",
    "_disturbance.json": "reads the paper's perturbed RM-Bench files (the walkthrough audits them when present)",
    "--engine ray": "starts a Ray cluster; tests/test_engines.py runs a Ray audit",
}

# a stand-in for what needs weights or a GPU: (pattern, replacement) applied to a line before it runs
STAND_INS = [
    (r"--model Skywork/Skywork-Reward-V2-Qwen3-0\.6B", "--scorer overlap"),
    (r"--device cuda", "--device cpu"),
    (r"(?:\S*/)?rm-?bench[/_]([\w-]+?)(?:_filtered)?\.json", r"rmbench-\1.jsonl"),
]


def standin_data(folder: Path):
    "RM-Bench's domains as the sample's subsets (`rmbench-chat.jsonl`, …, and `rmbench-chat.jsonl` for `rmbench_chat.json`)."
    rows = [json.loads(line) for line in (REPO / "reward_auditor" / "sample" / "preferences.jsonl").open()]
    for subset in {r["subset"] for r in rows}:
        (folder / f"rmbench-{subset}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows if r["subset"] == subset), encoding="utf-8")


def doc_text(path: Path) -> str:
    "The prose of a document: a Markdown file, or a notebook's Markdown cells (its code cells run under nbdev-test)."
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def fenced(text: str, langs: tuple[str, ...]) -> list[tuple[int, str, str]]:
    "(first line, language, body) of each fenced block whose language is in `langs` ('' = a bare fence)."
    out = []
    for m in re.finditer(r"^```([\w-]*)[^\n]*\n(.*?)^```", text, re.S | re.M):
        if m.group(1) in langs:
            out.append((text[:m.start()].count("\n") + 2, m.group(1), m.group(2)))
    return out


def shell_lines(text: str) -> list[tuple[int, str]]:
    "(line, command) for each command of each shell block: continuations joined, comments dropped."
    out = []
    for first, lang, body in fenced(text, ("bash", "sh", "shell", "")):
        if not lang and not body.lstrip().startswith(("reward-auditor ", "bash ")):
            continue  # a bare fence that shows something other than commands (a diagram, a file)
        joined, start = "", None
        for i, line in enumerate(body.splitlines()):
            start = first + i if start is None else start
            joined += line.rstrip().removesuffix("\\") + " " if line.rstrip().endswith("\\") else line
            if line.rstrip().endswith("\\"):
                continue
            for cmd in re.sub(r"(^|\s)#.*$", "", joined).split("&&"):  # `setup.sh && .venv/bin/reward-auditor demo`
                if cmd.strip():
                    out.append((start, cmd.strip().removeprefix(".venv/bin/")))
            joined, start = "", None
    return out


def _rel(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


LINES = [(_rel(d), n, c) for d in DOCS for n, c in shell_lines(doc_text(d))]
README_LINES = [(n, c) for d, n, c in LINES if d == "README.md"]


def test_the_readme_has_the_lines_we_expect():
    assert any("demo" in c for _, c in README_LINES) and any("--data sample" in c for _, c in README_LINES)
    assert all(c.startswith(("reward-auditor ", "bash ", "REWARD_AUDITOR_API_KEY=")) for _, _, c in LINES), LINES
    assert ("reward-auditor demo" in [c for _, c in README_LINES])
    assert [c for _, c in README_LINES[:3]] == ["bash scripts/setup.sh", "reward-auditor demo", "bash scripts/test.sh"]


def test_every_command_block_is_marked_as_shell():
    """A fence that shows `reward-auditor` commands says `bash`, so GitHub and the site colour it and this file runs it
    (a synopsis with placeholders, `reward-auditor leaderboard PATH... [--items CSV]`, says `text`)."""
    for d in DOCS:
        for n, lang, body in fenced(doc_text(d), ("",)):
            assert "reward-auditor " not in body, f"{_rel(d)}:{n}: mark the block ```bash"


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    "One scratch folder per document, shared by its lines in order, with the stand-in data in it."
    made = {}

    def folder(doc):
        if doc not in made:
            made[doc] = tmp_path_factory.mktemp(re.sub(r"\W", "_", doc))
            standin_data(made[doc])
        return made[doc]
    return folder


@pytest.mark.parametrize("doc,cmd", [(d, c) for d, _, c in LINES], ids=[f"{d}:{n}" for d, n, _ in LINES])
def test_shown_line_runs(doc, cmd, sessions, monkeypatch, capsys):
    why = next((r for frag, r in NOT_HERE.items() if frag in cmd), None)
    if why:
        pytest.skip(why)
    monkeypatch.chdir(sessions(doc))
    for pattern, repl in STAND_INS:
        cmd = re.sub(pattern, repl, cmd)
    argv = shlex.split(cmd)
    assert argv[0] == "reward-auditor", cmd
    rc = main(argv[1:] + ["--no-report"])
    err = capsys.readouterr().err
    assert rc == 0, f"{cmd}\n{err}"
    assert "error" not in err, f"{cmd}\n{err}"


def test_readme_genjudge_lines_run_in_order(tmp_path, monkeypatch, capsys):
    "The generative-judge lines, verbatim, against an OpenAI-compatible stand-in serving one judge on their port."
    from urllib.parse import urlparse
    from fake_judge import FakeJudgeServer
    cmds = [c for _, _, c in LINES if "--kind genjudge" in c]
    assert len(cmds) >= 2
    url = urlparse(shlex.split(cmds[0])[shlex.split(cmds[0]).index("--endpoint") + 1])
    try:
        srv = FakeJudgeServer(port=url.port, judges=("length-judge",))
    except OSError as e:
        pytest.skip(f"port {url.port} is taken on this machine ({e}); the lines need it for the stand-in server")
    monkeypatch.chdir(tmp_path)
    served = []
    with srv:
        for cmd in cmds:
            before = srv.requests
            rc = main(shlex.split(cmd)[1:] + ["--no-report"])
            err = capsys.readouterr().err
            assert rc == 0, (cmd, err)
            served.append(srv.requests - before)
    assert served[0] > 0 and served[1:] == [0] * (len(cmds) - 1), served  # the later lines read stored generations
    v = pd.read_parquet(tmp_path / "runs" / "genjudge" / "verdicts.parquet")
    assert {"condition", "id", "order", "sample", "verdict"} <= set(v.columns) and "original" in set(v["condition"])


def test_every_skipped_line_is_marked_on_purpose():
    "Each reason in the table still matches a shown line (a stale mark would hide a new line); so does each stand-in."
    for frag in NOT_HERE:
        assert any(frag in c for _, _, c in LINES), frag
    for pattern, _ in STAND_INS:
        assert any(re.search(pattern, c) for _, _, c in LINES), pattern


def test_stand_ins_replace_what_they_stand_for(tmp_path):
    standin_data(tmp_path)
    line = ("reward-auditor audit --data rm-bench/chat_filtered.json ../rmbench_chat.json "
            "--model Skywork/Skywork-Reward-V2-Qwen3-0.6B --device cuda --out runs/x")
    for pattern, repl in STAND_INS:
        line = re.sub(pattern, repl, line)
    assert line == "reward-auditor audit --data rmbench-chat.jsonl rmbench-chat.jsonl --scorer overlap --device cpu --out runs/x"
    assert (tmp_path / "rmbench-chat.jsonl").read_text().count("\n") == 16


# ---- Python blocks ---------------------------------------------------------------------------------------------

# a fragment of a block → why the block is not run here
PY_NOT_HERE = {
    'engine={"name": "ray"': "starts Ray; tests/test_engines.py runs a Ray audit "
                             "(its scorer specs are loaded by test_shown_scorer_specs_load)",
}

# the model folders shown in Python blocks → the tiny model that stands for them (what each folder holds: an SFT
# or DPO policy is a causal LM, a reward model a sequence classifier)
STAND_IN_MODELS = {"ckpt/sft": "lm", "ckpt/dpo": "lm", "ckpt/rm": "rm"}

PY_BLOCKS = [(_rel(d), n, body) for d in DOCS if d.suffix == ".md" for n, _, body in fenced(doc_text(d), ("python",))]
# the chapters' prose shows Python too (a chapter's code cells run under nbdev-test; these blocks are illustrations)
NB_PY_BLOCKS = [(_rel(d), n, body) for d in sorted((REPO / "nbs").rglob("*.ipynb"))
                for n, _, body in fenced(doc_text(d), ("python",))]


@pytest.mark.parametrize("doc,line,code", PY_BLOCKS + NB_PY_BLOCKS,
                         ids=[f"{d}:{n}" for d, n, _ in PY_BLOCKS + NB_PY_BLOCKS])
def test_shown_python_compiles(doc, line, code):
    compile(code, f"{doc}:{line}", "exec")


@pytest.mark.parametrize("doc", sorted({d for d, _, _ in PY_BLOCKS}))
def test_shown_python_runs_in_order(doc, tmp_path):
    "A document's Python blocks run as one session (a later block uses what an earlier one made), in a fresh process."
    blocks = [(n, c) for d, n, c in PY_BLOCKS if d == doc]
    run = [(n, c) for n, c in blocks if not any(frag in c for frag in PY_NOT_HERE)]
    if not run:
        pytest.skip("every block is marked: " + "; ".join(sorted(PY_NOT_HERE.values())))
    script = "\n".join(f"print('--- {doc}:{n}', flush=True)\nexec(compile({c!r}, '{doc}:{n}', 'exec'))"
                       for n, c in run)
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]


def _scorer_lists(code: str) -> list:
    "The literal scorer lists of the `audit(data, [scorers…], …)` calls of a block."
    import ast
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "audit" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.List):
            try:
                out.append(ast.literal_eval(node.args[1]))
            except ValueError:
                pass  # built from variables: the block's own run loads them
    return out


def test_shown_scorer_specs_load(tmp_path, monkeypatch):
    "Every literal scorer list a Python block shows loads, with a tiny model of the right kind at each folder it names."
    from tiny_models import tiny_lm, tiny_rm

    from reward_auditor.specs import scorers_from
    lists = [spec for _, _, c in PY_BLOCKS for spec in _scorer_lists(c)]
    assert any(isinstance(s, dict) for lst in lists for s in lst)  # the mixed list of the spec example is found
    monkeypatch.chdir(tmp_path)
    for folder, kind in STAND_IN_MODELS.items():
        (tiny_lm if kind == "lm" else tiny_rm)(tmp_path / folder)
    for specs in lists:
        for spec in specs:
            paths = [v for v in ([spec.split("=", 1)[-1]] if isinstance(spec, str) else
                                 [spec.get("model"), spec.get("reference")]) if v and "/" in v]
            assert all(p in STAND_IN_MODELS for p in paths), f"{spec}: add a stand-in model for {paths}"
        assert len(scorers_from(specs)) == len(specs), specs


TUTORIALS = sorted((REPO / "nbs" / "tutorials").glob("*.ipynb"))


@pytest.mark.parametrize("nb", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorials_run_under_papermill_as_written(nb):
    "`papermill walkthrough.ipynb out.ipynb -p ...` needs the kernel and language in the notebook itself."
    import nbformat
    from papermill.utils import nb_kernel_name, nb_language
    node = nbformat.read(nb, as_version=4)
    assert nb_kernel_name(node) and nb_language(node) == "python"


def _stated_commands(nb: Path) -> list[str]:
    import json
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells)
    return re.findall(r"`(reward-auditor [^`]+)`", text)


@pytest.mark.parametrize("nb", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorials_stated_commands_parse(nb):
    "Each `reward-auditor ...` a tutorial tells the reader to type is a valid command line; a resume names the model and data."
    from reward_auditor.cli import build_parser
    for cmd in _stated_commands(nb):
        argv = shlex.split(cmd)[1:]
        ns, extra = build_parser().parse_known_args(argv)
        assert not extra, cmd
        if "--resume" in argv:
            assert "--model" in argv or "--scorer" in argv, f"{nb.name}: {cmd} (resuming needs the model again)"
            assert "--data" in argv or "--conditions" in argv, f"{nb.name}: {cmd} (resuming needs the data again)"


def test_walkthrough_real_model_cell_is_quiet():
    "The real-model cell runs without bars and leaves the truncation warnings to the manifest's one line each."
    import json
    cells = json.loads((REPO / "nbs" / "tutorials" / "walkthrough.ipynb").read_text(encoding="utf-8"))["cells"]
    src = next("".join(c["source"]) for c in cells if "if model:" in "".join(c["source"]))
    assert "progress=False" in src and "manifest" in src


# ---- what the pages say a run shows ----------------------------------------------------------------------------

def _prose() -> str:
    return " ".join(" ".join(doc_text(d) for d in DOCS).split())


def test_what_the_demo_shows_is_what_the_demo_flags():
    "The demo's paragraph names exactly the perturbations under which each control is flagged (the demo's settings)."
    import warnings

    from reward_auditor.audit import audit
    from reward_auditor.cli import CONTROL_SCORERS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = audit("sample", list(CONTROL_SCORERS), "all", seed=0, permutations=10_000, progress=False)
    if res.manifest["skipped_perturbations"]:
        pytest.skip(f"perturbations unavailable here: {res.manifest['skipped_perturbations']}")
    t = res.table
    text = _prose()
    words = {3: "three", 6: "six"}
    for model in ("overlap", "length"):
        flagged = set(t.loc[(t["model"] == model) & t["significant"], "perturbation"])
        m = re.search(rf"`{model}` \([^)]*\) is flagged under (\w+) perturbations \(([A-Z, ]+)\)"
                      if model == "overlap" else rf"`{model}` \([^)]*\) is flagged under (\w+) \(([A-Z, ]+)\)", text)
        assert m, f"the demo's paragraph no longer says where `{model}` is flagged"
        stated = {c.strip() for c in m.group(2).split(",")}
        assert stated == flagged and m.group(1) == words.get(len(flagged)), (model, stated, sorted(flagged))
    assert not t.loc[t["model"] == "noise", "significant"].any() and "`noise`" in text and "flagged nowhere" in text


def test_what_the_score_file_table_says_an_audit_does_with_an_id_keyed_file(tmp_path):
    "An id says nothing about a perturbed text: an audit with such a file is refused, and the table says so."
    from reward_auditor.audit import AuditError, audit
    (tmp_path / "by_id.jsonl").write_text('{"id": "chat-001", "reward_chosen": 1.3, "reward_rejected": -0.2}\n')
    with pytest.raises(AuditError, match="keyed by id scores only the original texts"):
        audit("sample", [str(tmp_path / "by_id.jsonl")], "EF", permutations=100, progress=False)
    row = next(line for d in DOCS for line in doc_text(d).splitlines()
               if line.startswith("| `id`, `reward_chosen`, `reward_rejected` |"))
    assert "refused" in row and "not covered" not in row, row
