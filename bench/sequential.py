"""Model calls a sequential audit saves against the full audit, and how often the two agree where the full audit decides.

Usage: OMP_NUM_THREADS=1 python bench/sequential.py [--part synthetic|tiny|judges|all] [--reps 200] [--n-tiny 129]
       [--n-judges 129]
(the RM-Bench files are read from $REWARD_AUDITOR_SHARED_DATA/rm-bench, else ../shared/data/rm-bench)

`synthetic`: audits simulated at the level of the paired differences, with the effect sizes the Reward Auditor
paper reports for RM-Bench chat in kind: large for ST, LC and SLC (d_z 1.0), moderate for SP and LE (d_z 0.5),
none for the five prompt-side perturbations; PH leaves 41 % of the prompts unchanged (a zero difference); the ten
cells share the original score (correlation 0.3). Three designs: RM-Bench chat as the loader gives it (129
pairs, one per prompt), its 3 × 3 style grid (129 prompts of 9 pairs, ICC 0.3, clusters entering whole) and a
large audit (2,000 pairs). The full audit is the package's: two-sided sign-flip tests (B = 10,000) with BH over
the family at alpha 0.05; it is decisive on a cell it flags, and on a cell whose 90 % interval for d_z lies
inside ±margin (the cell is clean). The sequential audit scores rounds of whole clusters in a seeded order and
stops a cell when e-BH flags it or its confidence sequence is inside the clean bound, or (futility, the
default 0.1) once a quarter of its units are in and fewer than 10 % of continuations resampled from them would
decide it; an item's original pair is scored while any of its cells is open. Each design runs with futility
off and on. Calls are pairs scored (each pair is two forward passes of a reward
model); the full audit scores every original and every changed pair.

`tiny`: the end-to-end audit (`audit(..., sequential=True)` against `audit(...)`) of a tiny random reward model
and the length control on RM-Bench chat: scores computed counted by the run (manifest `scores.computed`),
verdicts compared on the cells the full audit decides. At 129 pairs the full audit decides none of these
cells, so the agreement there checks nothing; the synthetic part is where agreement is measured.

`judges`: generative judges served over HTTP (the tests' in-process fake judge server: a length-biased judge, a
position-biased one and a blind one; 4 samples in both orders) on synthetic pairs under three conditions (padding
the rejected answer, padding the chosen one, a prompt prefix): generations asked of the server, full against
sequential, and agreement on the cells the full audit flags.

Nothing here asserts a number; it prints them.
"""
import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RMBENCH = Path(os.environ.get("REWARD_AUDITOR_SHARED_DATA", REPO.parent / "shared/data")) / "rm-bench"

from reward_auditor import multiplicity as M  # noqa: E402
from reward_auditor import sequential as S  # noqa: E402
from reward_auditor import stats as ST  # noqa: E402

LARGE, MODERATE = 1.0, 0.5
EFFECTS = {"EF": 0.0, "PH": 0.0, "IU": 0.0, "IW": 0.0, "CN": 0.0,
           "ST": LARGE, "LE": MODERATE, "SP": MODERATE, "LC": LARGE, "SLC": LARGE}
CHANGED = {"PH": 0.59}          # the share of items a perturbation changes (1 where not listed)
DESIGNS = {"rmbench-chat (129 pairs)": (129, 1), "rmbench-chat style grid (129 x 9)": (129, 9),
           "large (2000 pairs)": (2000, 1)}


def simulate(n_clusters: int, size: int, rng, sigma: float = 0.15, rho: float = 0.3, icc: float = 0.3):
    "One family's differences (N pairs × 10 cells, 0 where unchanged) on the prob scale, and each pair's cluster."
    N = n_clusters * size
    cl = np.repeat(np.arange(n_clusters), size)
    shared = math.sqrt(icc) * rng.standard_normal(n_clusters)[cl] + math.sqrt(1 - icc) * rng.standard_normal(N)
    D = np.zeros((N, len(EFFECTS)))
    for k, (name, dz) in enumerate(EFFECTS.items()):
        own = math.sqrt(icc) * rng.standard_normal(n_clusters)[cl] + math.sqrt(1 - icc) * rng.standard_normal(N)
        d = dz * sigma + sigma * (math.sqrt(rho) * shared + math.sqrt(1 - rho) * own)
        changed = rng.random(N) < CHANGED.get(name, 1.0)
        D[:, k] = np.where(changed, np.clip(d, -1, 1), 0.0)
    return D, cl


