"""Engines fill the score cache with bitwise the scores of the in-process path: the unit planner follows the scorer's
own batch plan; local and Ray engines, failing units, dying actors, resume across engines."""
import json
import os
import random
import sqlite3
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reward_auditor import audit as ra_audit
from reward_auditor.cache import ScoreCache
from reward_auditor.engines import (EngineError, LocalEngine, RayEngine, build_scorer, condition_frames, plan_units,
                                    scorer_recipe)
from reward_auditor.scorers import CallableScorer, length_batches, load_scorer
import tiny_models
from tiny_models import tiny_lm, tiny_rm

REPO = Path(__file__).resolve().parents[1]


def make_pairs(n=16, seed=0):
    return tiny_models.make_pairs(n, seed)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("engines")
    pairs = make_pairs()
    conds, _ = ra_audit.make_conditions(pairs, ["EF", "IW", "LE", "SP"], seed=0)
    return {"dir": d, "pairs": pairs, "conds": conds, "rm": tiny_rm(d / "rm"), "policy": tiny_lm(d / "policy", seed=1),
            "ref": tiny_lm(d / "ref", seed=2), "judge": tiny_lm(d / "judge", arch="qwen2", seed=3)}


def make(setup, which):
    kw = dict(batch_size=3, dtype="float32", device="cpu")
    if which == "rm":
        return load_scorer(setup["rm"], **kw)
    if which == "dpo":
        return load_scorer(setup["policy"], kind="dpo", reference=setup["ref"], **kw)
    if which == "dpo-free":
        return load_scorer(setup["policy"], kind="dpo", **kw)
    return load_scorer(setup["judge"], kind="judge", commit_every=5, tie_label=None, **kw)


def cache_rows(path):
    con = sqlite3.connect(path)
    try:
        return sorted(con.execute("SELECT fingerprint, key, value FROM scores"))
    finally:
        con.close()


def test_planner_reproduces_the_local_batch_plan(setup):
    rm = make(setup, "rm")
    frames = condition_frames(setup["pairs"], setup["conds"])
    units = plan_units(rm, frames, None, unit_batches=2)
    assert units == plan_units(rm, frames, None, unit_batches=2)  # deterministic
    items = rm.pair_items(frames[0])
    seqs, _, _ = rm._encode_items(items)
    expect = [[items[i] for i in b] for b in length_batches([len(s) for s in seqs], 3, rm.max_batch_tokens)]
    chunks = [c for u in units for c in u.chunks]
    assert chunks[:len(expect)] == expect
    assert all(len(u.chunks) <= 2 for u in units)
    flat = [it for c in chunks for it in c]
    assert len(flat) == len(set(flat))

    # the batches the local path really runs are the planned chunks, in order
    seen = []
    orig = type(rm)._forward
    def spy(self, ids, mask, pos, meta):
        seen.append(ids.shape[0])
        return orig(self, ids, mask, pos, meta)
    rm._forward = spy.__get__(rm)
    ra_audit.score_conditions(rm, setup["pairs"], setup["conds"], cache=ScoreCache(setup["dir"] / "spy.sqlite"))
    assert seen == [len(c) for c in chunks]


@pytest.mark.parametrize("which", ["rm", "dpo"])
def test_units_carry_the_planners_encodings_and_never_tokenize_again(setup, which):
    "A unit scored from its carried ids never calls the tokenizer, and equals re-encoding (and what a worker gets)."
    import pickle
    from reward_auditor.engines import _wire, score_unit
    sc = make(setup, which)
    units = plan_units(sc, condition_frames(setup["pairs"], setup["conds"]), None, unit_batches=2)
    assert units and all(u.encoded is not None and len(u.encoded) == len(u.chunks) for u in units)
    assert all(e["ids"].dtype == np.int32 for u in units for e in u.encoded)
    again = [score_unit(sc, u.chunks) for u in units]  # the path without encodings tokenizes every item
    calls = []
    orig = type(sc)._encode_item
    sc._encode_item = lambda *a, **k: (calls.append(a), orig(sc, *a, **k))[1]
    carried = [score_unit(sc, u.chunks, u.encoded) for u in units]
    sent = [score_unit(sc, *pickle.loads(pickle.dumps(_wire(u)))[1:]) for u in units]   # as Ray ships it
    assert calls == []
    assert carried == again == sent  # same keys, same floats to the last bit
    score_unit(sc, units[0].chunks)
    assert len(calls) == len(units[0].items)  # the spy does see a re-encoding


