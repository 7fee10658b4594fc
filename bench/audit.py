"""Default audit of n RM-Bench pairs with a control scorer: this tree against a baseline tree, CPU, wall and peak RSS.

Usage: OMP_NUM_THREADS=1 python bench/audit.py --base /tmp/base55 [--n 200] [--permutations 10000] [--repeats 3]
       [--report]  (each run then renders its report too, as `reward-auditor audit` does by default)
       [--decompose]  (two more rows: this tree's first audit with the meaning check's screen off, and with the
                       check off, so the check's cost and the screen's saving read off the table)
       [--torch-loaded]  (every audit process imports torch first, as an audit of a neural reward model does)
       [--source-only]  (no bytecode caches: every audit process and report kernel compiles the package from source,
                         as on a machine that sets PYTHONDONTWRITEBYTECODE; no pip install leaves a package so)
(the RM-Bench files are read from $REWARD_AUDITOR_SHARED_DATA/rm-bench, else ../shared/data/rm-bench)

Make the baseline tree outside the repository first, e.g. `git archive 55bb319 | tar -x -C /tmp/base55` (the
previous round's code). Both trees are byte-compiled first (`compileall`), as pip does when it installs a package.
Each audit runs in a fresh process of the same interpreter with one torch thread; CPU is that process plus its
children, peak RSS that process's maximum resident set. Rows:

- `base first`: the baseline's audit (every condition made; 55bb319 had no meaning check);
- `ours first`: this tree's audit with an empty perturbation store;
- `ours second`: this tree's audit of the same data with another control scorer into another folder (every
  condition from the store: the cost an engineer pays for each further reward model).

With `--repeats K` the two first audits are alternated K times and their medians compared: on a shared
machine one run's CPU seconds vary by about 10 %. The items are those of bench/perturb.py (the four RM-Bench
files, concise answers first). Ratios are printed against `base first`; the targets are ours first <= 1.3x
(with its report, the same bytes) and ours second <= 1.2x the baseline's first audit.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RUN = r"""
import json, os, resource, sys, time
if os.environ.get("BENCH_TORCH_LOADED"):   # as an audit of a neural reward model: torch loaded before the audit
    import torch
sys.path.insert(0, sys.argv[1])
import pandas as pd
from reward_auditor.audit import audit
df = pd.read_parquet(sys.argv[2])
t0 = time.perf_counter()
r = audit(df, sys.argv[4], "all", permutations=int(sys.argv[5]), out=sys.argv[6], progress=False,
          **({} if sys.argv[8] == "on" else {"semantic_check": False}))
if sys.argv[7] == "report":   # the report as the command line renders it (a notebook kernel: a child process)
    from reward_auditor.report import render
    render(sys.argv[6])
wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, "wall": wall,
                  "rss_mib": me.ru_maxrss / 1024, "stages": r.manifest.get("cpu_seconds"),
                  "store": (r.manifest.get("perturbation_store") or {}).get("conditions")}))
