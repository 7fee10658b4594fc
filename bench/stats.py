"""Speed of the sign-flip engine against scipy.stats.permutation_test on the same inputs, in one run.

    python bench/stats.py            # one scipy call per size (the 10-call family cost is 10 x that call)
    python bench/stats.py --full     # also run the 10 scipy calls of the family for real (~10 minutes)
    python bench/stats.py --quick    # smaller sizes, for a smoke run

Prints a table of wall times and ratios, the p-values of both implementations with the Monte Carlo tolerance
`4·sqrt(p(1-p)/B) + 1/(B+1)`, and the peak memory of the paper-scale audit. BLAS threads default to 1
(set OMP_NUM_THREADS to change).
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ["OMP_NUM_THREADS"])

import argparse
import math
import platform
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # run from a clone without installing
from reward_auditor import multiplicity, stats  # noqa: E402

FLOOR_S = 0.015          # STATS §11: physical floor of one N = 5000, B = 1e5 test is about 5-15 ms


CPU = {}


def best_of(fn, repeat):
    "Best wall time of `repeat` calls (its CPU time goes to CPU[fn]), and the last result."
    best, out = math.inf, None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        if time.perf_counter() - t < best:
            best, CPU[fn.__name__ if fn.__name__ != "<lambda>" else id(fn)] = time.perf_counter() - t, time.process_time() - c
    return best, out


def scipy_paired(x, y, B, seed):
    "scipy's paired permutation test of mean(x - y), vectorized, batch 10^4."
    return scipy.stats.permutation_test((x, y), lambda a, b, axis: np.mean(a - b, axis=axis),
                                        permutation_type="samples", vectorized=True, n_resamples=B, batch=10_000,
                                        alternative="greater", rng=seed).pvalue


def tol(p, B):
    return 4 * math.sqrt(p * (1 - p) / B) + 1 / (B + 1)


def paper_scale(n_models=26, n_subsets=5, n_pert=10, N=500, B=10_000):
    "All statistics of one paper-scale audit: per family the shared-sign tests, effect sizes, BH and verdicts."
    rng = np.random.default_rng(0)
    rows = 0
    for m in range(n_models):
        for s in range(n_subsets):
            base = rng.normal(1.0, 1.5, N)
            shift = rng.normal(0.05, 0.1, n_pert)
            after = base[:, None] - shift - rng.normal(0, 0.5, (N, n_pert))
            after = np.where(rng.random((N, n_pert)) < 0.2, base[:, None], after)   # unchanged items: d = 0
            M0 = stats.confidence(base)
            M1 = stats.confidence(after)
            D = M0[:, None] - M1
            res = stats.signflip_tests(D, B=B, seed=m * 1000 + s)
            eff = [stats.effect_sizes(M0, M1[:, k]).d_z for k in range(n_pert)]
            adj = multiplicity.adjust(res.pvalue, "bh")
            stats.risk_report(eff, adj.p_adjusted)
            rows += n_pert
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="run the 10 scipy calls of the family for real")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    a = ap.parse_args()
    N, B = (1000, 10_000) if a.quick else (5000, 100_000)
    print(f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
          f"{os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")

    # 1. paper scale first, so that the process's peak RSS is the audit's (scipy's batches come later)
    n_models = 4 if a.quick else 26
    paper_scale(n_models=1)                                 # warm-up: imports, quadrature nodes, BLAS
    t0, c0 = time.perf_counter(), time.process_time()
    n_tests = paper_scale(n_models=n_models)
    t_paper, c_paper = time.perf_counter() - t0, time.process_time() - c0
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tracemalloc.start()
    paper_scale(n_models=1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    rng = np.random.default_rng(1)
    x = rng.normal(0.6, 0.2, N)
    y = x - rng.normal(0.006, 0.2, N)
    d = x - y
    rows = []

    # 2. one test
    one = lambda: stats.signflip_test(d, B=B, seed=0)
    t_ours, r = best_of(one, 3)
    t_sp, p_sp = best_of(lambda: scipy_paired(x, y, B, 0), 1)
    ok = abs(r.pvalue - p_sp) <= 2 * tol(r.pvalue, B)
    rows.append((f"one test N={N} B={B:g}", t_sp, t_ours, f"p ours {r.pvalue:.5f} scipy {p_sp:.5f} "
                 f"({'within' if ok else 'OUTSIDE'} 2x MC tolerance); ours {CPU[id(one)]:.3f} s CPU"))

    # 3. a family of 10 sharing one sign stream
    D = np.column_stack([d + rng.normal(0, 0.05, N) * k for k in range(10)])
    famf = lambda: stats.signflip_tests(D, B=B, seed=0)
    t_fam, fam = best_of(famf, 2)
    if a.full:
        t0 = time.perf_counter()
        for k in range(10):
            scipy_paired(D[:, k], np.zeros(N), B, k)
        t_sp10, how = time.perf_counter() - t0, "measured"
    else:
        t_sp10, how = 10 * t_sp, "10 x the measured single call"
    rows.append((f"family of 10, N={N} B={B:g}", t_sp10, t_fam, f"scipy time = {how}; {t_fam / 10:.3f} s per test; ours {CPU[id(famf)]:.3f} s CPU"))


    print()
    print(f"{'case':34s} {'scipy s':>9s} {'ours s':>8s} {'ratio':>8s}  note")
    for name, ts, to, note in rows:
        print(f"{name:34s} {ts:9.2f} {to:8.3f} {ts / to:7.0f}x  {note}")
    if not a.quick:
        print(f"{'floor (STATS §11), one test':34s} {'':9s} {FLOOR_S:8.3f} {'':8s}  "
              f"ours / floor = {t_ours / FLOOR_S:.0f}x wall, {CPU[id(one)] / FLOOR_S:.0f}x CPU (stretch goal: <= 20x)")
    print(f"\npaper-scale audit statistics: {n_tests} tests ({n_models} models x 5 subsets x 10 perturbations, N=500, "
          f"B=1e4) in {t_paper:.2f} s wall, {c_paper:.2f} s CPU; peak traced allocation of one model's 50 tests "
          f"{peak / 2**20:.1f} MiB; process max RSS after the audit {maxrss:.0f} MiB")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times grow with load)")
    print(f"family p-values: {np.round(fam.pvalue, 4).tolist()}")


if __name__ == "__main__":
    main()
