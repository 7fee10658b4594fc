"""Perturbing in parts, and the cost of translating every segment in isolation; ratios, exactness checked.

    OMP_NUM_THREADS=1 python bench/perturb_split.py                 # 500 RM-Bench items (../shared), all parts
    OMP_NUM_THREADS=1 python bench/perturb_split.py --n 200 --skip-ray --names LC,SLC

1. apertium: the LC+SLC sentences of the n items translated with the isolated layout (each segment
   null-separated and tagged as if alone; `ApertiumTranslator`) against the former layout (one line per
   segment, sorted, chunks of 1,500, plain `apertium -u`; rebuilt here as the reference). Wall time per
   segment and per item, best of `--repeat` alternating runs, ratio isolated / former; and whether a shuffled
   batch gives the same bytes (former layout: the number of segments that change).
2. Perturbing the n items with `--names`: 1 spawned process against `PerturbPool` with 2 processes and
   `RayPerturbPool` with 2 tasks on a local Ray instance (its start not counted). Each first perturbs 80 other
   items (the bundled sample) — the start-up: spawning, imports, WordNet — then the n items; the ratio compares
   the n-item times. Every split result is checked byte for byte against `perturbations.perturb`.

The machine's load average is printed with the numbers: on shared cores, wall ratios move with other work.
Nothing here asserts timings.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])

import pandas as pd


def load() -> str:
    return "load avg " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def former_layout(lines: list[str], pair: str = "eng-spa", chunk: int = 1500) -> list[str]:
    "The previous translator's layout: distinct lines sorted, chunks of `chunk` lines, one `apertium -u` per chunk."
    order = sorted(range(len(lines)), key=lines.__getitem__)
    srt = [lines[i] for i in order]
    bounds = [(i, min(i + chunk, len(srt))) for i in range(0, len(srt), chunk)]
    run = lambda b: subprocess.run(["apertium", "-u", pair], input="\n".join(srt[b[0]:b[1]]) + "\n", text=True,
                                   capture_output=True, check=True).stdout.split("\n")[:b[1] - b[0]]
    with ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, len(bounds)))) as ex:
        parts = list(ex.map(run, bounds))
    out = [""] * len(lines)
    for i, s in zip(order, (s for p in parts for s in p)):
        out[i] = s
    return out


def sent_segments(data: pd.DataFrame) -> list[str]:
    "The distinct segments LC and SLC send for `data`."
    from reward_auditor import perturbations as P
    from reward_auditor.rewriters import ApertiumTranslator
    sent = []

    class Recording(ApertiumTranslator):
        def _generate(self, texts, instruction):
            sent.extend(texts)
            return super()._generate(texts, instruction)

    P.perturb(data, ["LC", "SLC"], seed=0, translator=Recording("eng-spa"))
    return list(dict.fromkeys(" ".join(s.split("\n")) for s in sent))


def apertium_layouts(data: pd.DataFrame, repeat: int) -> None:
    from reward_auditor.rewriters import ApertiumTranslator
    segs = sent_segments(data)
    print(f"apertium: {len(segs)} distinct LC+SLC segments from {len(data)} items, {os.cpu_count()} CPUs, {load()}")
    best = {"former": float("inf"), "isolated": float("inf")}
    outs, isolated = {}, 0
    for _ in range(repeat):
        for name in best:
            t = time.perf_counter()
            if name == "former":
                outs[name] = former_layout(segs)
            else:
                tr = ApertiumTranslator("eng-spa")          # fresh: no memo
                outs[name] = tr.translate(segs)
                isolated = tr.isolated_taggings
            best[name] = min(best[name], time.perf_counter() - t)
    for name, t in best.items():
        print(f"  {name:8s} layout: {t:6.2f} s = {1e3 * t / len(segs):.3f} ms/segment = {1e3 * t / len(data):.2f} ms/item")
    print(f"  ratio isolated / former: {best['isolated'] / best['former']:.2f} "
          f"({isolated} segments tagged in a process of their own; {load()})")
    shuffled = random.Random(0).sample(segs, len(segs))
    iso = dict(zip(shuffled, ApertiumTranslator("eng-spa").translate(shuffled)))
    old = dict(zip(shuffled[: len(segs) // 3], former_layout(shuffled[: len(segs) // 3])))
    print(f"  shuffled batch, isolated: {sum(iso[s] != o for s, o in zip(segs, outs['isolated']))} of {len(segs)} "
          f"segments differ; a third of the batch, former layout: "
          f"{sum(old[s] != o for s, o in zip(segs, outs['former']) if s in old)} of {len(old)} differ; "
          f"isolated vs former on the whole batch: {sum(a != b for a, b in zip(outs['isolated'], outs['former']))} differ")


def _whole(data, names, seed):
    from reward_auditor import perturbations as P
    return {n: (c.frame, c.record) for n, c in P.perturb(data, names, seed=seed).items()}


def load_sample():
    from reward_auditor.data import load_sample as sample
    return sample()


def splitting(data: pd.DataFrame, names: list[str], skip_ray: bool) -> None:
    import multiprocessing as mp
    from reward_auditor import perturbations as P
    from reward_auditor.engines import PerturbPool, RayPerturbPool
    print(f"\nperturbing {len(data)} items x {len(names)} perturbations ({','.join(names)}), {load()}")
    ref = P.perturb(data, names, seed=0)
    base = load_sample()[["id", "subset", "prompt", "chosen", "rejected"]]
    warm = pd.concat([base.assign(id=base["id"].astype(str) + f"-w{k}") for k in range(1)], ignore_index=True)
    exact = lambda got: all(got[n].frame.equals(ref[n].frame) and got[n].record == ref[n].record for n in names)
    rows = []

    def run(label, fn_warm, fn):
        t = time.perf_counter()
        fn_warm()
        t_start = time.perf_counter() - t
        t = time.perf_counter()
        got = fn()
        rows.append((label, t_start, time.perf_counter() - t, exact(got)))

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:  # a cold process, like the workers
        one = lambda d: {n: P.Condition(n, P.registry[n].side, P.registry[n].group, f, r)
                         for n, (f, r) in ex.submit(_whole, d, names, 0).result().items()}
        run("1 process", lambda: one(warm), lambda: one(data))
    with PerturbPool(workers=2, min_items=16) as pool:
        run("PerturbPool, 2 processes", lambda: pool.perturb(warm, names, seed=0), lambda: pool.perturb(data, names, seed=0))
    if not skip_ray:
        try:
            import ray
        except ImportError:
            print("ray is not installed: pip install 'reward_auditor[ray]' (Ray part skipped)")
        else:
            t = time.perf_counter()
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"], "OMP_NUM_THREADS": "1"}})
            print(f"  (Ray instance start: {time.perf_counter() - t:.1f} s, not counted)")
            pool = RayPerturbPool(workers=2, min_items=16)
            run("RayPerturbPool, 2 tasks", lambda: pool.perturb(warm, names, seed=0), lambda: pool.perturb(data, names, seed=0))
            ray.shutdown()
    t1 = rows[0][2]
    print(f"  {'':26s} {'start-up':>9s} {'N items':>8s} {'ratio':>6s}  byte-identical  (start-up: {len(warm)} other "
          "items first, in the same workers)")
    for label, t0, secs, ok in rows:
        print(f"  {label:26s} {t0:8.1f}s {secs:7.1f}s {secs / t1:6.2f}  {ok}")
    print(f"  ({load()})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--source", default="rmbench-all", choices=["sample", "rmbench", "rmbench-all"])
    ap.add_argument("--names", default="EF,PH,IU,IW,CN,LE,LC,SLC")
    ap.add_argument("--repeat", type=int, default=2, help="alternating runs of each apertium layout (best kept)")
    ap.add_argument("--skip-apertium", action="store_true")
    ap.add_argument("--skip-split", action="store_true")
    ap.add_argument("--skip-ray", action="store_true")
    a = ap.parse_args(argv)
    from perturb import items
    data = items(a.n, a.source)
    if not a.skip_apertium:
        apertium_layouts(data, a.repeat)
    if not a.skip_split:
        splitting(data, a.names.split(","), a.skip_ray)


if __name__ == "__main__":
    main()