def test_judge_units_carry_no_encodings(setup):
    judge = make(setup, "judge")
    assert judge.plan_encoded(judge.pair_items(setup["pairs"].head(3)))[1] is None
    assert all(u.encoded is None for u in plan_units(judge, [setup["pairs"].head(3)], None, 2))


@pytest.mark.parametrize("which", ["rm", "dpo", "dpo-free", "judge"])
def test_local_engine_is_bitwise_the_in_process_path(setup, which, tmp_path):
    sc = make(setup, which)
    pairs, conds = setup["pairs"], setup["conds"]
    if which == "judge":  # a judge reads two orders of every pair: fewer pairs keep the test short
        pairs = pairs.head(6)
        conds = {k: v for k, v in ra_audit.make_conditions(pairs, ["EF", "LE"], seed=0)[0].items()}
    plain, _ = ra_audit.score_conditions(sc, pairs, conds, cache=ScoreCache(tmp_path / "plain.sqlite"))
    cache = ScoreCache(tmp_path / "engine.sqlite")
    rep = LocalEngine(unit_batches=2).fill(sc, pairs, conds, cache)
    assert rep.committed == rep.units > 0 and not rep.failed
    items, counts = ra_audit.score_conditions(sc, pairs, conds, cache=cache)
    assert sum(c["computed"] for c in counts.values()) == 0
    pd.testing.assert_frame_equal(items, plain, check_exact=True)
    assert cache_rows(tmp_path / "engine.sqlite") == cache_rows(tmp_path / "plain.sqlite")


def test_a_failing_unit_fails_alone_and_a_rerun_computes_only_it(setup, tmp_path):
    pairs, conds = setup["pairs"], setup["conds"]
    bad = pairs["chosen"].iloc[3]
    calls = []
    def fn(p, r):
        calls.append(r)
        if r == bad and os.environ.get("RA_TEST_BREAK") == "1":
            raise ValueError("broken scorer")
        return float(len(r))
    sc = CallableScorer(fn, name="f")
    sc.commit_every = 4
    cache = ScoreCache(tmp_path / "c.sqlite")
    os.environ["RA_TEST_BREAK"] = "1"
    try:
        with pytest.raises(EngineError, match=r"unit \d+: ValueError: broken scorer \[4 item\(s\): "):
            LocalEngine(unit_batches=1).fill(sc, pairs, conds, cache)
    finally:
        del os.environ["RA_TEST_BREAK"]
    n_ok = cache.count()
    assert n_ok > 0
    calls.clear()
    rep = LocalEngine(unit_batches=1).fill(sc, pairs, conds, cache)
    assert not rep.failed and bad in calls and len(calls) == rep.computed <= 4 * rep.units
    plain, _ = ra_audit.score_conditions(sc, pairs, conds, cache=ScoreCache(tmp_path / "p.sqlite"))
    again, counts = ra_audit.score_conditions(sc, pairs, conds, cache=cache)
    assert sum(c["computed"] for c in counts.values()) == 0
    pd.testing.assert_frame_equal(again, plain, check_exact=True)


def test_worker_with_other_weights_fails_fast(setup, tmp_path):
    rm = make(setup, "rm")
    recipe = scorer_recipe(rm)
    assert build_scorer(recipe, "cpu").fingerprint == rm.fingerprint
    other = tiny_rm(tmp_path / "other", seed=9)
    with pytest.raises(EngineError, match="different|differ"):
        build_scorer({**recipe, "spec": str(other)}, "cpu")