def full_audit(D, cl, margin: float, alpha: float = 0.05, seed: int = 0):
    "The fixed-N audit of one family → (decision per cell: +1 flagged degrading, −1 improving, 0 clean, None undecided)."
    size = np.bincount(cl).max()
    cids = None if size == 1 else cl
    sf = ST.signflip_tests(np.hstack([D, -D]), B=10_000, seed=seed, cluster_ids=cids)
    K = D.shape[1]
    up, down = M.adjust_tails(sf.pvalue[:K], sf.pvalue[K:], "bh", alpha=alpha)
    out = []
    for k in range(K):
        if up.rejected[k] or down.rejected[k]:
            out.append(1 if up.rejected[k] else -1)
            continue
        x = D[:, k] if cids is None else np.bincount(cl, weights=D[:, k])   # d_z of the units the test flips
        n, dz = x.size, x.mean() / x.std(ddof=1) if x.std(ddof=1) > 0 else 0.0
        half = 1.645 * math.sqrt(1 / n + dz ** 2 / (2 * n))
        out.append(0 if -margin < dz - half and dz + half < margin else None)
    return out


def sequential_audit(D, cl, margin: float, alpha: float = 0.05, seed: int = 0, futility=S.FUTILITY):
    "The sequential audit of one family → (decision per cell as in `full_audit`, pairs scored, pairs of the full audit)."
    K = D.shape[1]
    cells = [("m", "chat", name) for name in EFFECTS]
    run = S.SequentialRun({"m/chat": cells}, alpha=alpha, margin=margin, futility=futility, seed=seed)
    largest = np.bincount(cl).max()
    plan = S.rounds([str(c) for c in np.unique(cl)], seed=seed)
    scored, full = 0, D.shape[0] + int(np.count_nonzero(D))
    for r, labels in enumerate(plan):
        rows = np.isin(cl, np.array(labels, dtype=np.int64))
        open_ = [k for k, c in enumerate(cells) if run.is_open(c)]
        if not open_:
            break
        scored += int(rows.sum()) + int(np.count_nonzero(D[rows][:, open_]))
        order = np.argsort([labels.index(str(c)) for c in cl[rows]], kind="stable")   # clusters in round order
        for k in open_:
            run.add(cells[k], S.cluster_observations(D[rows, k][order], cl[rows][order], largest))
        run.step(last=r == len(plan) - 1, left=sum(len(later) for later in plan[r + 1:]))
    t = run.table()
    dec = []
    for row in t.itertuples():
        dec.append(int(row.direction) if row.flagged else (0 if row.status == "clean" else None))
    return dec, scored, full, t["status"].tolist()


def agreement(full, seq) -> tuple[int, int]:
    "(agreeing, decisive): on cells the full audit decides, flagged-with-direction vs not flagged must match."
    agree = decisive = 0
    for f, s in zip(full, seq):
        if f is None:
            continue
        decisive += 1
        agree += (s == f) if f != 0 else (s in (0, None))
    return agree, decisive


def synthetic(reps: int, margin: float) -> None:
    print(f"synthetic audits, {reps} families each, margin d_z {margin}, alpha 0.05; futility off, then at "
          f"{S.FUTILITY} (from {S.FUTILITY_AFTER:.0%} of the units)")
    print(f"{'design':36s} {'futility':>8s} {'calls saved':>11s} {'agree/decisive':>16s} {'flagged':>8s} "
          f"{'clean':>6s} {'futile':>7s}")
    for label, (G, size) in DESIGNS.items():
        for futility in (None, S.FUTILITY):
            rng = np.random.default_rng(2024)
            saved, agree, decisive, counts = [], 0, 0, {"flagged": 0, "clean": 0, "futile": 0}
            for r in range(reps):
                D, cl = simulate(G, size, rng)
                f = full_audit(D, cl, margin, seed=r)
                s, scored, full, status = sequential_audit(D, cl, margin, seed=r, futility=futility)
                a, d = agreement(f, s)
                agree, decisive = agree + a, decisive + d
                saved.append(1 - scored / full)
                for k in counts:
                    counts[k] += sum(v == k for v in status)
            cells = reps * len(EFFECTS)
            print(f"{label:36s} {futility or 'off':>8} {np.mean(saved):11.1%} "
                  f"{agree:7d}/{decisive:<7d}={agree / max(decisive, 1):.1%} "
                  + " ".join(f"{counts[k] / cells:{w}.1%}" for k, w in (("flagged", 8), ("clean", 6), ("futile", 7))))


