"""Full calibration tables: error rates of every multiplicity procedure in every tail mode, H0 = symmetry, and the
coverage of the d_z intervals. The calibration tutorial and the notebooks run small versions of each in CI.

    python bench/calibration.py             # the full tables (about 15-30 minutes on two cores)
    python bench/calibration.py --quick     # a smoke run with few replications (about a minute)
    python bench/calibration.py --tables 5 --reps 1000   # only the coverage table, 1000 samples per cell

Tables printed, each cell with its Monte Carlo standard error where it matters:

1. z-test families (multiplicity.simulate_family, L = 10 as 5 + 5): any-verdict rate under the global null and
   FDR / power with planted degradations, for each procedure x tail mode x correlation rho.
2. The same through the sign-flip engine (ten columns of N = 40 differences, B = 1000, both tails in one pass),
   as in the tutorial's headline table but with more families and more correlations.
3. The measured FDR the audit reports for unproven procedures (multiplicity.measured_fdr) at L = 10 and L = 4.
4. Sign-flip rejection rates per tail for skewed mean-zero differences (H0 is symmetry, not a zero mean).
5. Coverage of the nominal 95% d_z intervals (noncentral t, BCa, and the default: BCa over whole clusters where
   pairs share them) for normal and skewed differences, flat and in clusters of 4 with ICC 0.3.

Seeds are fixed: the same command prints the same numbers. Nothing here is asserted.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # run from a clone without installing
from reward_auditor import multiplicity, stats  # noqa: E402

ALPHA = 0.05
PROCS = {"bh": {}, "by": {}, "tsbh": {}, "sabha": {}, "gbh": {}, "stratified": {},
         "weighted (.8,.5)": dict(method="weighted", weights=[0.8, 0.5])}
MODES = {"one-sided": dict(two_sided=False), "two-sided (α/2 each)": {}, "each at α (old)": dict(split=False)}
GROUPS10 = np.repeat(["controlled", "stylized"], 5)


def z_tables(reps: int) -> pd.DataFrame:
    "Table 1: z-test families."
    rows = []
    planted = [3.0] * 4 + [0.0] * 6
    for label, kw in PROCS.items():
        kw = dict(kw)
        method = kw.pop("method", label)
        for mode, mk in MODES.items():
            row = {"procedure": label, "tails": mode}
            for rho in (0.0, 0.3, 0.5):
                nul = multiplicity.simulate_family(method, (5, 5), rho=rho, reps=reps, seed=1, **mk, **kw)
                pl = multiplicity.simulate_family(method, (5, 5), rho=rho, reps=reps, seed=2, shift=planted, **mk, **kw)
                row[f"any ρ={rho:g}"] = f"{nul['any_verdict']:.3f}±{nul['any_se']:.3f}"
                row[f"FDR ρ={rho:g}"] = f"{pl['fdr']:.3f}±{pl['fdr_se']:.3f}"
                row[f"power ρ={rho:g}"] = f"{pl['power']:.3f}"
            rows.append(row)
    return pd.DataFrame(rows).set_index(["procedure", "tails"])


def signflip_tables(reps: int, n: int = 40, B: int = 1000, shift: float = 0.45) -> pd.DataFrame:
    "Table 2: families through the sign-flip engine, both tails in one pass as the audit does."
    planted = np.r_[np.full(4, shift), np.zeros(6)]

    def pvals(rho, sh, seed):
        rng = np.random.default_rng(seed)
        Pg, Pl = np.empty((reps, 10)), np.empty((reps, 10))
        for r in range(reps):
            D = math.sqrt(rho) * rng.standard_normal((n, 1)) + math.sqrt(1 - rho) * rng.standard_normal((n, 10)) + sh
            p = stats.signflip_tests(np.hstack([D, -D]), B=B, seed=seed * 1_000_000 + r).pvalue
            Pg[r], Pl[r] = p[:10], p[10:]
        return Pg, Pl

    def decide(pg, pl, method, mode, kw):
        if mode == "one-sided":
            return multiplicity.adjust(pg, method, GROUPS10, ALPHA, **kw).rejected, np.zeros(10, bool)
        if mode.startswith("two-sided"):
            a, b = multiplicity.adjust_tails(pg, pl, method, GROUPS10, ALPHA, **kw)
        else:
            a, b = (multiplicity.adjust(p, method, GROUPS10, ALPHA, **kw) for p in (pg, pl))
        return a.rejected, b.rejected & ~a.rejected

    sims = {rho: (pvals(rho, 0.0, 10 + i), pvals(rho, planted, 20 + i)) for i, rho in enumerate((0.0, 0.3, 0.5))}
    rows = []
    for label, kw in PROCS.items():
        kw = dict(kw)
        method = kw.pop("method", label)
        if "weights" in kw:
            kw["weights"] = dict(zip(("controlled", "stylized"), kw["weights"]))
        for mode in MODES:
            row = {"procedure": label, "tails": mode}
            for rho, ((Ng, Nl), (Pg, Pl)) in sims.items():
                anyv = np.array([np.concatenate(decide(Ng[r], Nl[r], method, mode, kw)).any() for r in range(reps)])
                fdp, pw = np.empty(reps), np.empty(reps)
                for r in range(reps):
                    up, down = decide(Pg[r], Pl[r], method, mode, kw)
                    false = (up & (planted == 0)).sum() + down.sum()
                    fdp[r] = false / max(up.sum() + down.sum(), 1)
                    pw[r] = (up & (planted > 0)).sum() / 4
                se = lambda x: np.std(x, ddof=1) / math.sqrt(reps)
                row[f"any ρ={rho:g}"] = f"{anyv.mean():.3f}±{se(anyv.astype(float)):.3f}"
                row[f"FDR ρ={rho:g}"] = f"{fdp.mean():.3f}±{se(fdp):.3f}"
                row[f"power ρ={rho:g}"] = f"{pw.mean():.3f}"
            rows.append(row)
    return pd.DataFrame(rows).set_index(["procedure", "tails"])


def measured_tables(reps: int) -> pd.DataFrame:
    "Table 3: what the audit's warning says for each unproven procedure."
    rows = []
    for groups in (GROUPS10, np.repeat(["controlled", "stylized"], 2)):
        for label, kw in PROCS.items():
            kw = dict(kw)
            method = kw.pop("method", label)
            w = dict(zip(("controlled", "stylized"), kw["weights"])) if "weights" in kw else None
            for two in (False, True):
                m = multiplicity.measured_fdr(method, groups, two_sided=two, weights=w, reps=reps)
                rows.append({"L": m["L"], "procedure": label, "tails": m["tails"], "proven": m["proven"],
                             "max FDR": f"{m['max_fdr']:.3f}±{m['max_se']:.3f}", "worst": m["worst"],
                             "exceeds α": m["exceeds"]})
    return pd.DataFrame(rows).set_index(["L", "procedure", "tails"])


def symmetry_table(reps: int, n: int = 50) -> pd.DataFrame:
    "Table 4: H0 is symmetry; skewed mean-zero differences."
    rng = np.random.default_rng(5)
    dists = {"normal": lambda s: rng.normal(0, 1, s),
             "exponential − 1": lambda s: rng.exponential(1.0, s) - 1.0,
             "1 − exponential": lambda s: 1.0 - rng.exponential(1.0, s),
             "lognormal(0,1) − e^½": lambda s: rng.lognormal(0, 1, s) - math.exp(0.5),
             "lognormal(0,1.5) − e^1.125": lambda s: rng.lognormal(0, 1.5, s) - math.exp(1.125),
             "gamma(0.5) − 0.5": lambda s: rng.gamma(0.5, 1.0, s) - 0.5}
    rows = []
    for name, draw in dists.items():
        D = draw((n, reps))
        row = {"distribution": name}
        for alt in ("greater", "less"):
            r = np.mean(stats.signflip_tests(D, B=1000, seed=7, alternative=alt).pvalue <= ALPHA)
            row[alt] = f"{r:.3f}±{math.sqrt(r * (1 - r) / reps):.3f}"
        rows.append(row)
    return pd.DataFrame(rows).set_index("distribution")


def _clustered(skewed: bool, size: int = 4, icc: float = 0.3, dz: float = 0.3):
    "Differences in clusters of `size` pairs with intra-cluster correlation `icc`; total sd 1, so d_z over pairs is `dz`."
    def draw(rng, n):
        g = -(-n // size)
        unit = (lambda k: 1.0 - rng.exponential(1.0, k)) if skewed else (lambda k: rng.standard_normal(k))
        u = np.repeat(unit(g) * math.sqrt(icc), size)[:n]
        return dz + u + unit(n) * math.sqrt(1 - icc)
    return draw


def coverage_table(reps: int, n_boot: int = 2000) -> pd.DataFrame:
    "Table 5: coverage of nominal 95% d_z intervals; flat and clustered (clusters of 4, ICC 0.3), the default last."
    rows = []
    for shape, draw, true, size in [
            ("normal", lambda rng, n: rng.normal(0.3, 1.0, n), 0.3, 1),
            ("1.3 − Exp(1) (left-skewed)", lambda rng, n: 1.3 - rng.exponential(1.0, n), 0.3, 1),
            ("0.5 + 1 − Exp(1)", lambda rng, n: 1.5 - rng.exponential(1.0, n), 0.5, 1),
            ("lognormal, d_z 0.3", lambda rng, n: (rng.lognormal(0, 0.8, n) - math.exp(0.32))
             / math.sqrt((math.exp(0.64) - 1) * math.exp(0.64)) + 0.3, 0.3, 1),
            ("clusters of 4, ICC 0.3, normal", _clustered(False), 0.3, 4),
            ("clusters of 4, ICC 0.3, 1 − Exp(1)", _clustered(True), 0.3, 4)]:
        for n in (20, 50, 200):
            rng = np.random.default_rng(n)
            cl = np.arange(n) // size
            hit = {"nct": 0, "bca": 0, "default": 0}
            for r in range(reps):
                x = draw(rng, n)
                for m in ("nct", "bca"):       # both as if the pairs were independent
                    e = stats.effect_sizes(x, ci_method=m, n_boot=n_boot, seed=r)
                    hit[m] += e.ci_low <= true <= e.ci_high
                if size > 1:                   # the default with clusters: whole clusters resampled (cluster BCa)
                    e = stats.effect_sizes(x, n_boot=n_boot, seed=r, cluster_ids=cl)
                    hit["default"] += e.ci_low <= true <= e.ci_high
                else:
                    hit["default"] = hit["bca"]
            se = math.sqrt(0.95 * 0.05 / reps)
            rows.append({"differences": shape, "N": n, "clusters": -(-n // size), "nct": f"{hit['nct'] / reps:.3f}",
                         "bca (pairs)": f"{hit['bca'] / reps:.3f}", "default": f"{hit['default'] / reps:.3f}",
                         "SE at 0.95": f"{se:.3f}"})
    return pd.DataFrame(rows).set_index(["differences", "N"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few replications, for a smoke run")
    ap.add_argument("--tables", default="1,2,3,4,5", help="which tables to print, e.g. 5 (default: all)")
    ap.add_argument("--reps", type=int, default=None, help="replications of every table printed (default: each its own)")
    a = ap.parse_args()
    wanted = {int(x) for x in a.tables.split(",")}
    scale = 0.05 if a.quick else 1.0
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    for title, fn, reps in [("1. z-test families: any verdict (null), FDR and power (4 planted at μ = 3)", z_tables, 20_000),
                            ("2. sign-flip engine families (N = 40, B = 1000, 4 planted at 0.45 sd)", signflip_tables, 4000),
                            ("3. the FDR the audit measures and reports for each procedure", measured_tables, 2000),
                            ("4. H0 is symmetry: rejection rate per tail, mean-zero skewed differences (N = 50)",
                             symmetry_table, 10_000),
                            ("5. coverage of nominal 95% intervals for d_z (default: BCa, over clusters where pairs "
                             "share them)", coverage_table, 2000)]:
        if int(title.split(".")[0]) not in wanted:
            continue
        r = a.reps or max(50, int(reps * scale))
        t0 = time.perf_counter()
        table = fn(r)
        print(f"\n{title} — {r} replications, {time.perf_counter() - t0:.0f} s")
        print(table.to_string())


if __name__ == "__main__":
    main()