def test_endpoint_recipe_names_the_key_variable_never_the_key(setup, monkeypatch):
    "A worker rebuilds an endpoint scorer from URL and settings; the key stays in the variable the recipe names."
    import pickle
    from fake_vllm import FakeVLLM
    from reward_auditor.endpoints import EndpointRewardScorer
    monkeypatch.setenv("RA_TEST_RECIPE_KEY", "sk-recipe-secret-789")
    with FakeVLLM(str(setup["rm"])) as server:
        ep = EndpointRewardScorer(server.url, batch_size=3, timeout=5.0, backoff=0.01, api_key_env="RA_TEST_RECIPE_KEY")
        recipe = scorer_recipe(ep)
        assert b"sk-recipe-secret" not in pickle.dumps(recipe) and recipe["env"] == ["RA_TEST_RECIPE_KEY"]
        again = build_scorer(recipe)
        assert again.fingerprint == ep.fingerprint and again.score_chunk([("Hello?", "Hi.")])[1] == ep.score_chunk([("Hello?", "Hi.")])[1]
        monkeypatch.delenv("RA_TEST_RECIPE_KEY")
        with pytest.raises(EngineError, match=r"pid \d+\) has no RA_TEST_RECIPE_KEY in its environment"):
            build_scorer(recipe)
    assert server.auth == {"Bearer sk-recipe-secret-789"}


# --- Ray ------------------------------------------------------------------------------------------------------

# the API key of the endpoint tests reaches the workers as a user would give it: through Ray's runtime_env
RAY_KEY = ("RA_TEST_RAY_KEY", "sk-ray-worker-secret-246")


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'reward_auditor[ray]')")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
                                           "OMP_NUM_THREADS": "1", RAY_KEY[0]: RAY_KEY[1]}})
    yield ray
    if started:
        ray.shutdown()


class ShuffledRay(RayEngine):
    "Units submitted in a shuffled order: results are keyed by unit, so the cache must not change."
    def _execute(self, scorer, units):
        units = list(units)
        random.Random(0).shuffle(units)
        yield from super()._execute(scorer, units)


def test_ray_engine_bitwise_equal_with_shuffled_units(setup, ray_session, tmp_path):
    sc = make(setup, "rm")
    pairs, conds = setup["pairs"], setup["conds"]
    plain, _ = ra_audit.score_conditions(sc, pairs, conds, cache=ScoreCache(tmp_path / "plain.sqlite"))
    cache = ScoreCache(tmp_path / "ray.sqlite")
    rep = ShuffledRay(workers=2, cpus_per_worker=0.5, unit_batches=3).fill(sc, pairs, conds, cache)
    assert rep.committed == rep.units and not rep.failed
    items, counts = ra_audit.score_conditions(sc, pairs, conds, cache=cache)
    assert sum(c["computed"] for c in counts.values()) == 0
    pd.testing.assert_frame_equal(items, plain, check_exact=True)
    assert cache_rows(tmp_path / "ray.sqlite") == cache_rows(tmp_path / "plain.sqlite")


def test_ray_actor_that_dies_once_is_restarted(setup, ray_session, tmp_path):
    marker = str(tmp_path / "died")
    def fn(p, r):
        if not os.path.exists(marker):
            Path(marker).write_text("x")
            os._exit(1)  # the worker process dies in the middle of a unit
        return float(len(r))
    sc = CallableScorer(fn, name="dies-once")
    sc.commit_every = 8
    cache = ScoreCache(tmp_path / "c.sqlite")
    rep = RayEngine(workers=1, cpus_per_worker=0.5, unit_batches=1).fill(sc, setup["pairs"], setup["conds"], cache)
    assert os.path.exists(marker) and rep.committed == rep.units and not rep.failed
    plain, _ = ra_audit.score_conditions(sc, setup["pairs"], setup["conds"], cache=ScoreCache(tmp_path / "p.sqlite"))
    assert cache_rows(tmp_path / "c.sqlite") == cache_rows(tmp_path / "p.sqlite")


