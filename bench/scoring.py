"""Scoring throughput and cache savings.

    OMP_NUM_THREADS=1 python bench/scoring.py                 # tiny random RM on CPU (built offline)
    python bench/scoring.py --real Skywork/Skywork-Reward-V2-Qwen3-0.6B   # also a real RM, on a GPU if present

Measures
1. pairs/s of `score_pairs` (length-bucketed batches) against the honest reference, a length-sorted loop of
   32-row batches, in CPU seconds (the shipped default token budget too), against batches in data order (no
   length sorting), with padding waste, and, for context only, a naive loop of one pair at a time;
2. forward passes (texts scored) for the original data plus ten perturbed conditions, with the score cache
   (originals scored once, unchanged texts reused) against re-scoring the originals for every perturbation as a
   per-perturbation script does.
3. CPU seconds per token of `score_pairs` with token budgets of 2,048, 4,096 and 8,192 and the default against
   sorted batches of 32 rows (`--budget`), for the tiny model and a 4-layer, hidden-256 one, with the scores'
   largest difference;
4. an audit-shaped run (original + conditions scored one after another) with the next condition tokenized in the
   background against tokenizing in series (`--overlap`), with the scores compared bitwise.
Prints the ratios. Nothing here asserts timings.

    OMP_NUM_THREADS=1 python bench/scoring.py --budget --overlap     # only sections 3 and 4
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import numpy as np
import pandas as pd

VOCAB = ("the capital of france is paris and a binary search works on a sorted list of numbers while the quick "
         "brown fox jumps over the lazy dog so please summarise this text in two sentences keeping key facts "
         "compute twelve plus thirty then divide by seven prime numbers are two three five seven eleven").split()


def synthetic_pairs(n: int, seed: int = 0, max_words: int = 160, mu: float = 3.0) -> pd.DataFrame:
    "Pairs with a long-tailed (log-normal) spread of lengths, as real preference data has."
    rng = np.random.default_rng(seed)
    words = lambda: " ".join(rng.choice(VOCAB, int(min(max_words, 3 + rng.lognormal(mu, 0.9)))))
    return pd.DataFrame({"id": [f"p{i}" for i in range(n)], "subset": "chat",
                         "prompt": [words() + "?" for _ in range(n)],
                         "chosen": [words() for _ in range(n)], "rejected": [words() for _ in range(n)]})


def naive_loop(scorer, frame: pd.DataFrame) -> np.ndarray:
    "One pair at a time: template, tokenize, forward on (chosen, rejected), as a hand-written script would."
    import torch
    from reward_auditor.scorers import encode_text, render_chat
    tok, model = scorer.tokenizer, scorer.model
    out = []
    with torch.inference_mode():
        for p, c, r in zip(frame.prompt, frame.chosen, frame.rejected):
            rewards = []
            for resp in (c, r):
                ids = encode_text(tok, render_chat(tok, p, resp))[-scorer.max_length:]
                x = torch.tensor([ids], device=scorer.device)
                rewards.append(float(model(input_ids=x).logits.float()[0, 0]))
            out.append(rewards[0] - rewards[1])
    return np.array(out)


def timed(fn, *a, **kw):
    t = time.perf_counter()
    res = fn(*a, **kw)
    return res, time.perf_counter() - t


def throughput(model_dir, n_pairs: int, n_naive: int, batch_size: int, label: str, mu: float = 3.0, **kw) -> dict:
    import reward_auditor.scorers as S
    rm = S.load_scorer(str(model_dir), batch_size=batch_size, **kw)
    frame = synthetic_pairs(n_pairs, mu=mu)
    rm.score_pairs(frame.iloc[:batch_size], progress=False)  # warm-up
    bucketed, t_b = timed(rm.score_pairs, frame, progress=False)
    waste_b = rm.last_report["padding_waste"]
    tokens = rm.last_report["tokens"] / rm.last_report["computed"]
    in_order = lambda lengths: [list(range(i, min(i + batch_size, len(lengths)))) for i in range(0, len(lengths), batch_size)]
    rm.plan_batches = in_order
    try:
        unsorted, t_u = timed(rm.score_pairs, frame, progress=False)
        waste_u = rm.last_report["padding_waste"]
    finally:
        del rm.plan_batches
    ref = S.load_scorer(str(model_dir), batch_size=32, max_batch_tokens=1 << 30, **kw)  # the honest reference
    ref.score_pairs(frame.iloc[:32], progress=False)
    c0 = time.process_time()
    sorted32, t_32 = timed(ref.score_pairs, frame, progress=False)
    c_32 = time.process_time() - c0
    dflt = S.load_scorer(str(model_dir), **kw)                                       # the shipped default budget
    dflt.score_pairs(frame.iloc[:32], progress=False)
    c0 = time.process_time()
    budgeted, t_d = timed(dflt.score_pairs, frame, progress=False)
    c_d = time.process_time() - c0
    naive, t_n = timed(naive_loop, rm, frame.iloc[:n_naive])
    err = float(np.max(np.abs(naive - bucketed["margin"].to_numpy()[:n_naive])))
    r = {"label": label, "device": rm.device, "dtype": str(rm.dtype).replace("torch.", ""), "pairs": n_pairs,
         "bucketed_pairs_s": n_pairs / t_b, "unsorted_pairs_s": n_pairs / t_u, "naive_pairs_s": n_naive / t_n,
         "padding_waste_bucketed": waste_b, "padding_waste_unsorted": waste_u, "max_abs_diff_vs_naive": err}
    print(f"\n[{label}] {rm.device} {r['dtype']}, batch {batch_size}, {n_pairs} pairs, {tokens:.0f} tokens/text "
          f"on average (naive loop on {n_naive})")
    print(f"  bucketed batches : {r['bucketed_pairs_s']:9.1f} pairs/s   padding waste {waste_b:6.1%}")
    print(f"  batches in order : {r['unsorted_pairs_s']:9.1f} pairs/s   padding waste {waste_u:6.1%}")
    print(f"  naive, 1 pair    : {r['naive_pairs_s']:9.1f} pairs/s")
    print(f"  sorted batch 32  : {n_pairs / t_32:9.1f} pairs/s   ({c_32:.2f} CPU s)")
    print(f"  default budget {dflt.batching()['token_budget']}: {n_pairs / t_d:9.1f} pairs/s   ({c_d:.2f} CPU s)")
    print(f"  CPU ratio default budget / sorted batch 32 = {c_d / c_32:.2f}x (the reference; < 1 is better); "
          f"max |margin difference| {np.max(np.abs(budgeted['margin'].to_numpy() - sorted32['margin'].to_numpy())):.1e}")
    print(f"  ratio bucketed / naive    = {r['bucketed_pairs_s'] / r['naive_pairs_s']:.2f}x (batch 1: context only)")
    print(f"  ratio bucketed / in-order = {r['bucketed_pairs_s'] / r['unsorted_pairs_s']:.2f}x")
    print(f"  max |margin difference| naive vs bucketed = {err:.2e}")
    return r


def stand_in_conditions(frame: pd.DataFrame, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Ten conditions with the paper's shape: 5 prompt-side, 5 response-side, with realistic no-op shares
    (PH leaves ~41% of prompts alone; SP leaves already-structured answers alone)."""
    rng = np.random.default_rng(seed)
    n = len(frame)
    def edit(col, rate, suffix):
        hit = rng.random(n) < rate
        f = frame.copy()
        for c in ([col] if col == "prompt" else ["chosen", "rejected"]):
            f[c] = [t + suffix if h else t for t, h in zip(f[c], hit)]
        return f.assign(changed=hit)
    return {"EF": edit("prompt", 1.0, ' """'), "PH": edit("prompt", 0.59, " ."), "IU": edit("prompt", 1.0, " @u_x9"),
            "IW": edit("prompt", 1.0, " https://example.com/a"), "CN": edit("prompt", 0.97, " teh"),
            "ST": edit("response", 0.95, " indeed"), "LE": edit("response", 1.0, " More detail follows."),
            "SP": edit("response", 0.7, "\n- point"), "LC": edit("response", 1.0, " (es)"),
            "SLC": edit("response", 1.0, " (es, md)")}


