#!/usr/bin/env bash
# A short GPU check (at most ~12 minutes): token-budget batches and tokenizing ahead (bench/gpu_throughput.py), then: bf16 against fp32 agreement and texts/s for a ~1B-parameter random
# reward model built offline, and — when Ray is installed — the Ray engine with fractional GPUs (two actors
# sharing one GPU) checked bitwise against the in-process fp32 scores.
#
#   bash bench/gpu_check.sh            # from the repository root, on a machine with a CUDA GPU
#
# Prints numbers only; nothing is asserted about speed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export PYTHONPATH="$PWD:$PWD/tests:${PYTHONPATH:-}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# throughput: token-budget batches vs the previous fixed 16 rows, tokenizing ahead vs in series (about 3 minutes)
timeout 240 "$PY" bench/gpu_throughput.py --pairs 2000 || echo "throughput check failed (exit $?)"

exec timeout 480 "$PY" - <<'PY'
import os, sys, tempfile, time
from pathlib import Path
import numpy as np, pandas as pd, torch

assert torch.cuda.is_available(), "no CUDA GPU visible"
print("gpu:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
from tiny_models import tiny_tokenizer
from transformers import LlamaConfig, LlamaForSequenceClassification

tmp = Path(tempfile.mkdtemp())
tok = tiny_tokenizer(tmp / "rm")
# ~1.0B parameters: hidden 2048, 16 layers, GQA 16/8 heads, MLP 5632 (a random model: scores are noise, which is
# what an agreement check needs — the arithmetic, not the meaning)
cfg = LlamaConfig(vocab_size=len(tok), hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                  num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=4096, num_labels=1,
                  pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
torch.manual_seed(0)
t = time.time()
model = LlamaForSequenceClassification(cfg).to(torch.bfloat16)
model.save_pretrained(tmp / "rm")
print(f"built {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params in {time.time() - t:.0f} s")
del model

from reward_auditor.scorers import DiscriminativeScorer
from reward_auditor.cache import ScoreCache
rng = np.random.default_rng(0)
words = "the capital of france is paris and a binary search works on a sorted list of numbers while the dog sleeps".split()
txt = lambda: " ".join(rng.choice(words, int(min(400, 5 + rng.lognormal(4.0, 0.8)))))
n = 1000
pairs = pd.DataFrame({"id": [f"p{i}" for i in range(n)], "subset": "chat", "prompt": [txt() + "?" for _ in range(n)],
                      "chosen": [txt() for _ in range(n)], "rejected": [txt() for _ in range(n)]})
res = {}
for dtype in ("float32", "bfloat16"):
    sc = DiscriminativeScorer(str(tmp / "rm"), device="cuda", dtype=dtype, batch_size=32)
    sc.score_pairs(pairs.head(32), progress=False)  # warm-up
    torch.cuda.synchronize(); t = time.time()
    res[dtype] = sc.score_pairs(pairs, progress=False)
    torch.cuda.synchronize(); dt = time.time() - t
    print(f"{dtype:9s}: {2 * n / dt:7.0f} texts/s ({dt:.1f} s for {2 * n} texts)")
    del sc; torch.cuda.empty_cache()
a, b = res["float32"], res["bfloat16"]
from scipy.stats import pearsonr, spearmanr
print(f"bf16 vs fp32 margins: pearson {pearsonr(a['margin'], b['margin'])[0]:.5f}, spearman "
      f"{spearmanr(a['margin'], b['margin'])[0]:.5f}, sign agreement {np.mean(np.sign(a['margin']) == np.sign(b['margin'])):.4f}, "
      f"max |diff| {np.max(np.abs(a['margin'] - b['margin'])):.4g} (margin sd {a['margin'].std():.4g})")

try:
    import ray
except ImportError:
    print("ray not installed: fractional-GPU check skipped (pip install 'reward_auditor[ray]')")
    sys.exit(0)
from reward_auditor.engines import RayEngine
ray.init(include_dashboard=False, log_to_driver=False,
         runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}})
sub = pairs.head(300)
sc = DiscriminativeScorer(str(tmp / "rm"), device="cuda", dtype="float32", batch_size=32)
want = sc.score_pairs(sub, cache=ScoreCache(tmp / "local.sqlite"), progress=False)
cache = ScoreCache(tmp / "ray.sqlite")
t = time.time()
rep = RayEngine(workers=2, gpus_per_worker=0.5, unit_batches=2).fill(sc, sub, {}, cache)
dt = time.time() - t
got = sc.score_pairs(sub, cache=cache, progress=False)
print(f"ray, 2 actors x 0.5 GPU: {rep.units} units in {dt:.1f} s (start-up included), "
      f"bitwise equal to in-process fp32: {got['margin'].to_numpy().tobytes() == want['margin'].to_numpy().tobytes()}, "
      f"max |diff| {np.max(np.abs(got['margin'] - want['margin'])):.3g}")
ray.shutdown()
PY
