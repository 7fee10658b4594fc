"""Write the tiny example inputs shipped in reward_auditor/examples/ (run from the repository root; seeded).

They let every diagnostic run as written: `reward-auditor heterogeneity --example`, `... protocol --example`,
`... meta --example`. All numbers are simulated here; no external data is copied.
"""
import json
from pathlib import Path

import numpy as np

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
print(sorted(str(p) for p in root.rglob("*.*")))