def conditions_for(frame: pd.DataFrame) -> tuple[dict[str, pd.DataFrame], str]:
    try:
        from reward_auditor.perturbations import perturb
        conds = perturb(frame, names="all", seed=0)
        return {k: c.frame for k, c in conds.items()}, "reward_auditor.perturbations"
    except Exception as e:  # the perturbation module or its resources are absent: same shape, simple edits
        return stand_in_conditions(frame), f"stand-in edits ({type(e).__name__})"


def dedup(model_dir, n_pairs: int, batch_size: int) -> dict:
    from reward_auditor.cache import ScoreCache
    from reward_auditor.scorers import load_scorer
    frame = synthetic_pairs(n_pairs, seed=1)
    conds, source = conditions_for(frame)
    rm = load_scorer(str(model_dir), batch_size=batch_size)
    with tempfile.TemporaryDirectory() as d:
        cache = ScoreCache(Path(d) / "bench.sqlite")
        t0 = time.perf_counter()
        rm.score_pairs(frame, cache=cache, progress=False)
        computed = rm.last_counts["computed"]
        for f in conds.values():
            rm.score_pairs(f, cache=cache, progress=False)
            computed += rm.last_counts["computed"]
        t_cache = time.perf_counter() - t0
    per_pert = 10 * 2 * (2 * n_pairs)  # each perturbation re-scores orig and perturbed, chosen and rejected
    t0 = time.perf_counter()
    for f in conds.values():
        rm.score_pairs(frame, progress=False)
        rm.score_pairs(f, progress=False)
    t_naive = time.perf_counter() - t0
    print(f"\n[dedup] {n_pairs} pairs, orig + {len(conds)} conditions from {source}")
    print(f"  forward passes (texts scored), re-scoring originals per perturbation: {per_pert}")
    print(f"  forward passes with the score cache (originals once, unchanged reused): {computed}")
    print(f"  ratio = {per_pert / computed:.2f}x fewer forward passes;  wall time {t_naive:.1f}s -> {t_cache:.1f}s "
          f"({t_naive / t_cache:.2f}x)")
    return {"naive_forwards": per_pert, "cached_forwards": computed, "source": source}