def test_ray_unit_that_raises_leaves_the_others_committed(setup, ray_session, tmp_path):
    pairs, conds = setup["pairs"], setup["conds"]
    bad = pairs["rejected"].iloc[5]
    flag = str(tmp_path / "broken")
    Path(flag).write_text("x")
    def fn(p, r):
        if r == bad and os.path.exists(flag):
            raise ValueError("broken scorer")
        return float(len(r))
    sc = CallableScorer(fn, name="raises")
    sc.commit_every = 4
    cache = ScoreCache(tmp_path / "c.sqlite")
    with pytest.raises(EngineError, match="broken scorer"):
        RayEngine(workers=1, cpus_per_worker=0.5, unit_batches=1).fill(sc, pairs, conds, cache)
    eng = RayEngine(workers=1, cpus_per_worker=0.5, unit_batches=1)
    failed = len(eng.reports)  # 0
    left = plan_units(sc, condition_frames(pairs, conds), cache, 1)
    assert left and all(any(it[1] == bad for it in u.items) for u in left)
    os.remove(flag)
    rep = eng.fill(sc, pairs, conds, cache)
    assert failed == 0 and rep.units == len(left) and not rep.failed
    assert plan_units(sc, condition_frames(pairs, conds), cache, 1) == []


def test_cli_ray_then_resume_local_computes_nothing(setup, ray_session, tmp_path):
    from reward_auditor.cli import main
    out = tmp_path / "run"
    args = ["audit", "--data", "sample", "--model", str(setup["rm"]), "--perturbations", "EF,LE", "-B", "200",
            "--device", "cpu", "--dtype", "float32", "--batch-size", "4", "--no-report", "-q", "--out", str(out)]
    assert main(args + ["--engine", "ray", "--workers", "1", "--unit-batches", "2"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["engine"]["name"] == "ray" and m["engine"]["by_model"]["rm"]["computed"] > 0
    assert m["scores"]["computed"] == 0  # the audit itself found every score in the cache
    first = pd.read_parquet(out / "items.parquet")
    assert main(["audit", "--out", str(out), "--resume", "--data", "sample", "--perturbations", "EF,LE", "--model",
                 str(setup["rm"]), "--engine", "local", "-q"]) == 0
    m2 = json.loads((out / "manifest.json").read_text())
    assert m2["scores"]["computed"] == 0 and m2["engine"]["name"] == "in-process"
    pd.testing.assert_frame_equal(pd.read_parquet(out / "items.parquet"), first, check_exact=True)
    plain = tmp_path / "plain"
    assert main([a if a != str(out) else str(plain) for a in args]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(plain / "items.parquet"), first, check_exact=True)


@pytest.mark.parametrize("which", ["rm", "judge", "chat"])
def test_endpoint_scorers_in_ray_workers_are_bitwise_the_local_run(setup, ray_session, which, tmp_path, monkeypatch):
    "Workers rebuild the endpoint scorer (RM /classify, completions judge, chat judge) and fill the cache bitwise."
    from fake_vllm import FakeVLLM
    from reward_auditor.endpoints import EndpointChatJudgeScorer, EndpointJudgeScorer, EndpointRewardScorer
    monkeypatch.setenv(*RAY_KEY)
    pairs, conds = setup["pairs"], setup["conds"]
    if which != "rm":  # a judge reads both orders of every pair: fewer pairs keep the test short
        pairs = pairs.head(6)
        conds, _ = ra_audit.make_conditions(pairs, ["EF", "LE"], seed=0)
    kw = dict(timeout=10.0, backoff=0.01, api_key_env=RAY_KEY[0], concurrency=2)
    workers = 2 if which == "rm" else 1
    served = {"rm": str(setup["rm"])} if which == "rm" else {"lm": str(setup["judge"]), "boost": {"A": 12.0}}
    with FakeVLLM(**served) as server:
        if which == "rm":
            make_ep = lambda: EndpointRewardScorer(server.url, batch_size=3, **kw)
        elif which == "judge":
            make_ep = lambda: EndpointJudgeScorer(server.url, commit_every=5, tie_label=None, **kw)
        else:  # "A" always among the top 20, "B" often not: bounded margins, counted
            make_ep = lambda: EndpointChatJudgeScorer(server.url, commit_every=5, **kw)
        local, local_counts = ra_audit.score_conditions(make_ep(), pairs, conds, cache=ScoreCache(tmp_path / "l.sqlite"))
        server.max_active = 0
        sc = make_ep()
        cache = ScoreCache(tmp_path / "ray.sqlite")
        rep = RayEngine(workers=workers, cpus_per_worker=0.5, unit_batches=2).fill(sc, pairs, conds, cache)
        assert rep.committed == rep.units > 0 and not rep.failed
        assert 1 <= server.max_active <= workers * 2  # each worker keeps at most `concurrency` requests in flight
        items, counts = ra_audit.score_conditions(sc, pairs, conds, cache=cache)
    assert sum(c["computed"] for c in counts.values()) == 0
    pd.testing.assert_frame_equal(items, local, check_exact=True)
    assert cache_rows(tmp_path / "ray.sqlite") == cache_rows(tmp_path / "l.sqlite")
    strip = lambda cs: {n: {k: v for k, v in c.items() if k not in ("computed", "cached")} for n, c in cs.items()}
    assert strip(counts) == strip(local_counts)  # bounded / verdict_missing: the same from the cache as computed
    if which == "chat":
        assert sum(c.get("bounded", 0) for c in counts.values()) > 0
    assert server.auth == {f"Bearer {RAY_KEY[1]}"}  # workers sent the key, from their own environment
    assert RAY_KEY[1].encode() not in (tmp_path / "ray.sqlite").read_bytes()


def _ray_processes_end(proc, limit=300.0):
    "Wait for `proc` while recording every process below it (Ray's GCS, raylet, workers) → those still alive 60 s on."
    psutil = pytest.importorskip("psutil")
    seen, t0 = {}, time.monotonic()
    top = psutil.Process(proc.pid)
    while proc.poll() is None and time.monotonic() - t0 < limit:
        try:
            for c in top.children(recursive=True):
                seen.setdefault(c.pid, c)  # a psutil.Process knows its start time: a reused pid is not mistaken for it
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    # Ray's GCS, raylet, workers and actors share the driver's fate and go at once. Ray's two per-node agents notice
    # the raylet's death within 2 s but then try to report it to the dead GCS and exit only ~60 s later (measured
    # 65 s with Ray 2.60): the test does not wait for that, it ends them by pid (processes it started).
    agents = [p for p in seen.values() if _name(p).endswith("Agent")]
    _, alive = psutil.wait_procs([p for p in seen.values() if p not in agents], timeout=30)
    names = [f"{p.pid} {_name(p)}" for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for p in [*alive, *agents]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return seen, names


def _name(p) -> str:
    try:
        return p.name()
    except Exception:  # gone already
        return "?"


def test_driver_killed_mid_ray_run_resumes_with_either_engine(setup, ray_session, tmp_path):
    "SIGKILL the driver after k committed units: no Ray process outlives it, and --resume (local or Ray) computes only the rest."
    import shutil
    from reward_auditor.cli import main
    common = ["--model", str(setup["rm"]), "--perturbations", "EF,LE", "-B", "200", "--device", "cpu",
              "--dtype", "float32", "--batch-size", "4", "--no-report", "-q"]
    plain = tmp_path / "plain"
    assert main(["audit", "--data", "sample", *common, "--out", str(plain)]) == 0
    total = ScoreCache(plain / "scores.sqlite").count()

    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]), "OMP_NUM_THREADS": "1",
           "RA_KILL_AFTER_COMMITS": "3"}
    log = open(tmp_path / "driver.log", "w")
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "killer.py"), "audit", "--data", "sample", *common,
                             "--out", str(run), "--engine", "ray", "--workers", "1", "--unit-batches", "1"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    seen, alive = _ray_processes_end(proc)
    log.close()
    assert proc.returncode == -9, (tmp_path / "driver.log").read_text()[-3000:]
    said = (tmp_path / "driver.log").read_text()   # a normal run says nothing of Ray's own (its E-level lines, INFO)
    assert not re.search(r"^\[[^\]]* E \d+ \d+\]|core_worker\.cc|INFO worker\.py", said, re.M), said[-3000:]
    assert len(seen) >= 2 and not alive, f"Ray processes outlived the killed driver: {alive}"
    kept = ScoreCache(run / "scores.sqlite").count()
    assert 0 < kept < total and not (run / "items.parquet").exists()

    shutil.copytree(run, tmp_path / "run2")
    again = ["audit", "--resume", "--data", "sample", "--perturbations", "EF,LE", "--model", str(setup["rm"]), "-q"]
    assert main([*again, "--out", str(run), "--engine", "local"]) == 0
    m = json.loads((run / "manifest.json").read_text())
    assert m["scores"]["computed"] == total - kept
    assert main([*again, "--out", str(tmp_path / "run2"), "--engine", "ray", "--workers", "1"]) == 0
    m2 = json.loads((tmp_path / "run2" / "manifest.json").read_text())
    assert m2["engine"]["by_model"]["rm"]["computed"] == total - kept and m2["scores"]["computed"] == 0
    for d in (run, tmp_path / "run2"):
        assert cache_rows(d / "scores.sqlite") == cache_rows(plain / "scores.sqlite")
        for f in ("items.parquet", "results.parquet"):
            pd.testing.assert_frame_equal(pd.read_parquet(d / f), pd.read_parquet(plain / f), check_exact=True)


