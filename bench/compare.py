"""Speed and null error rate of the model comparison (`reward_auditor.compare`), in one run.

    python bench/compare.py             # 26 models, 5 subsets x 10 perturbations x N = 3000, B = 1e4; null check
    python bench/compare.py --quick     # 6 models, N = 500, B = 2000: a smoke run
    python bench/compare.py --full      # also the engine run once over every pair column of one subset

Prints CPU and wall time of `compare` end to end (325 pairs x 10 perturbations x 5 subsets = 16,250 robustness
tests, each in the margin and the decision version, and 325 x 11 x 5 McNemar tests), the ratio against a per-test
loop (the engine called once per pair and perturbation, timed on a sample of tests and scaled to all of them),
and the any-verdict rate of 500+ simulated comparison families under the global null (identical-in-distribution
models) with its standard error. BLAS threads default to 1. Timings only; nothing here is asserted.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ["OMP_NUM_THREADS"])

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # run from a clone without installing
from reward_auditor import compare as C  # noqa: E402
from reward_auditor import multiplicity, stats  # noqa: E402

PERTS = ("EF", "PH", "IU", "IW", "CN", "ST", "LE", "SP", "LC", "SLC")
SUBSETS = ("chat", "math", "code", "safety-refuse", "safety-response")


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def per_test_loop(run, models, B, sample, seed=0):
    "The engine once per (pair, perturbation) on one subset: CPU seconds per test (both tails, both versions)."
    it = run.items[run.items["subset"] == SUBSETS[0]]
    items = it.assign(_delta=C._confidence_delta(it, "prob"),
                      _flip=C.decision_flips(it["margin_before"], it["margin_after"]))
    cube = {v: C.item_cube(items, models, list(PERTS), col)[0] for v, col in (("margin", "_delta"),
                                                                             ("decision", "_flip"))}
    pairs = C.model_pairs(range(len(models)))
    g = np.random.default_rng(seed)
    picks = [(pairs[int(g.integers(len(pairs)))], int(g.integers(len(PERTS)))) for _ in range(sample)]

    def loop():
        for (a, b), l in picks:
            for v in cube:
                col = cube[v][:, a, l] - cube[v][:, b, l]
                stats.signflip_tests(np.column_stack([col, -col]), B=B, seed=seed)
    _, cpu, wall = timed(loop)
    return cpu / sample, wall / sample


def engine_all_columns(run, models, B, seed=0):
    "The engine once over all pair x perturbation columns of one subset (both tails, margin version)."
    it = run.items[run.items["subset"] == SUBSETS[0]]
    cube = C.item_cube(it.assign(_delta=C._confidence_delta(it, "prob")), models, list(PERTS), "_delta")[0]
    pairs = C.model_pairs(range(len(models)))
    V = np.column_stack([cube[:, a, l] - cube[:, b, l] for a, b in pairs for l in range(len(PERTS))])
    _, cpu, wall = timed(lambda: stats.signflip_tests(np.hstack([V, -V]), B=B, seed=seed))
    return cpu, wall


def null_rate(reps, K, N, L, B, version, alpha=0.05, seed=0):
    "Share of simulated families (K identical-in-distribution models, L perturbations) with any verdict."
    g = np.random.default_rng(seed)
    pairs = C.model_pairs(range(K))
    hits = 0
    for rep in range(reps):
        d = g.normal(0, 1, (N, 1, L)) + g.normal(0, 1, (N, K, L))
        if version == "decision":
            d = np.clip(np.round(d / 2), -1, 1)
        r = C.pair_signflip(d, pairs, B=B, seed=C.family_seed(seed, rep))
        up, down = multiplicity.adjust_tails(r["p_greater"].ravel(), r["p_less"].ravel(), "bh", alpha=alpha)
        hits += bool(up.rejected.any() or down.rejected.any())
    return hits / reps, math.sqrt(alpha * (1 - alpha) / reps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--sample", type=int, default=20, help="tests timed in the per-test loop (default 20)")
    ap.add_argument("--reps", type=int, default=500, help="null families per version (default 500)")
    a = ap.parse_args(argv)
    K, N, B = (6, 500, 2000) if a.quick else (26, 3000, 10_000)
    models = [f"rm{k:02d}" for k in range(K)]
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, cpus={os.cpu_count()}")
    run, cpu, wall = timed(lambda: C.simulate_run(models, n=N, perturbations=PERTS, subsets=SUBSETS, seed=0, B=B))
    print(f"simulated audit: {K} models x {len(SUBSETS)} subsets x {len(PERTS)} perturbations x N = {N} "
          f"({len(run.items):,} item rows) in {wall:.1f} s")
    cmp, cpu, wall = timed(lambda: C.compare(run))
    n_rob, n_acc = len(cmp.robustness), len(cmp.accuracy)
    print(f"compare: {n_rob:,} robustness tests (x 2 versions, both tails) + {n_acc:,} McNemar tests, B = {B}: "
          f"CPU {cpu:.1f} s, wall {wall:.1f} s")
    per_cpu, per_wall = per_test_loop(run, models, B, a.sample)
    loop_cpu = per_cpu * n_rob
    print(f"per-test loop (engine once per pair x perturbation, both versions; {a.sample} tests timed): "
          f"{per_cpu * 1e3:.1f} ms CPU per test -> {loop_cpu:.0f} s CPU for all {n_rob:,}")
    print(f"ratio: compare is {loop_cpu / cpu:.1f}x faster in CPU time than the per-test loop "
          f"(its whole run, accuracy and effect sizes included, against the loop's sign-flip tests alone)")
    if a.full:
        ecpu, ewall = engine_all_columns(run, models, B)
        print(f"engine over all {len(C.model_pairs(models)) * len(PERTS)} pair columns of one subset (margin, both "
              f"tails): CPU {ecpu:.1f} s, wall {ewall:.1f} s -> x{len(SUBSETS) * 2} = {ecpu * len(SUBSETS) * 2:.0f} s "
              f"CPU for the whole comparison")
    print(f"findings: {len(cmp.findings())} (the simulated models are identical in distribution)")
    for version in C.ON:
        (rate, se), cpu, _ = timed(lambda: null_rate(a.reps, K=4, N=60, L=3, B=2000, version=version))
        print(f"null, {version}: any-verdict rate {rate:.3f} over {a.reps} families of 4 models x 3 perturbations "
              f"(18 tests, BH, both tails; alpha 0.05, SE {se:.3f}, bound alpha + 3 SE = {0.05 + 3 * se:.3f}) "
              f"in {cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