def rm_4layer(path: Path) -> Path:
    "A 4-layer, hidden-256 llama reward model with the tiny tokenizer (random weights, built offline)."
    from transformers import LlamaForSequenceClassification
    from tiny_models import _config, _init, tiny_tokenizer
    tok = tiny_tokenizer(path)
    cfg = _config("llama", len(tok), tok, num_labels=1)
    cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.head_dim = 256, 688, 4, 64
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.max_position_embeddings = 4, 2, 4096
    _init(LlamaForSequenceClassification(cfg), 0).save_pretrained(str(path))
    return path


def budget_vs_fixed(model_dir, label: str, n_pairs: int, mu: float = 3.0, repeat: int = 2,
                    budgets=(2048, 4096, 8192)) -> None:
    """CPU seconds per token of token-budget plans against sorted batches of 32 rows (the old fixed batches,
    length-sorted too, so the comparison is of batch shapes alone), with the margins' largest difference."""
    import reward_auditor.scorers as S
    frame = synthetic_pairs(n_pairs, seed=2, mu=mu)
    runs = {"sorted batch 32": dict(batch_size=32, max_batch_tokens=1 << 30)}
    runs.update({f"token budget {b}": dict(max_batch_tokens=b) for b in budgets})
    runs["default budget (now)"] = {}
    res = {}
    for name, kw in runs.items():
        rm = S.load_scorer(str(model_dir), **kw)
        rm.score_pairs(frame.iloc[:16], progress=False)
        best, out = float("inf"), None
        for _ in range(repeat):
            c0 = time.process_time()
            out = rm.score_pairs(frame, progress=False)
            best = min(best, time.process_time() - c0)
        res[name] = (rm.last_report["tokens"] / best, out["margin"].to_numpy(), rm.last_report["batches"],
                     rm.batching()["token_budget"])
    ref_tps, ref_m = res["sorted batch 32"][0], res["sorted batch 32"][1]
    print(f"\n[{label}] {n_pairs} pairs, {rm.last_report['tokens'] / (2 * n_pairs):.0f} tokens/text, CPU seconds")
    for name, (tps, m, nb, budget) in res.items():
        print(f"  {name:24s}: {tps:9.0f} tokens/CPU-s in {nb:4d} batches (budget {budget}); "
              f"CPU ratio vs sorted batch 32 = {ref_tps / tps:.2f}x; max |margin difference| "
              f"{np.max(np.abs(ref_m - m)):.1e}")