def test_ray_actor_loading_other_weights_fails_fast_naming_both_fingerprints(setup, ray_session, tmp_path):
    "The model folder changes after the driver fingerprinted it and before the actors load it: a clear error, no scores."
    import shutil
    folder = tmp_path / "rm"
    shutil.copytree(setup["rm"], folder)
    rm = load_scorer(str(folder), batch_size=3, dtype="float32", device="cpu")
    fp = rm.fingerprint  # the driver's fingerprint of the files as they were
    other = tiny_rm(tmp_path / "other", seed=9)
    for f in other.glob("*.safetensors"):
        shutil.copy(f, folder / f.name)  # a node with other weights under the same path
    cache = ScoreCache(tmp_path / "c.sqlite")
    t0 = time.monotonic()
    with pytest.raises(EngineError) as err:
        RayEngine(workers=1, cpus_per_worker=0.5, unit_batches=2).fill(rm, setup["pairs"], setup["conds"], cache)
    msg = str(err.value)
    assert time.monotonic() - t0 < 120  # fails fast: no retry loop, no hang
    assert fp[:12] in msg and "pid" in msg and os.uname().nodename in msg
    other_fp = load_scorer(str(folder), batch_size=3, dtype="float32", device="cpu").fingerprint
    assert other_fp != fp and other_fp[:12] in msg
    assert cache.count() == 0  # not one score from the wrong weights


