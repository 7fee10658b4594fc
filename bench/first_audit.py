"""A user's first audit: `reward-auditor demo` (the bundled sample, the control scorers, the report) in a fresh
process with an empty user cache, this tree against a baseline tree, CPU and peak RSS from `/usr/bin/time -v`.

Usage: python bench/first_audit.py --base /tmp/base55 [--other NAME=TREE ...] [--repeats 3] [--permutations 10000]

Make the baseline tree outside the repository first, e.g. `git archive 55bb319 | tar -x -C /tmp/base55`. Each run
is `python -m reward_auditor.cli demo` of the tree with one BLAS/torch thread, no network and a new empty
`$REWARD_AUDITOR_CACHE` (the perturbation store starts empty: this is the first audit). CPU is user + system
seconds of the whole process tree, RSS the largest resident set of any process in it, both as `time -v` reports
them; each row is the minimum over the repeats (the least disturbed run on a shared machine).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(tree: Path, permutations: int, extra: list[str]) -> tuple[float, float]:
    "(CPU seconds, peak RSS MiB) of one demo audit of `tree` in a fresh process with an empty user cache."
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "REWARD_AUDITOR_CACHE": str(Path(d) / "cache"),
               "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}
        env.pop("REWARD_AUDITOR_STORE", None)
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "reward_auditor.cli", "demo", "--out", str(Path(d) / "run"),
               "--permutations", str(permutations), *extra]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=d)
        if r.returncode:
            raise SystemExit(f"demo in {tree} failed:\n{r.stderr[-3000:]}")
    get = lambda k: float(re.search(rf"{re.escape(k)}: ([\d.]+)", r.stderr).group(1))
    return get("User time (seconds)") + get("System time (seconds)"), get("Maximum resident set size (kbytes)") / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the baseline tree (e.g. /tmp/base55 from git archive 55bb319)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--permutations", type=int, default=10_000)
    ap.add_argument("--other", action="append", default=[], metavar="NAME=TREE",
                    help="a further tree to measure (e.g. head=/tmp/head, an earlier commit of this repository)")
    a = ap.parse_args()
    trees = {"base": Path(a.base), **{o.split("=", 1)[0]: Path(o.split("=", 1)[1]) for o in a.other}}
    trees.setdefault("ours", REPO)
    runs = {name: [] for name in trees}
    for _ in range(a.repeats):          # interleaved: base, others, ours, then again
        for name, tree in trees.items():
            runs[name].append(timed(tree, a.permutations, []))
            print(f"{name}: {runs[name][-1][0]:.2f} CPU s, {runs[name][-1][1]:.0f} MiB", flush=True)
    best = {n: (min(c for c, _ in r), min(m for _, m in r)) for n, r in runs.items()}
    bc, bm = best["base"]
    print(f"first demo audit, min of {a.repeats} (CPU s, peak RSS MiB, ratios to base):")
    for n, (c, m) in best.items():
        print(f"  {n:6s} {c:7.2f} s {m:6.0f} MiB   CPU {c / bc:.2f}x   RSS {m / bm:.2f}x")


if __name__ == "__main__":
    main()