def overlap_on_off(model_dir, n_pairs: int, n_conditions: int = 6) -> None:
    "An audit-shaped scoring run with the next condition tokenized ahead against tokenizing in series."
    from reward_auditor.audit import score_conditions
    from reward_auditor.scorers import load_scorer
    frame = synthetic_pairs(n_pairs, seed=3)
    conds = {}
    for k in range(n_conditions):
        f = frame.copy()
        f["chosen"] = f["chosen"] + f" variant {k}"
        f["rejected"] = f["rejected"] + f" other {k}"
        conds[f"C{k}"] = type("Cond", (), {"frame": f.assign(changed=True)})()
    res = {}
    for ahead in (False, True):
        rm = load_scorer(str(model_dir))
        rm.tokenize_ahead = ahead
        rm.score_pairs(frame.iloc[:8], progress=False)
        w, c = time.perf_counter(), time.process_time()
        items, _ = score_conditions(rm, frame, conds)
        res[ahead] = (time.perf_counter() - w, time.process_time() - c, items["margin_after"].to_numpy())
    (w0, c0, m0), (w1, c1, m1) = res[False], res[True]
    print(f"\n[tokenize ahead] {n_pairs} pairs x (original + {n_conditions} conditions), {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"  in series : {w0:6.2f} s wall ({c0:.2f} s CPU)")
    print(f"  ahead     : {w1:6.2f} s wall ({c1:.2f} s CPU)")
    print(f"  ratio series / ahead = {w0 / w1:.2f}x wall;  scores bitwise equal: {m0.tobytes() == m1.tobytes()}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=512)
    ap.add_argument("--naive-pairs", type=int, default=128)
    ap.add_argument("--dedup-pairs", type=int, default=160)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--real", default=None, help="a real reward model (folder or hub id) to measure as well")
    ap.add_argument("--real-pairs", type=int, default=1024)
    ap.add_argument("--budget", action="store_true", help="only the token-budget section (and --overlap if given)")
    ap.add_argument("--overlap", action="store_true", help="only the tokenize-ahead section (and --budget if given)")
    ap.add_argument("--budget-pairs", type=int, default=256)
    args = ap.parse_args(argv)
    import torch
    torch.manual_seed(0)
    if not torch.cuda.is_available():
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from tiny_models import tiny_rm
    if args.budget or args.overlap:
        with tempfile.TemporaryDirectory() as d:
            tiny, big = tiny_rm(Path(d) / "tiny-rm"), rm_4layer(Path(d) / "rm-4x256")
            if args.budget:
                budget_vs_fixed(tiny, "tiny llama RM, hidden 32", args.budget_pairs)
                budget_vs_fixed(big, "llama RM, 4 layers, hidden 256", args.budget_pairs)
            if args.overlap:
                overlap_on_off(big, args.budget_pairs // 2)
        return
    with tempfile.TemporaryDirectory() as d:
        rm_dir = tiny_rm(Path(d) / "tiny-rm")
        throughput(rm_dir, args.pairs, args.naive_pairs, args.batch_size, "tiny llama RM, hidden 32, short texts",
                   mu=1.8)
        throughput(rm_dir, args.pairs, args.naive_pairs, args.batch_size, "tiny llama RM, hidden 32, long texts",
                   mu=3.0)
        dedup(rm_dir, args.dedup_pairs, args.batch_size)
    if args.real:
        throughput(args.real, args.real_pairs, min(args.naive_pairs, args.real_pairs), args.batch_size,
                   f"real RM {args.real}", max_length=2048)


if __name__ == "__main__":
    main()
