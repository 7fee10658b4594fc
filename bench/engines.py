"""Engines and endpoints: what distribution costs, against scoring in this process, robust to a noisy machine.

    OMP_NUM_THREADS=1 python bench/engines.py --skip-perturb          # 5,000 and 1,000 texts, 5 interleaved repeats
    OMP_NUM_THREADS=1 python bench/engines.py --actor-only            # scoring beyond start-up: a warm actor vs here
    python bench/engines.py --texts 20000 --small 4000 --repeats 5     # larger; Ray part skipped without the ray extra

Every configuration scores the same synthetic texts with the same tiny random reward model (built offline):

- `in-process`: plain `score_pairs` with a score cache (the reference);
- `local engine`: plan units, score them, commit each unit, then the ordinary cached read;
- `ray, N actor(s)`: the Ray engine (actor start and model load inside every fill; `ray.init` once, timed apart);
- `endpoint, concurrency C`: the /classify scorer against a stand-in vLLM server on 127.0.0.1 in this process
  (the server's forward passes share the CPU with the client, as the reference's do, and its HTTP and JSON work
  shares the client's interpreter lock);
- `endpoint, server process, concurrency C`: the same stand-in in a process of its own, as a real server is (the
  client's cost is then tokenizing, JSON and HTTP; the forward passes still share this machine's cores).

Noise control: the configurations run interleaved (A B C … A B C …), `--repeats` times at each of two sizes, with
a fresh scorer and cache per run; the table gives the median and the minimum. A time is split as
T(texts) = a + b·texts through the two sizes' medians: `a` is the fixed start-up (for Ray: actors and model load),
`b` the cost per text. The overhead beyond start-up is b / b_in-process − 1 (goal: < 10 %),
and the same from the minima as a cross-check. Every run is checked bitwise against the in-process margins.
On a shared 2-core machine expect no speed-up; the point is overhead and exactness. Nothing here asserts timings.
"""
from __future__ import annotations

import argparse
import os
import statistics
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


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _serve(rm_dir: str, urls, stop) -> None:
    "Run the stand-in server in this (child) process until `stop` is set."
    import torch
    torch.set_num_threads(1)
    from fake_vllm import FakeVLLM
    with FakeVLLM(rm_dir) as server:
        urls.put(server.url)
        stop.wait()


