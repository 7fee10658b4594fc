"""What the calibration inside an audit's save costs: a default audit with and without it, against a baseline tree.

Usage: OMP_NUM_THREADS=1 python bench/audit_calibration.py --base /tmp/base3f [--n 200] [--repeats 5]
(the RM-Bench files are read from $REWARD_AUDITOR_SHARED_DATA/rm-bench, else ../shared/data/rm-bench)

Make the baseline tree outside the repository first: `git archive 3f2eff2 | tar -x -C /tmp/base3f` (the code before
calibration joined the save). Each audit is a default one (every perturbation, control scorer `length`,
B = 10,000, saved to a folder) in a fresh process of this interpreter with one thread; CPU is that process plus its
children. Rows, each the min and median of --repeats runs taken in turn:

- `base`: the baseline's audit (no calibration in its save; it perturbs every time, having no store);
- `ours`: this tree's audit, conditions read from a warm perturbation store (the cheapest audit this tree runs);
- `ours, no calibration`: the same with the save's calibration left out (`audit.calibration_json` replaced);
- `calibration alone`: `calibration(result)` of that run, timed in-process (min and median of --repeats).

The ratio printed is the calibration's CPU over each audit's CPU; the target is <= 10 % of a default audit.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import pandas as pd
import reward_auditor.audit as A
if sys.argv[4] == "skip":
    A.calibration_json = lambda result: {}
    try:  # a tree where the result type has its own chapter: its save reads calibration_json there
        import reward_auditor.audit_result as AR
        AR.calibration_json = A.calibration_json
    except ImportError:  # a baseline tree from before the audit's split
        pass
df = pd.read_parquet(sys.argv[2])
t0 = time.perf_counter()
r = A.audit(df, "length", "all", permutations=10_000, out=sys.argv[3], progress=False)
wall = time.perf_counter() - t0
cal = []
if sys.argv[4] == "alone":
    from reward_auditor.calibration import calibration
    calibration(r)
    for _ in range(int(sys.argv[5])):
        c0 = time.process_time()
        calibration(r)
        cal.append(time.process_time() - c0)
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, "wall": wall, "cal": cal}))
"""


def run(tree: Path, data: Path, out: Path, cache: Path, mode: str, repeats: int = 0) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "REWARD_AUDITOR_CACHE": str(cache), "REWARD_AUDITOR_STORE": "on",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONWARNINGS": "ignore"}
    r = subprocess.run([sys.executable, "-c", RUN, str(tree), str(data), str(out), mode, str(repeats)],
                       env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"audit in {tree} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the baseline tree (git archive 3f2eff2 | tar -x -C DIR)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--base-repeats", type=int, default=2, help="the baseline perturbs every time: fewer runs")
    a = ap.parse_args()
    sys.path.insert(0, str(REPO / "bench"))
    from audit import minilm_cache
    from perturb import items
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        data = d / "items.parquet"
        items(a.n, "rmbench-all").to_parquet(data, index=False)
        cache = minilm_cache(d / "cache")
        run(REPO, data, d / "warm", cache, "full")          # fills the store; not counted
        rows = {"base": [], "ours": [], "ours, no calibration": []}
        for k in range(a.repeats):
            rows["ours"].append(run(REPO, data, d / f"o{k}", cache, "full"))
            rows["ours, no calibration"].append(run(REPO, data, d / f"s{k}", cache, "skip"))
            if k < a.base_repeats:
                rows["base"].append(run(Path(a.base), data, d / f"b{k}", minilm_cache(d / f"cb{k}"), "full"))
        alone = run(REPO, data, d / "alone", cache, "alone", a.repeats)["cal"]
    cal = statistics.median(alone)
    print(f"default audit, {a.n} RM-Bench pairs, control scorer, B=10000, one thread; min / median CPU s of the runs")
    print(f"{'run':22s} {'runs':>4s} {'CPU min':>8s} {'CPU med':>8s} {'wall med':>9s} {'calibration/CPU':>16s}")
    for k, rs in rows.items():
        if not rs:
            continue
        cpu = [r["cpu"] for r in rs]
        print(f"{k:22s} {len(rs):4d} {min(cpu):8.2f} {statistics.median(cpu):8.2f} "
              f"{statistics.median(r['wall'] for r in rs):9.2f} {cal / statistics.median(cpu):15.1%}")
    print(f"{'calibration alone':22s} {len(alone):4d} {min(alone):8.3f} {cal:8.3f}")
    with_, without = (statistics.median(r["cpu"] for r in rows[k]) for k in ("ours", "ours, no calibration"))
    print(f"ours minus ours-without-calibration (median CPU): {with_ - without:+.2f} s")


if __name__ == "__main__":
    main()
