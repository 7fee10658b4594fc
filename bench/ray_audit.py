"""A small audit with the local Ray engine against the same audit in one process: whole process tree CPU, wall.

Usage: OMP_NUM_THREADS=1 python bench/ray_audit.py [--repeats 3] [--perturbations EF,PH,IU,LE] [--limit 60] [--data D] [--tree T]

Each run is a fresh process that calls `reward-auditor audit --data D --model <tiny RM>` (D: the bundled sample unless --data names a file) (the tiny random
reward model of the tests, built offline; --no-report) and, before it exits, adds up the CPU of itself and of every
process below it (for Ray: GCS, raylet, agents, workers and actors, through psutil), then shuts Ray down. Rows:

- `in-process`: the default engine;
- `ray bare`: `ray.init` of a local instance and one trivial task: the fixed cost that is Ray's, not ours;
- `ray, 1 worker`: `--engine ray --workers 1` (perturbing as Ray tasks, scoring by one actor).

`ours` = ray − in-process − ray bare: what the engine's own work adds (actor start and model load, moving units
and results, the driver's commits). Each row is the minimum over the repeats, and
`fill s` is the engine's own fill time from the manifest. The scores are checked bitwise against the in-process
run. Nothing here asserts timings.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DRIVER = r"""
import json, os, resource, sys, time
import psutil
t0 = time.perf_counter()
argv = json.loads(sys.argv[1])
if argv == ["bare"]:
    import ray
    ray.init(include_dashboard=False, log_to_driver=False)
    ray.get(ray.remote(lambda: 1).remote())
    rc = 0
else:
    from reward_auditor.cli import main
    rc = main(argv)
wall = time.perf_counter() - t0
me = psutil.Process()
procs = [me] + me.children(recursive=True)
cpu = 0.0
for p in procs:
    try:
        t = p.cpu_times()
        cpu += t.user + t.system + (t.children_user + t.children_system if p is me else 0.0)
    except psutil.Error:
        pass
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rc": rc, "cpu": cpu, "wall": wall, "processes": len(procs), "rss_mib": rss}))
if "ray" in sys.modules:
    import ray
    ray.shutdown()
"""


def run(argv: list[str], env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argv)], env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{argv[:1]} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--perturbations", default="EF,PH,IU,LE")
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--data", default="sample", help="what --data the audits read (default the bundled sample)")
    ap.add_argument("--unit-batches", type=int, default=4)
    ap.add_argument("--tree", default=str(REPO), help="the tree to measure (default this one; e.g. an earlier commit)")
    a = ap.parse_args()
    tree = Path(a.tree)
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    from tiny_models import tiny_rm
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        rm = tiny_rm(d / "rm")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(REPO / "tests")]), "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "REWARD_AUDITOR_CACHE": str(d / "cache"), "REWARD_AUDITOR_STORE": "off",
               "RAY_USAGE_STATS_ENABLED": "0", "PYTHONWARNINGS": "ignore"}
        common = ["audit", "--data", a.data, "--limit", str(a.limit), "--model", str(rm), "--perturbations",
                  a.perturbations, "-B", "1000", "--device", "cpu", "--dtype", "float32", "--no-report", "-q"]
        configs = {"in-process": lambda k: common + ["--out", str(d / f"local{k}"), "--workers", "1"],
                   "ray bare": lambda k: ["bare"],
                   "ray, 1 worker": lambda k: common + ["--out", str(d / f"ray{k}"), "--engine", "ray", "--workers",
                                                        "1", "--unit-batches", str(a.unit_batches)]}
        rows = {c: [] for c in configs}
        for k in range(a.repeats):          # interleaved: A B C, A B C, ...
            for c, argv in configs.items():
                rows[c].append(run(argv(k), env))
                print(f"{c:14s} run {k + 1}: {json.dumps(rows[c][-1])}", flush=True)
        import pandas as pd
        same = all(pd.read_parquet(d / f"ray{k}" / "items.parquet").equals(pd.read_parquet(d / "local0" / "items.parquet"))
                   for k in range(a.repeats))
        fill = [json.loads((d / f"ray{k}" / "manifest.json").read_text())["engine"] for k in range(a.repeats)]
    best = {c: min(r["cpu"] for r in rs) for c, rs in rows.items()}
    wall = {c: min(r["wall"] for r in rs) for c, rs in rows.items()}
    print(f"\ntree {tree}; small audit: {a.data}, limit {a.limit}, perturbations {a.perturbations}, tiny RM, B=1000; min of {a.repeats}")
    for c in configs:
        print(f"{c:14s} CPU {best[c]:7.2f} s   wall {wall[c]:7.2f} s")
    ours = best["ray, 1 worker"] - best["in-process"] - best["ray bare"]
    print(f"ours (ray - in-process - ray bare): CPU {ours:+.2f} s; ray / in-process CPU "
          f"{best['ray, 1 worker'] / best['in-process']:.2f}x; items bitwise equal: {same}")
    print("engine fill (manifest): " + json.dumps([f.get("by_model") for f in fill]))


if __name__ == "__main__":
    main()