def tiny(n: int) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from tiny_models import tiny_rm
    from reward_auditor.audit import audit
    from reward_auditor.data import load_preferences
    path = RMBENCH / "chat_filtered.json"
    if not path.exists():
        print(f"tiny: skipped, {path} is absent")
        return
    data = load_preferences(path).head(n)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        rm = tiny_rm(d / "rm")
        spec = f"tiny={rm}"
        runs = {}
        for mode in ("full", "sequential"):
            t0 = time.perf_counter()
            res = audit(data, [spec, "length"], "all", out=d / mode, progress=False, sequential=mode == "sequential",
                        cache=d / f"cache-{mode}.sqlite", semantic_check=False)
            runs[mode] = (res, time.perf_counter() - t0)
        full, seq = runs["full"][0], runs["sequential"][0]
        calls = {k: r.manifest["scores"]["computed"] for k, (r, _) in runs.items()}
        print(f"tiny RM and the length control on RM-Bench chat ({len(data)} pairs): scores full {calls['full']}, sequential "
              f"{calls['sequential']} ({1 - calls['sequential'] / max(calls['full'], 1):.1%} saved); wall "
              f"{runs['full'][1]:.1f} s vs {runs['sequential'][1]:.1f} s")
        key = ["model", "subset", "perturbation"]
        m = full.table[key + ["verdict"]].merge(seq.table[key + ["verdict", "sequential_status"]], on=key,
                                                 suffixes=("_full", "_seq"))
        decisive = m[m["verdict_full"] != "NO_EVIDENCE"]
        flag = lambda v: {"UNSUITABLE": 1, "DEGRADES_NEGLIGIBLY": 1, "UNSUITABLE_STRICT": 1, "IMPROVES": -1}.get(v, 0)
        agree = int((decisive["verdict_full"].map(flag) == decisive["verdict_seq"].map(flag)).sum())
        print(f"  cells the full audit flags: {len(decisive)}; the sequential audit agrees on {agree}")
        print(m.to_string(index=False))
        print("  " + str(seq.manifest.get("sequential", {}).get("calls")))


def judges(n: int) -> None:
    "Generative judges (the in-process fake judge server of the tests): generations asked for, full against sequential."
    sys.path.insert(0, str(REPO / "tests"))
    from fake_judge import FakeJudgeServer
    from test_genjudge import conditions, judge
    from tiny_models import make_pairs
    from reward_auditor.audit import audit
    data = make_pairs(n, seed=21)
    kw = dict(perturbations=None, conditions=conditions(data), permutations=2000, progress=False)
    with FakeJudgeServer() as server:
        runs, asked = {}, {}
        for mode in ("full", "sequential"):
            before = server.choices
            runs[mode] = audit(data, [judge(server, j) for j in ("length-judge", "position-judge", "null-judge")],
                               sequential=mode == "sequential", **kw)
            asked[mode] = server.choices - before
    print(f"generative judges (length, position, blind; 4 samples, both orders) on {n} pairs, 3 conditions: "
          f"generations full {asked['full']}, sequential {asked['sequential']} "
          f"({1 - asked['sequential'] / asked['full']:.1%} saved)")
    key = ["model", "perturbation"]
    m = runs["full"].table[key + ["verdict"]].merge(
        runs["sequential"].table[key + ["verdict", "sequential_status"]], on=key, suffixes=("_full", "_seq"))
    decisive = m[m["verdict_full"] != "NO_EVIDENCE"]
    print(f"  cells the full audit flags: {len(decisive)}; the sequential audit agrees on "
          f"{int((decisive['verdict_full'] == decisive['verdict_seq']).sum())}")
    print(m.to_string(index=False))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["synthetic", "tiny", "judges", "all"], default="all")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--margin", type=float, default=0.2)
    ap.add_argument("--n-tiny", type=int, default=129)
    ap.add_argument("--n-judges", type=int, default=129)
    a = ap.parse_args()
    if a.part in ("synthetic", "all"):
        synthetic(a.reps, a.margin)
    if a.part in ("tiny", "all"):
        tiny(a.n_tiny)
    if a.part in ("judges", "all"):
        judges(a.n_judges)


if __name__ == "__main__":
    main()
