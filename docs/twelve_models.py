"""Twelve scorers side by side: the audit, the report and docs/twelve_models_radar.png.

Each scorer mixes the three control rewards (prompt overlap, answer length, a hash-seeded null) with its own
weights, so the twelve differ the way real reward models do: some lean on overlap, some on length, some on
neither. Run from the repository root: `python docs/twelve_models.py [OUT]` (default runs/twelve).
"""
import sys
from pathlib import Path

from reward_auditor.audit import audit
from reward_auditor.plots import radar
from reward_auditor.report import render
from reward_auditor.scorers import CallableScorer, LengthScorer, NoiseScorer, OverlapScorer

out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/twelve")
overlap, length = OverlapScorer(), LengthScorer()
scorers = []
for k in range(12):
    a, b = [0.0, 0.5, 1.0, 2.0][k % 4], [0.0, 0.3, 0.8][k // 4]
    noise = NoiseScorer(seed=k)

    def reward(prompt, response, a=a, b=b, noise=noise):
        return a * overlap.reward(prompt, response) + b * length.reward(prompt, response) + noise.reward(prompt, response)
    scorers.append(CallableScorer(reward, name=f"rm-{k + 1:02d} (overlap {a:g}, length {b:g})", version=f"mix-{k}"))

res = audit("sample", scorers, "all", seed=0, permutations=2000, out=out, progress=False)
fig = radar(res.table)
fig.savefig(Path(__file__).with_name("twelve_models_radar.png"), dpi=80, bbox_inches="tight")
print(render(out, progress=False).html)