"""


def run(tree: Path, scorer: str, data: Path, permutations: int, out: Path, cache: Path, store: str,
        report: bool = False, check: str = "on", env_extra: dict | None = None) -> dict:
    env = {**os.environ, **(env_extra or {}), "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "REWARD_AUDITOR_CACHE": str(cache), "REWARD_AUDITOR_STORE": store, "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    r = subprocess.run([sys.executable, "-c", RUN, str(tree), str(data), "0", scorer, str(permutations), str(out),
                        "report" if report else "-", check],
                       env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"audit in {tree} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def minilm_cache(root: Path) -> Path:
    "A fresh user cache with the unpacked MiniLM folder linked in (unpacking is not what is measured)."
    sys.path.insert(0, str(REPO))
    from reward_auditor.perturbations import minilm_folder
    root.mkdir(parents=True, exist_ok=True)
    folder = minilm_folder()
    if folder is not None:
        (root / folder.parent.name).mkdir(exist_ok=True)
        (root / folder.parent.name / folder.name).symlink_to(folder)
    return root


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the baseline tree (e.g. /tmp/base55 from git archive 55bb319)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--permutations", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=1,
                    help="first audits of base and ours alternated this many times; medians compared (CPU seconds "
                         "on a shared machine vary by about 10 %% from run to run)")
    ap.add_argument("--report", action="store_true",
                    help="render each run's report too (the command line's default), its kernel's CPU included")
    ap.add_argument("--torch-loaded", action="store_true",
                    help="every audit process imports torch first, as an audit of a neural reward model does")
    ap.add_argument("--source-only", action="store_true",
                    help="no bytecode caches: every process compiles the package from source (as where "
                         "PYTHONDONTWRITEBYTECODE is set)")
    ap.add_argument("--decompose", action="store_true",
                    help="also this tree's first audit with the screen off (REWARD_AUDITOR_SCREEN=off) and with the "
                         "meaning check off")
    a = ap.parse_args()
    if a.torch_loaded:
        os.environ["BENCH_TORCH_LOADED"] = "1"
    if a.source_only:   # Python looks for bytecode in an empty folder (and, told not to write any, compiles each time)
        os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench-nopyc-")
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    else:   # as a pip install leaves them: each module's bytecode written once, beside its source
        import compileall
        for tree in (Path(a.base), REPO):
            compileall.compile_dir(str(tree / "reward_auditor"), quiet=1)
    rows: dict[str, list] = {"base first": [], "ours first": []}
    if a.decompose:
        rows.update({"ours, screen off": [], "ours, check off": []})
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        sys.path.insert(0, str(REPO / "bench"))
        from perturb import items
        data = d / "items.parquet"
        items(a.n, "rmbench-all").to_parquet(data, index=False)
        for k in range(a.repeats):
            rows["base first"].append(run(Path(a.base), "length", data, a.permutations, d / f"base{k}",
                                          minilm_cache(d / f"b{k}"), "off", a.report))
            rows["ours first"].append(run(REPO, "length", data, a.permutations, d / f"o{k}",
                                          minilm_cache(d / f"c{k}"), "on", a.report))
            if a.decompose:
                rows["ours, screen off"].append(run(REPO, "length", data, a.permutations, d / f"s{k}",
                                                    minilm_cache(d / f"s{k}c"), "on", a.report,
                                                    env_extra={"REWARD_AUDITOR_SCREEN": "off"}))
                rows["ours, check off"].append(run(REPO, "length", data, a.permutations, d / f"x{k}",
                                                   minilm_cache(d / f"x{k}c"), "on", a.report, check="off"))
        rows["ours second"] = [run(REPO, "overlap", data, a.permutations, d / "second", d / "c0", "on", a.report)]
        shutil.rmtree(d, ignore_errors=True)
    med = {k: {m: float(np.median([r[m] for r in v])) for m in ("cpu", "wall", "rss_mib")} for k, v in rows.items()}
    b = med["base first"]
    print(f"default audit{' with its report' if a.report else ''}, {a.n} RM-Bench pairs, control scorer, "
          f"B={a.permutations}, one torch thread, "
          f"{a.repeats} alternated run(s) of each first audit (medians; CPU range in brackets)")
    print(f"{'run':17s} {'CPU s':>8s} {'range':>15s} {'wall s':>8s} {'RSS MiB':>8s} {'CPU ratio':>10s} {'RSS ratio':>10s}")
    for k, m in med.items():
        cpus = [r["cpu"] for r in rows[k]]
        print(f"{k:17s} {m['cpu']:8.1f} {f'[{min(cpus):.1f}, {max(cpus):.1f}]':>15s} {m['wall']:8.1f} "
              f"{m['rss_mib']:8.0f} {m['cpu'] / b['cpu']:10.2f} {m['rss_mib'] / b['rss_mib']:10.2f}")
    paired = [o["cpu"] / b_["cpu"] for b_, o in zip(rows["base first"], rows["ours first"])]
    print(f"ours first / base first, run by run (each pair run back to back): "
          f"{', '.join(f'{r:.2f}' for r in paired)}; median {np.median(paired):.2f}")
    for k in ("ours first", "ours second"):
        print(f"{k}: stages {json.dumps(rows[k][-1]['stages'])}")


if __name__ == "__main__":
    main()
