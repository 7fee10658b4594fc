"""A leaderboard of M models × 6 subsets of ~2,000 items from published per-item results: CPU, wall, peak RSS, and
the pairwise McNemar tests by one matrix product per subset against a per-pair loop.

Usage: OMP_NUM_THREADS=1 python bench/leaderboard.py [--models 200] [--items 2000] [--sizes 25 50 100 200]

One run does three things, each in a fresh process of the same interpreter (CPU = that process; RSS = its peak):

- `whole`: `leaderboard()` on one long table (`model, id, subset, correct`, CSV) of M models, read, checked,
  headline, every pair of every subset and the overall family (exact McNemar), CONFIRM for every model;
- `pairs, product`: the McNemar p-values of all M(M − 1)/2 pairs of the 6 subsets from `leaderboard_stats.pair_tests`;
- `pairs, loop`: the same p-values from a loop over pairs (discordant counts per pair, then `paired.mcnemar`),
  checked equal to the product's.

Then the cost of `leaderboard()` at each of `--sizes` models, to show how it grows with M. The target is `whole`
at 200 models under 60 CPU s and 2 GB. With `--rb2`, also a RewardBench 2-shaped leaderboard of M files (5 subsets
of 350 prompts and 51 Ties prompts): its Overall family weighs subsets equally and clusters Ties' rows, so every
pair there takes the sign-flip test (10,000 flips) instead of McNemar.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MAKE = r"""
import sys
import numpy as np, pandas as pd
M, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
subsets = ["chat", "chat-hard", "safety", "reasoning", "math", "code"]
rows = []
ability = rng.normal(1.0, 0.6, (M, len(subsets)))
for s_i, s in enumerate(subsets):
    diff = rng.normal(0, 1.2, n)
    right = rng.random((M, n)) < 1 / (1 + np.exp(-(ability[:, s_i, None] - diff[None, :])))
    rows.append(pd.DataFrame({"model": np.repeat([f"rm-{m:03d}" for m in range(M)], n),
                              "id": np.tile([f"{s}-{i}" for i in range(n)], M), "subset": s,
                              "correct": right.ravel().astype(np.int8)}))
pd.concat(rows, ignore_index=True).to_csv(path, index=False)
"""

WHOLE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from reward_auditor.leaderboard import leaderboard
t0, c0 = time.perf_counter(), time.process_time()
r = leaderboard([sys.argv[2]])
me = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu": time.process_time() - c0, "wall": time.perf_counter() - t0, "rss_mib": me.ru_maxrss / 1024,
                  "models": len(r.headline), "families": len(r.families),
                  "pairs": int(sum(len(f.pairs) for f in r.families.values()))}))
"""

RB2 = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from reward_auditor.leaderboard import leaderboard, write_rewardbench2_files
M, folder = int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
subs = ["Factuality", "Precise IF", "Math", "Safety", "Focus"]
ab = {f"org/rm-{k:03d}": {s: a + rng.normal(0, .3) - (1.2 if s == "Precise IF" else 0) for s in subs}
      for k, a in enumerate(rng.normal(1, .8, M))}
write_rewardbench2_files(folder, ab, n_per_subset=350, n_ties=51, indent=None)
t0, c0 = time.perf_counter(), time.process_time()
r = leaderboard(folder)
print(json.dumps({"cpu": time.process_time() - c0, "wall": time.perf_counter() - t0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "methods": {k: f.method for k, f in r.families.items()}}))
"""

PAIRS = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, pandas as pd
from reward_auditor.leaderboard_stats import pair_tests
from reward_auditor.paired import mcnemar
t = pd.read_csv(sys.argv[2])
mats = [g.pivot(index="model", columns="id", values="correct").to_numpy(float) for _, g in t.groupby("subset")]
mode = sys.argv[3]
c0, t0 = time.process_time(), time.perf_counter()
out = []
for Y in mats:
    if mode == "product":
        out.append(pair_tests(Y).p)
    else:
        M = Y.shape[0]
        p = []
        for i in range(M):
            for j in range(i + 1, M):
                b = int(np.sum((Y[i] == 1) & (Y[j] == 0)))
                c = int(np.sum((Y[i] == 0) & (Y[j] == 1)))
                p.append(mcnemar(b, c))
        out.append(np.array(p))
cpu = time.process_time() - c0
np.save(sys.argv[4], np.concatenate(out))
print(json.dumps({"cpu": cpu, "wall": time.perf_counter() - t0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(code: str, *args) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=200)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--sizes", type=int, nargs="*", default=[25, 50, 100, 200])
    ap.add_argument("--rb2", action="store_true", help="also a RewardBench 2-shaped leaderboard of --models files")
    a = ap.parse_args()
    import numpy as np
    tmp = Path(tempfile.mkdtemp())
    data = tmp / f"long-{a.models}.csv"
    subprocess.run([sys.executable, "-c", MAKE, str(a.models), str(a.items), str(data)], check=True)
    whole = run(WHOLE, REPO, data)
    prod = run(PAIRS, REPO, data, "product", tmp / "p_product.npy")
    loop = run(PAIRS, REPO, data, "loop", tmp / "p_loop.npy")
    same = np.allclose(np.load(tmp / "p_product.npy"), np.load(tmp / "p_loop.npy"), rtol=0, atol=1e-12)
    print(f"{a.models} models × 6 subsets × {a.items} items: {whole['pairs']} pairs in {whole['families']} families")
    print(f"  whole leaderboard(): {whole['cpu']:.1f} CPU s, {whole['wall']:.1f} s wall, peak RSS {whole['rss_mib']:.0f} MiB")
    print(f"  pairs, product: {prod['cpu']:.2f} CPU s; pairs, loop: {loop['cpu']:.2f} CPU s; "
          f"loop / product = {loop['cpu'] / max(prod['cpu'], 1e-9):.1f}x; same p-values: {same}")
    if a.rb2:
        r = run(RB2, REPO, a.models, tmp / "rb2")
        print(f"  RewardBench 2-shaped, {a.models} files: {r['cpu']:.1f} CPU s, peak RSS {r['rss_mib']:.0f} MiB "
              f"(Overall: {r['methods']['Overall']})")
    rows = []
    for m in a.sizes:
        f = tmp / f"long-{m}.csv"
        subprocess.run([sys.executable, "-c", MAKE, str(m), str(a.items), str(f)], check=True)
        r = run(WHOLE, REPO, f)
        rows.append((m, r["cpu"], r["rss_mib"]))
        print(f"  {m:>4} models: {r['cpu']:6.1f} CPU s, peak RSS {r['rss_mib']:6.0f} MiB, "
              f"CPU per pair {1e3 * r['cpu'] / (m * (m - 1) / 2 * 7):.3f} ms")
    if len(rows) > 1:
        (m0, c0, _), (m1, c1, _) = rows[0], rows[-1]
        print(f"  growth: {m1 / m0:.0f}x the models cost {c1 / c0:.1f}x the CPU "
              f"(pairs grow {m1 * (m1 - 1) / (m0 * (m0 - 1)):.0f}x; exponent {np.log(c1 / c0) / np.log(m1 / m0):.2f})")


if __name__ == "__main__":
    main()
