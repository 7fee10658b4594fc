"""Throughput on a CUDA GPU (run by bench/gpu_check.sh): the token-budget batch plan against the previous fixed
16 rows, and tokenizing the next condition ahead against tokenizing in series, for a ~0.3B random reward model.

    PYTHONPATH=.:tests python bench/gpu_throughput.py [--pairs 2000]

Prints texts/s, tokens/s and the ratios, the budget chosen and the largest margin difference. Nothing asserted.
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "bench")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2000)
    a = ap.parse_args()
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification
    from scoring import synthetic_pairs
    from tiny_models import tiny_tokenizer
    from reward_auditor.audit import score_conditions
    from reward_auditor.scorers import load_scorer
    assert torch.cuda.is_available(), "no CUDA GPU visible"
    print("gpu:", torch.cuda.get_device_name(0), "| free GiB", round(torch.cuda.mem_get_info()[0] / 2**30, 1))
    tmp = Path(tempfile.mkdtemp())
    tok = tiny_tokenizer(tmp / "rm")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=4096, num_labels=1,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    LlamaForSequenceClassification(cfg).to(torch.bfloat16).save_pretrained(tmp / "rm")
    frame = synthetic_pairs(a.pairs, seed=0, max_words=600, mu=4.0)
    res = {}
    for label, kw in (("fixed 16 rows (previous)", dict(batch_size=16, max_batch_tokens=65536)), ("token budget", {})):
        sc = load_scorer(str(tmp / "rm"), device="cuda", **kw)
        sc.score_pairs(frame.head(64), progress=False)
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = sc.score_pairs(frame, progress=False)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        res[label] = (sc.last_report["tokens"] / dt, out["margin"].to_numpy(), sc.batching(), sc.last_report["batches"])
        print(f"{label:25s}: {2 * a.pairs / dt:8.0f} texts/s, {res[label][0]:9.0f} tokens/s, "
              f"{res[label][3]} batches, budget {res[label][2]['token_budget']} ({res[label][2]['budget_source']})")
        del sc
        torch.cuda.empty_cache()
    (f, fm, _, _), (b, bm, _, _) = res.values()
    print(f"ratio token budget / fixed 16 = {b / f:.2f}x tokens/s; max |margin diff| {np.max(np.abs(fm - bm)):.3g}")
    conds = {f"C{k}": type("Cond", (), {"frame": frame.assign(chosen=frame["chosen"] + f" v{k}",
                                                             rejected=frame["rejected"] + f" w{k}", changed=True)})()
             for k in range(4)}
    times = {}
    for ahead in (False, True):
        sc = load_scorer(str(tmp / "rm"), device="cuda")
        sc.tokenize_ahead = ahead
        sc.score_pairs(frame.head(64), progress=False)
        t = time.perf_counter()
        items, _ = score_conditions(sc, frame, conds)
        torch.cuda.synchronize()
        times[ahead] = (time.perf_counter() - t, items["margin_after"].to_numpy())
        del sc
        torch.cuda.empty_cache()
    print(f"original + 4 conditions: in series {times[False][0]:.1f} s, tokenized ahead {times[True][0]:.1f} s, "
          f"ratio x{times[False][0] / times[True][0]:.2f}; bitwise equal: "
          f"{times[False][1].tobytes() == times[True][1].tobytes()}")


if __name__ == "__main__":
    main()
