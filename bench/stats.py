"""Speed of the sign-flip engine against scipy.stats.permutation_test on the same inputs, in one run.

    python bench/stats.py            # one scipy call per size (the 10-call family cost is 10 x that call)
    python bench/stats.py --full     # also run the 10 scipy calls of the family for real (~10 minutes)
    python bench/stats.py --quick    # smaller sizes, for a smoke run
    python bench/stats.py --engine   # only the Monte Carlo kernel against the arithmetic floor and the previous kernel

Prints wall and CPU times with their ratios (CPU time is the fairer ratio on a machine shared with other work),
the p-values of both implementations against the Monte Carlo tolerance `4·sqrt(p(1-p)/B) + 1/(B+1)`, and the
time and peak memory of the statistics of a paper-scale audit. BLAS threads default to 1 (set OMP_NUM_THREADS
to change). Timings only; nothing here is asserted.
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

# the floor of a test is measured on this machine (`arithmetic_floor`): N·B·K multiply-adds at the measured
# float32 GEMM rate; generating the random signs is work a test must do but is not in the floor


def best_of(fn, repeat):
    "Best wall time of `repeat` calls, the CPU time of that call, and the last result."
    best, cpu, out = math.inf, math.inf, None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        w = time.perf_counter() - t
        if w < best:
            best, cpu = w, time.process_time() - c
    return best, cpu, out


def previous_mc_count_linear(V, alternative, B, seed, chunk=None):
    "The Monte Carlo kernel before byte tables (float32 0/1 matrix product, default chunks), frozen as the baseline."
    from reward_auditor.stats import sign_words, words_to_bits
    n, K = V.shape
    npad = 64 * ((n + 63) // 64)
    Vp = np.zeros((npad, K), np.float64)
    Vp[:n] = V
    V32 = Vp.astype(np.float32)
    colsum, absum = Vp.sum(axis=0), np.abs(Vp).sum(axis=0)
    sgn = -1.0 if alternative == "less" else 1.0
    obs = np.abs(colsum) if alternative == "two-sided" else sgn * colsum
    thr = obs - 1e-12 * np.maximum(1.0, absum)
    bound = 2.0 * 1.5 * (min(512, npad) + 2) * 2.0 ** -24 * absum + 1e-300
    counts = np.zeros(K, np.int64)
    buf = None
    for words in sign_words(seed, B, n, chunk):
        bits = words_to_bits(words)
        if buf is None or buf.shape[0] < bits.shape[0]:
            buf = np.empty(bits.shape, np.float32)
        bf = buf[: bits.shape[0]]
        np.copyto(bf, bits, casting="unsafe")
        U = np.zeros((bf.shape[0], K))
        for s in range(0, npad, 512):
            U += bf[:, s:s + 512] @ V32[s:s + 512]
        T = 2.0 * U - colsum
        stat = np.abs(T) if alternative == "two-sided" else sgn * T
        gap = stat - thr
        counts += np.count_nonzero(gap >= bound, axis=0)
        near = np.abs(gap) < bound
        if near.any():
            rows, cols = np.nonzero(near)
            for k in np.unique(cols):
                r = rows[cols == k]
                T64 = (bits[r].astype(np.float64) * 2 - 1) @ Vp[:, k]
                st = np.abs(T64) if alternative == "two-sided" else sgn * T64
                counts[k] += int(np.count_nonzero(st >= thr[k]))
    return counts


def arithmetic_floor(N, B, K):
    """Seconds for N·B·K multiply-adds at this CPU's measured float32 GEMM rate (the floor, sign generation
    excluded), that rate, and the seconds to draw the PCG64 words of B sign vectors (reported beside it)."""
    a = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
    t_mm = best_of(lambda: a @ a, 5)[0]
    gflops = 2 * 1024 ** 3 / t_mm / 1e9
    W = (N + 63) // 64
    bg = np.random.default_rng(0).bit_generator
    chunk = 4096
    t_bits = best_of(lambda: [bg.random_raw(min(chunk, B - i) * W) for i in range(0, B, chunk)], 5)[0]
    return 2.0 * N * B * K / (gflops * 1e9), gflops, t_bits


def engine_vs_floor(N, B, repeat=3):
    "The Monte Carlo kernel for one test and a family of 10, against the floor and the previous kernel."
    rng = np.random.default_rng(1)
    d = rng.normal(0.006, 0.2, N)
    print(f"\nsign-flip Monte Carlo kernel, N={N}, B={B:g} (best of {repeat}; ratios of wall times)")
    goals = {1: 15, 10: 5}
    for K in (1, 10):
        V = np.column_stack([d + rng.normal(0, 0.05, N) * k for k in range(K)])
        floor, gflops, t_bits = arithmetic_floor(N, B, K)
        t_new, c_new, cn = best_of(lambda: stats._mc_count_linear(V, "greater", B, 0), repeat)
        t_old, c_old, co = best_of(lambda: previous_mc_count_linear(V, "greater", B, 0), repeat)
        same = bool(np.array_equal(cn, co))
        label = "one test" if K == 1 else f"family of {K}"
        print(f"  {label:13s} floor {floor * 1e3:7.1f} ms ({N}·{B:g}·{K} multiply-adds at {gflops:.0f} GFLOP/s, "
              f"measured; drawing the signs, not in the floor: {t_bits * 1e3:.1f} ms)")
        print(f"  {'':13s} ours {t_new * 1e3:7.1f} ms = {t_new / floor:5.1f}x floor (goal <= {goals[K]}x);  "
              f"previous {t_old * 1e3:7.1f} ms = {t_old / floor:5.1f}x floor;  speed-up x{t_old / t_new:.2f};  "
              f"counts {'equal' if same else 'DIFFER'}")


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
    ap.add_argument("--engine", action="store_true", help="only the kernel against the floor and the previous kernel")
    a = ap.parse_args()
    N, B = (1000, 10_000) if a.quick else (5000, 100_000)
    if a.engine:
        engine_vs_floor(N, B)
        return
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
    t_ours, c_ours, r = best_of(lambda: stats.signflip_test(d, B=B, seed=0), 3)
    t_sp, c_sp, p_sp = best_of(lambda: scipy_paired(x, y, B, 0), 1)
    ok = abs(r.pvalue - p_sp) <= 2 * tol(r.pvalue, B)
    rows.append((f"one test N={N} B={B:g}", t_sp, c_sp, t_ours, c_ours,
                 f"p ours {r.pvalue:.5f}, scipy {p_sp:.5f} ({'within' if ok else 'OUTSIDE'} 2x MC tolerance)"))

    # 3. a family of 10 sharing one sign stream
    D = np.column_stack([d + rng.normal(0, 0.05, N) * k for k in range(10)])
    t_fam, c_fam, fam = best_of(lambda: stats.signflip_tests(D, B=B, seed=0), 3)
    if a.full:
        t0, c0 = time.perf_counter(), time.process_time()
        for k in range(10):
            scipy_paired(D[:, k], np.zeros(N), B, k)
        t_sp10, c_sp10, how = time.perf_counter() - t0, time.process_time() - c0, "10 calls measured"
    else:
        t_sp10, c_sp10, how = 10 * t_sp, 10 * c_sp, "scipy = 10 x the single call"
    rows.append((f"family of 10, N={N} B={B:g}", t_sp10, c_sp10, t_fam, c_fam,
                 f"{how}; ours {c_fam / 10:.3f} s CPU per test"))

    print()
    print(f"{'case':30s} {'scipy wall':>10s} {'CPU':>7s} {'ours wall':>9s} {'CPU':>6s} {'ratio wall':>10s} "
          f"{'CPU':>6s}  note")
    for name, ts, cs, to, co, note in rows:
        print(f"{name:30s} {ts:10.2f} {cs:7.2f} {to:9.3f} {co:6.3f} {ts / to:9.0f}x {cs / co:5.0f}x  {note}")
    if not a.quick:
        floor, gflops, _ = arithmetic_floor(N, B, 1)
        print(f"{'measured floor, one test':30s} {'':10s} {'':7s} {floor:9.3f} {'':6s} "
              f"ours / floor = {t_ours / floor:.0f}x wall, {c_ours / floor:.0f}x CPU (stretch goal: <= 20x; "
              f"floor = N·B multiply-adds at {gflops:.0f} GFLOP/s, sign generation excluded)")
    print(f"\npaper-scale audit statistics: {n_tests} tests ({n_models} models x 5 subsets x 10 perturbations, N=500, "
          f"B=1e4) in {t_paper:.2f} s wall, {c_paper:.2f} s CPU; peak traced allocation of one model's 50 tests "
          f"{peak / 2**20:.1f} MiB; process max RSS after the audit {maxrss:.0f} MiB")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times grow with load)")
    print(f"family p-values: {np.round(fam.pvalue, 4).tolist()}")
    engine_vs_floor(N, B)


if __name__ == "__main__":
    main()