def actor_scoring(ray, scorer, pairs, unit_batches: int, repeats: int) -> None:
    """Scoring beyond start-up: the same units scored by one warm Ray actor and by this process, interleaved.

    CPU is the scoring process's own (the actor's from inside it; Ray's daemons are not counted), wall is the
    driver's from handing out the units (two in flight, as the engine does) to the last result."""
    from reward_auditor.engines import RayEngine, _UnitActor, _wire, condition_frames, plan_units, scorer_recipe, score_unit

    class Timed(_UnitActor):
        def cpu(self) -> float:
            return time.process_time()

    units = plan_units(scorer, condition_frames(pairs, {}), None, unit_batches=unit_batches)
    actor = ray.remote(num_cpus=1)(Timed).remote(ray.put(scorer_recipe(scorer)), "cpu")
    ray.get(actor.score.remote(*_wire(units[0])))      # warm: process start, imports and model load not counted
    rows = []
    for _ in range(repeats):
        c, t = time.process_time(), time.perf_counter()
        for u in units:
            score_unit(scorer, u.chunks, u.encoded)
        local = (time.perf_counter() - t, time.process_time() - c)
        c0, t = ray.get(actor.cpu.remote()), time.perf_counter()
        queue, pending = list(reversed(units)), []
        while queue or pending:
            while queue and len(pending) < RayEngine.in_flight:
                pending.append(actor.score.remote(*_wire(queue.pop())))
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)
        wall = time.perf_counter() - t
        rows.append((local, (wall, ray.get(actor.cpu.remote()) - c0)))
    ray.kill(actor)
    med = lambda xs: statistics.median(xs)
    lw, lc = med([r[0][0] for r in rows]), med([r[0][1] for r in rows])
    aw, ac = med([r[1][0] for r in rows]), med([r[1][1] for r in rows])
    print(f"\nscoring beyond start-up ({len(units)} units, {len(pairs) * 2} texts, one warm actor, median of {repeats}):")
    print(f"  in-process   wall {lw:6.2f} s   CPU {lc:6.2f} s")
    print(f"  Ray actor    wall {aw:6.2f} s   CPU {ac:6.2f} s (in the actor)   ratio wall {aw / lw:.2f}x, CPU {ac / lc:.2f}x")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=5000, help="texts at the large size (pairs = texts / 2)")
    ap.add_argument("--small", type=int, default=None, help="texts at the small size (default texts / 5)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats per configuration and size")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-batch-tokens", type=int, default=4096, help="one token budget for every configuration")
    ap.add_argument("--unit-batches", type=int, default=8)
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--skip-endpoint", action="store_true")
    ap.add_argument("--skip-perturb", action="store_true")
    ap.add_argument("--actor-only", action="store_true", help="only scoring beyond start-up: one warm actor vs in-process")
    a = ap.parse_args(argv)
    small = a.small or a.texts // 5
    import torch
    torch.set_num_threads(1)
    from tiny_models import tiny_rm
    from reward_auditor.cache import ScoreCache
    from reward_auditor.engines import LocalEngine, PerturbPool, RayEngine
    from reward_auditor.scorers import DiscriminativeScorer

    print(f"command: python bench/engines.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"machine: {os.cpu_count()} CPU(s), torch {torch.__version__}, load average at start {load()}")
    tmp = Path(tempfile.mkdtemp())
    rm_dir = str(tiny_rm(tmp / "rm"))
    data = {n: synthetic_pairs(n // 2) for n in (small, a.texts)}
    mk = lambda: DiscriminativeScorer(rm_dir, dtype="float32", device="cpu", batch_size=a.batch_size,
                                      max_batch_tokens=a.max_batch_tokens)
    runs = [0]

    def fresh_cache():
        runs[0] += 1
        return ScoreCache(tmp / f"c{runs[0]}.sqlite")

    def in_process(pairs):
        return mk().score_pairs(pairs, cache=fresh_cache(), progress=False)["margin"].to_numpy()

    def with_engine(engine):
        def run(pairs):
            s, cache = mk(), fresh_cache()
            engine.fill(s, pairs, {}, cache)
            return s.score_pairs(pairs, cache=cache, progress=False)["margin"].to_numpy()
        return run

    if a.actor_only:
        import ray
        ray.init(include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"], "OMP_NUM_THREADS": "1"}})
        actor_scoring(ray, mk(), data[a.texts], a.unit_batches, a.repeats)
        ray.shutdown()
        return
    configs = {"in-process": in_process, "local engine": with_engine(LocalEngine(unit_batches=a.unit_batches))}
    ray = None
    if not a.skip_ray:
        try:
            import ray
        except ImportError:
            ray = None
            print("ray is not installed: pip install 'reward_auditor[ray]' (Ray part skipped)")
        if ray is not None:
            _, t_init = timed(lambda: ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False,
                                               log_to_driver=False, runtime_env={"env_vars": {
                                                   "PYTHONPATH": os.environ["PYTHONPATH"], "OMP_NUM_THREADS": "1"}}))
            print(f"ray.init (a local instance, once per driver): {t_init:.1f} s")
            for w in (1, 2):
                configs[f"ray, {w} actor(s)"] = with_engine(RayEngine(workers=w, cpus_per_worker=1 if w == 1 else 0.5,
                                                                      unit_batches=a.unit_batches))
    servers = []
    if not a.skip_endpoint:
        from fake_vllm import FakeVLLM
        from reward_auditor.endpoints import EndpointRewardScorer
        server = FakeVLLM(rm_dir)
        servers.append(server)
        for conc in (1, 2):
            def endpoint(pairs, conc=conc):
                ep = EndpointRewardScorer(server.url, batch_size=a.batch_size, max_batch_tokens=a.max_batch_tokens,
                                          concurrency=conc)
                return ep.score_pairs(pairs, cache=fresh_cache(), progress=False)["margin"].to_numpy()
            configs[f"endpoint, concurrency {conc}"] = endpoint
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        urls, stop = ctx.Queue(), ctx.Event()
        child = ctx.Process(target=_serve, args=(rm_dir, urls, stop), daemon=True)
        child.start()
        child_url = urls.get(timeout=300)
        for conc in (1, 2):
            def endpoint_apart(pairs, conc=conc):
                ep = EndpointRewardScorer(child_url, batch_size=a.batch_size, max_batch_tokens=a.max_batch_tokens,
                                          concurrency=conc)
                return ep.score_pairs(pairs, cache=fresh_cache(), progress=False)["margin"].to_numpy()
            configs[f"endpoint, server process, conc. {conc}"] = endpoint_apart

    # warm-up: imports, the first model load, Ray's first actor start (not measured)
    for fn in configs.values():
        fn(data[small].head(8))
    ref = {n: in_process(p).tobytes() for n, p in data.items()}
    times = {(c, n): [] for c in configs for n in data}
    exact = dict.fromkeys(configs, True)
    for r in range(a.repeats):
        for n, pairs in data.items():
            for name, fn in configs.items():  # interleaved: A B C … then again
                got, t = timed(lambda: fn(pairs))
                times[name, n].append(t)
                exact[name] &= got.tobytes() == ref[n]
        print(f"repeat {r + 1}/{a.repeats} done, load average {load()}", flush=True)
    for s in servers:
        s.close()
    if not a.skip_endpoint:
        stop.set()
        child.join(30)
    if ray is not None:
        actor_scoring(ray, mk(), data[a.texts], a.unit_batches, a.repeats)
        ray.shutdown()

    def fit(stat):
        out = {}
        for c in configs:
            t_s, t_l = stat(times[c, small]), stat(times[c, a.texts])
            b = (t_l - t_s) / (a.texts - small)
            out[c] = (t_l - b * a.texts, b)
        return out

    med, mn = fit(statistics.median), fit(min)
    b0, b0_min = med["in-process"][1], mn["in-process"][1]
    t0 = statistics.median(times["in-process", a.texts])
    print(f"\n{a.repeats} interleaved repeats; sizes {small} and {a.texts} texts; load average at end {load()}")
    print(f"{'configuration':34s} {'median s':>9s} {'min s':>7s} {'x in-proc':>9s} {'start-up a':>10s} "
          f"{'ms/text b':>9s} {'per-text overhead':>17s} {'(from minima)':>13s}  bitwise")
    for c in configs:
        tl = times[c, a.texts]
        a_c, b_c = med[c]
        print(f"{c:34s} {statistics.median(tl):9.2f} {min(tl):7.2f} {statistics.median(tl) / t0:9.2f} "
              f"{a_c:9.2f}s {1000 * b_c:9.3f} {b_c / b0 - 1:+17.1%} {mn[c][1] / b0_min - 1:+13.1%}  {exact[c]}")
    print(f"(median and min at {a.texts} texts; a and b from the medians at {small} and {a.texts} texts; "
          "per-text overhead = b / b_in-process - 1)")
    print("raw seconds per run:")
    for (c, n), ts in times.items():
        print(f"  {c:34s} {n:6d} texts: " + " ".join(f"{t:.2f}" for t in ts))

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