# --- perturbing in parallel -----------------------------------------------------------------------------------

def test_perturbing_split_or_shuffled_data_equals_perturbing_the_whole():
    from reward_auditor import perturbations as pt
    from reward_auditor.data import load_preferences
    from reward_auditor.engines import PerturbPool
    base = load_preferences("sample")
    data = pd.concat([base.assign(id=base["id"].astype(str) + f"-{k}") for k in range(3)], ignore_index=True)
    whole = {}
    for n in ra_audit.perturbation_names("all"):
        try:
            whole.update(pt.perturb(data, [n], seed=1))
        except pt.MissingResourceError:
            pass  # a backend this machine lacks (apertium, WordNet)
    names = list(whole)
    assert len(names) >= 5
    import shutil
    assert shutil.which("apertium") is None or {"LC", "SLC"} <= set(names)  # translation splits too
    with PerturbPool(workers=2, min_items=16) as pool:
        split = pool.perturb(data, names, seed=1)
    shuffled = data.sample(frac=1.0, random_state=0).reset_index(drop=True)
    shuf = pt.perturb(shuffled, names, seed=1)
    for n in names:
        pd.testing.assert_frame_equal(split[n].frame, whole[n].frame, check_exact=True)
        assert split[n].record == whole[n].record
        a = shuf[n].frame.set_index("id").loc[whole[n].frame["id"]].reset_index()
        pd.testing.assert_frame_equal(a, whole[n].frame.reset_index(drop=True), check_exact=True)


