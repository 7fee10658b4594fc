"""The clustered-pairs null through the whole audit: RewardBench 2-style rows, a noise scorer, SP.

60 best-of-4 rows (one chosen answer, three rejected: 180 pairs). The scorer is noise — each text gets a reward
from a hash of (seed, prompt, text) — with a large spread on the chosen answers (SD 3, rejected SD 1), and SP
rewrites the answers, so every rewritten text gets a fresh draw: a true null. Each replicate changes the scorer's
seed. Prints the share of replicates in which SP is flagged at alpha = 0.05 (one-sided degradation test, BH over
the one-test family = the raw p) with the per-pair test (`--group-by id`) and with the cluster test (the default,
clusters = RewardBench 2 rows).

    python bench/clustered_null.py [--reps 300] [--permutations 999]
"""
import argparse
import math
import time
import warnings

import numpy as np

from reward_auditor.audit import audit, make_conditions
from reward_auditor.data import load_preferences
from reward_auditor.scorers import NoiseScorer

CHOSEN = "Answer A."


class ChosenSpreadNoise(NoiseScorer):
    "Noise whose scale is 3 on chosen answers (they start with a marker that SP keeps) and 1 elsewhere."
    def reward(self, prompt: str, response: str) -> float:
        return (3.0 if response.lstrip().startswith("Answer A") else 1.0) * super().reward(prompt, response)


def rows(n: int = 60):
    words = "the quick brown fox jumps over a lazy dog while seven tired cats watch from the old wall".split()
    r = np.random.default_rng(0)
    out = []
    for i in range(n):
        def text(head):
            return head + " " + " ".join(r.choice(words, 18)) + ". " + " ".join(r.choice(words, 12)) + "."
        out.append({"id": f"row{i}", "prompt": f"Question {i}: " + " ".join(r.choice(words, 8)) + "?",
                    "chosen": [text(CHOSEN)], "rejected": [text("Answer B.") for _ in range(3)],
                    "subset": "Factuality", "num_correct": 1, "total_completions": 4})
    return load_preferences(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--permutations", type=int, default=999)
    a = ap.parse_args()
    data = rows()
    conds, _ = make_conditions(data, ["SP"], seed=0, progress=False)
    flags = {"id": [], None: []}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rep in range(a.reps):
            sc = ChosenSpreadNoise(seed=rep, name="noise")
            for g in flags:
                r = audit(data, [sc], None, conditions=conds, permutations=a.permutations, two_sided=False,
                          progress=False, group_by=g, seed=rep)
                flags[g].append(float(r.table["p"].iloc[0]) <= 0.05)
    se = math.sqrt(0.05 * 0.95 / a.reps)
    n_changed = int(r.table["n_changed"].iloc[0])
    print(f"{a.reps} null replicates, 60 rows / 180 pairs ({n_changed} changed by SP), B = {a.permutations}, "
          f"{time.perf_counter() - t0:.0f} s")
    for g, name in (("id", "per pair (old test)"), (None, "per cluster (RewardBench 2 row)")):
        f = np.mean(flags[g])
        print(f"  {name:34s} flagged {f:.3f} (SE {math.sqrt(f * (1 - f) / a.reps):.3f}); "
              f"alpha + 3 SE = {0.05 + 3 * se:.3f}")


if __name__ == "__main__":
    main()
