"""Engines fill the score cache with bitwise the scores of the in-process path: the unit planner follows the scorer's
own batch plan; local and Ray engines, failing units, dying actors, resume across engines."""
import json
import os
import random
import sqlite3
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


# --- Ray ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'reward_auditor[ray]')")
    pytest.importorskip("ray.data", reason="the ray extra is not installed (pip install 'reward_auditor[ray]')")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
                                           "OMP_NUM_THREADS": "1"}})
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
    assert main(["audit", "--out", str(out), "--resume", "--model", str(setup["rm"]), "--engine", "local", "-q"]) == 0
    m2 = json.loads((out / "manifest.json").read_text())
    assert m2["scores"]["computed"] == 0 and m2["engine"]["name"] == "in-process"
    pd.testing.assert_frame_equal(pd.read_parquet(out / "items.parquet"), first, check_exact=True)
    plain = tmp_path / "plain"
    assert main([a if a != str(out) else str(plain) for a in args]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(plain / "items.parquet"), first, check_exact=True)


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


def test_cli_reports_a_failing_unit_as_a_user_error(setup, tmp_path, monkeypatch, capsys):
    "A unit that fails in the user's scorer exits 2 with one line naming the unit and its items (not 'internal error')."
    from reward_auditor import cli
    def fn(p, r):
        raise ValueError("broken scorer")
    monkeypatch.setattr(cli, "make_scorers", lambda args: [CallableScorer(fn, name="raises")])
    monkeypatch.setattr(cli, "make_engine", lambda args: LocalEngine(unit_batches=1))
    rc = cli.main(["audit", "--data", "sample", "--scorer", "length", "--perturbations", "EF", "-B", "200",
                   "--no-report", "-q", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "internal error" not in err[0] and "broken scorer" in err[0] and "unit" in err[0]