def test_audit_with_perturb_workers_is_byte_identical(tmp_path):
    from reward_auditor.data import load_preferences
    base = load_preferences("sample")
    data = pd.concat([base.assign(id=base["id"].astype(str) + f"-{k}") for k in range(6)], ignore_index=True)
    one, _ = ra_audit.make_conditions(data, ["EF", "PH", "LE"], seed=2)
    two, _ = ra_audit.make_conditions(data, ["EF", "PH", "LE"], seed=2, workers=2)
    for n in one:
        pd.testing.assert_frame_equal(one[n].frame, two[n].frame, check_exact=True)


def _span_memo() -> dict:
    "The protected-span memo's counts in the process that runs this (a pool's worker)."
    from reward_auditor import perturbation_base
    return perturbation_base._spans.cache_info()._asdict()


def test_perturb_pool_gives_each_worker_the_same_items_every_time():
    """Part i of every perturbation goes to worker i, so a text's protected spans are scanned once per audit, not
    once per perturbation: after EF and PH each worker found every text of its part in its memo the second time."""
    from reward_auditor.data import load_preferences
    from reward_auditor.engines import PerturbPool
    base = load_preferences("sample")
    data = pd.concat([base.assign(id=base["id"].astype(str) + f"-{k}") for k in range(2)], ignore_index=True)
    with PerturbPool(workers=2, min_items=16) as pool:
        for name in ("EF", "PH", "IW"):       # one at a time, as an audit asks
            pool.perturb(data, [name], seed=3)
        memo = [ex.submit(_span_memo).result() for ex in pool._executors()]
    assert len(memo) == 2
    for m in memo:                             # the first perturbation scanned its texts, the next two found them
        assert m["misses"] > 0 and m["hits"] >= 2 * m["misses"], memo


def test_stage_split_charges_the_workers_cpu(monkeypatch):
    "A perturbation made in worker processes is charged their CPU in the run's stage split, not the parent's alone."
    from reward_auditor.data import load_preferences
    from reward_auditor.engines import PerturbPool
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    base = load_preferences("sample")
    data = pd.concat([base.assign(id=base["id"].astype(str) + f"-{k}") for k in range(2)], ignore_index=True)
    report = {}
    with PerturbPool(workers=2, min_items=16) as pool:
        ra_audit.make_conditions(data, ["EF", "PH"], seed=2, perturber=pool, report=report)
        workers = dict(pool.cpu)
    assert set(workers) == {"EF", "PH"} and all(v > 0 for v in workers.values())
    for name, spent in workers.items():
        assert report["conditions"][name] == "made" and report["cpu_seconds"][name] >= spent - 5e-4   # rounded to ms


