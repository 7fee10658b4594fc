"""Engines and endpoints: what distribution costs, as ratios against scoring in this process.

    OMP_NUM_THREADS=1 python bench/engines.py                  # 5,000 texts, tiny random RM on CPU (built offline)
    python bench/engines.py --texts 20000 --skip-perturb       # larger; Ray part skipped when ray is not installed

Measures, on the same texts and the same tiny reward model:
1. the local engine (plan units, score them, commit each unit, then the ordinary audit read) against plain
   `score_pairs` — the planning and commit overhead;
2. the Ray engine with 1 and 2 actors: the fixed start-up (a fill of 8 pairs: Ray Data, actor start, model load)
   and the marginal overhead beyond it, (T_ray − T_ray,8) / (T_local − T_local,8) − 1 (goal < 10 % at 5k texts);
3. the endpoint scorer against a stand-in vLLM server on 127.0.0.1 (same model, same batches), concurrency 1
   and 2, against the in-process scorer;
4. perturbing in 2 processes against 1 (the split-safe perturbations; translation is not split).
Every distributed result is checked bitwise against the in-process margins. On a 2-core machine expect no
speed-up; the point is overhead and exactness. Nothing here asserts timings.
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
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])

import numpy as np
import pandas as pd

VOCAB = ("the capital of france is paris and a binary search works on a sorted list of numbers while the quick "
         "brown fox jumps over the lazy dog so please summarise this text in two sentences keeping key facts").split()


def synthetic_pairs(n: int, seed: int = 0, mu: float = 2.5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    words = lambda: " ".join(rng.choice(VOCAB, int(min(120, 3 + rng.lognormal(mu, 0.8)))))
    return pd.DataFrame({"id": [f"p{i}" for i in range(n)], "subset": "chat",
                         "prompt": [words() + "?" for _ in range(n)],
                         "chosen": [words() for _ in range(n)], "rejected": [words() for _ in range(n)]})


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=5000, help="texts to score (pairs = texts / 2)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--unit-batches", type=int, default=8)
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--skip-endpoint", action="store_true")
    ap.add_argument("--skip-perturb", action="store_true")
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from tiny_models import tiny_rm
    from reward_auditor.cache import ScoreCache
    from reward_auditor.engines import LocalEngine, PerturbPool, RayEngine
    from reward_auditor.scorers import DiscriminativeScorer

    tmp = Path(tempfile.mkdtemp())
    rm_dir = str(tiny_rm(tmp / "rm"))
    pairs = synthetic_pairs(a.texts // 2)
    mk = lambda: DiscriminativeScorer(rm_dir, dtype="float32", device="cpu", batch_size=a.batch_size)
    rows = []

    sc = mk()
    _, t_small = timed(lambda: mk().score_pairs(pairs.head(8), cache=ScoreCache(tmp / "local8.sqlite"), progress=False))
    ref, t_local = timed(lambda: sc.score_pairs(pairs, cache=ScoreCache(tmp / "local.sqlite"), progress=False))
    ref = ref["margin"].to_numpy()
    print(f"in-process: {a.texts} texts in {t_local:.1f} s = {a.texts / t_local:.0f} texts/s")
    rows.append(("in-process", t_local, t_small, True))

    def engine_run(engine, name):
        cache = ScoreCache(tmp / f"{name}.sqlite")
        s = mk()
        _, t_fill = timed(lambda: engine.fill(s, pairs, {}, cache))
        got, t_read = timed(lambda: s.score_pairs(pairs, cache=cache, progress=False))
        return t_fill + t_read, got["margin"].to_numpy().tobytes() == ref.tobytes()

    le = LocalEngine(unit_batches=a.unit_batches)
    _, t0 = timed(lambda: le.fill(mk(), pairs.head(8), {}, ScoreCache(tmp / "le8.sqlite")))
    t, ok = engine_run(le, "le")
    rows.append(("local engine", t, t0, ok))

    if not a.skip_ray:
        try:
            import ray
            ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"], "OMP_NUM_THREADS": "1"}})
            for w in (1, 2):
                eng = RayEngine(workers=w, cpus_per_worker=1 if w == 1 else 0.5, unit_batches=a.unit_batches)
                _, t_start = timed(lambda: eng.fill(mk(), pairs.head(8), {}, ScoreCache(tmp / f"startup{w}.sqlite")))
                t, ok = engine_run(eng, f"ray{w}")
                rows.append((f"ray, {w} actor(s)", t, t_start, ok))
            ray.shutdown()
        except ImportError:
            print("ray is not installed: pip install 'reward_auditor[ray]' (Ray part skipped)")

    if not a.skip_endpoint:
        from fake_vllm import FakeVLLM
        from reward_auditor.endpoints import EndpointRewardScorer
        for conc in (1, 2):
            with FakeVLLM(rm_dir) as server:
                mk_ep = lambda: EndpointRewardScorer(server.url, batch_size=a.batch_size, concurrency=conc)
                _, t0 = timed(lambda: mk_ep().score_pairs(pairs.head(8), progress=False))
                got, t = timed(lambda: mk_ep().score_pairs(pairs, progress=False))
            rows.append((f"endpoint, concurrency {conc}", t, t0, got["margin"].to_numpy().tobytes() == ref.tobytes()))

    again, t_local2 = timed(lambda: mk().score_pairs(pairs, cache=ScoreCache(tmp / "local2.sqlite"), progress=False))
    print(f"in-process again: {t_local2:.1f} s (the spread between the two in-process runs is the noise floor)")
    t_local = min(t_local, t_local2)
    print(f"\n{'engine':28s} {'seconds':>8s} {'8 pairs':>8s} {'ratio':>7s} {'marginal overhead':>18s}  bitwise")
    for name, t, t0, ok in rows:
        beyond = (t - t0) / (t_local - t_small) - 1
        print(f"{name:28s} {t:8.1f} {t0:8.1f} {t / t_local:7.2f} {beyond:+17.1%}  {ok}")

    if not a.skip_perturb:
        from reward_auditor import perturbations as pt
        from reward_auditor.data import load_preferences
        base = load_preferences("sample")
        data = pd.concat([base.assign(id=base["id"].astype(str) + f"-{k}") for k in range(25)], ignore_index=True)
        names = ["EF", "PH", "IU", "IW", "CN", "ST", "LE"]
        whole, t1 = timed(lambda: pt.perturb(data, names, seed=0))
        with PerturbPool(workers=2) as pool:
            split, t2 = timed(lambda: pool.perturb(data, names, seed=0))
        same = all(split[n].frame.equals(whole[n].frame) for n in names)
        print(f"\nperturbing {len(data)} items x {len(names)} perturbations: 1 process {t1:.1f} s, "
              f"2 processes {t2:.1f} s (ratio {t2 / t1:.2f}, start-up included), byte-identical: {same}")


if __name__ == "__main__":
    main()
