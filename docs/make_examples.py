"""Write the tiny example inputs shipped in reward_auditor/examples/ (run from the repository root; seeded).

They let every diagnostic run as written: `reward-auditor heterogeneity --example`, `... protocol --example`,
`... meta --example`, `... calibration --example`, `reward-auditor leaderboard --example`. All numbers are simulated here; no external data is copied.
"""
import json
from pathlib import Path

import numpy as np

from reward_auditor.leaderboard import write_rewardbench2_files
from reward_auditor.meta import simulate_audit_tables
from reward_auditor.protocol import simulate_policy_samples

root = Path("reward_auditor/examples")
rng = np.random.default_rng(0)

# heterogeneity: per-prompt results of two reward models, one line per prompt (id, subset, correct)
het = root / "heterogeneity"
het.mkdir(parents=True, exist_ok=True)
subsets = ["chat", "chat-hard", "math", "code", "safety"]
for name, acc in {"rm-a": [0.95, 0.55, 0.70, 0.80, 0.90], "rm-b": [0.78, 0.74, 0.76, 0.77, 0.75]}.items():
    rows = [{"id": f"{s}-{i}", "subset": s, "correct": bool(rng.random() < a)}
            for s, a in zip(subsets, acc) for i in range(250)]
    (het / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

# protocol: on-policy samples with a gold score, and one rewards file per RM (prompt_id, k, reward)
pro = root / "protocol"
pro.mkdir(parents=True, exist_ok=True)
sim = simulate_policy_samples(24, 4, seed=0)
sim.samples.to_csv(pro / "samples.csv", index=False)
for col, name in zip([c for c in sim.rewards.columns if c not in ("prompt_id", "k")], ["rm-a", "rm-b", "rm-c"]):
    sim.rewards[["prompt_id", "k", col]].rename(columns={col: "reward"}).round(6).to_csv(pro / f"{name}.csv", index=False)

# meta: two benchmarks' audit tables for six models, and each model's downstream win rate
meta = root / "meta"
meta.mkdir(parents=True, exist_ok=True)
tables, win = simulate_audit_tables(6, benchmarks={"rmbench": 1.0, "rewardbench": 0.6}, seed=0)
for bench, t in tables.items():
    t.round(6).to_csv(meta / f"{bench}.csv", index=False)
win.rename_axis("model").reset_index().round(6).to_csv(meta / "winrates.csv", index=False)
# calibration: RewardBench-style per-prompt scores of two reward models, with answer lengths. rm-a is a Bradley-Terry
# model with margins twice too large, in pairs (one chosen, one rejected); rm-b scores one chosen answer against
# three rejected ones (RewardBench 2 style, one cluster per prompt) and adds 1 reward per 1,000 characters.
cal = root / "calibration"
cal.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(1)
for name, k, n_rej, per_char in (("rm-a", 2.0, 1, 0.0), ("rm-b", 1.0, 3, 1e-3)):
    rows = []
    for s in subsets:
        for i in range(80):
            true = rng.normal(0.8, 1.5, n_rej)                       # log-odds that the chosen answer is better
            won = rng.random(n_rej) < 1 / (1 + np.exp(-true))
            gap = np.where(won, true, -true)
            lc = int(rng.integers(300, 1500)) + (250 if s == "chat" else 0)
            lr = rng.integers(300, 1500, n_rej)
            rc = float(rng.normal(0, 1)) + per_char * lc
            rr = rc - k * gap - per_char * lc + per_char * lr
            one = n_rej == 1
            rows.append({"id": f"{s}-{i}", "subset": s,
                         "scores_chosen": round(rc, 6) if one else [round(rc, 6)],
                         "scores_rejected": round(float(rr[0]), 6) if one else [round(float(x), 6) for x in rr],
                         "length_chosen": lc if one else [lc], "length_rejected": int(lr[0]) if one else lr.tolist()})
    (cal / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
print(sorted(str(p) for p in root.rglob("*.*")))

# leaderboard: six reward models in RewardBench 2's published per-model layout (three tiers; Precise IF hardest)
subsets_rb2 = ["Factuality", "Precise IF", "Math", "Safety", "Focus"]
tiers = {f"example/rm-{name}": {s: a + (-1.2 if s == "Precise IF" else 0.0) for s in subsets_rb2}
         for name, a in [("alpha", 2.2), ("beta", 2.0), ("gamma", 1.0), ("delta", 0.9), ("epsilon", -0.2),
                         ("zeta", -0.4)]}
lb = root / "leaderboard"
lb.mkdir(parents=True, exist_ok=True)
write_rewardbench2_files(lb, tiers, n_per_subset=60, n_ties=6, seed=0, indent=None)