def test_cli_reports_a_failing_unit_as_a_user_error(setup, tmp_path, monkeypatch, capsys):
    "A unit that fails in the user's scorer exits 2 with one line naming the unit and its items (not 'internal error')."
    from reward_auditor import cli, cli_audit
    def fn(p, r):
        raise ValueError("broken scorer")
    # replaced where `run_audit` looks them up
    monkeypatch.setattr(cli_audit, "make_scorers", lambda args: [CallableScorer(fn, name="raises")])
    monkeypatch.setattr(cli_audit, "make_engine", lambda args: LocalEngine(unit_batches=1))
    rc = cli.main(["audit", "--data", "sample", "--scorer", "length", "--perturbations", "EF", "-B", "200",
                   "--no-report", "-q", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "internal error" not in err[0] and "broken scorer" in err[0] and "unit" in err[0]


# --- perturbing in parts with Ray tasks (the items of test_perturbations_split) ---------------------------------

def test_ray_split_conditions_equal_the_whole(ray_session):
    from reward_auditor import perturbations as P
    from reward_auditor.engines import RayPerturbPool
    from test_perturbations_split import HAS_APERTIUM, items
    data = items(3)
    # SP and ST load a sentence model in every worker (slow here); PerturbPool's test covers their split
    names = [n for n in ("EF", "PH", "IU", "IW", "CN", "LE", "LC", "SLC") if HAS_APERTIUM or "LC" not in n]
    whole = P.perturb(data, names, seed=11)
    pool = RayPerturbPool(workers=3, min_items=16)
    split = pool.perturb(data.iloc[::-1].reset_index(drop=True), names, seed=11)
    for n in names:
        a = split[n].frame.set_index("id").loc[whole[n].frame["id"]].reset_index()
        pd.testing.assert_frame_equal(a, whole[n].frame, check_exact=True)
        assert split[n].record == whole[n].record
    with pytest.raises(P.PerturbationError, match="rate"):  # the perturbation's own error, not Ray's wrapper
        pool.perturb(data, ["EF"], seed=11, rate=2.0)


def test_ray_engine_perturbs_with_ray_tasks(ray_session, tmp_path, monkeypatch):
    "The audit with the Ray engine perturbs through Ray tasks and gets the conditions of the plain path."
    from reward_auditor import audit as ra_audit
    from reward_auditor.engines import RayPerturbPool
    from test_perturbations_split import items
    used = []
    real = RayPerturbPool._map
    monkeypatch.setattr(RayPerturbPool, "_map", lambda self, *a: used.append(a[1]) or real(self, *a))
    data = items(6)          # two parts of at least 64 items (the pool's default minimum)
    engine = RayEngine(workers=1, cpus_per_worker=0.5)
    res = ra_audit.audit(data, "length", ["EF", "LE"], seed=2, permutations=200, engine=engine, perturb_workers=2,
                         cache=tmp_path / "c.sqlite", progress=False)
    plain = ra_audit.audit(data, "length", ["EF", "LE"], seed=2, permutations=200, progress=False)
    assert used == ["EF", "LE"]
    pd.testing.assert_frame_equal(res.items, plain.items, check_exact=True)


def test_pool_workers_take_ctrl_c_quietly(capfd):
    """Ctrl-C reaches the pool's workers too (one process group). One waiting for work leaves at once with 130 and
    no traceback (the pool's own loop printed one per worker, exit 1)."""
    import signal
    from reward_auditor.data import load_sample
    from reward_auditor.engines import PerturbPool
    pool = PerturbPool(2, min_items=8)
    try:
        pool.perturb(load_sample().head(32), ["EF"], seed=0)
        for ex in pool._processes:   # a task done means its worker ran its initializer: started, and idle now
            ex.submit(int).result(timeout=120)   # (the store may have held EF, so no worker had to perturb)
        procs = [p for ex in pool._processes for p in ex._processes.values()]
        for p in procs:
            os.kill(p.pid, signal.SIGINT)
        for p in procs:
            p.join(timeout=30)
        # the executor's own thread reaps a worker that dies too; while it holds the status, exitcode reads None
        deadline = time.monotonic() + 30
        while any(p.exitcode is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.exitcode for p in procs] == [130, 130]
        assert "Traceback" not in capfd.readouterr().err
    finally:
        pool.close()
