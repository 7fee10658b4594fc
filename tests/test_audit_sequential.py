"""`audit(..., sequential=True)`: rounds of whole clusters, cells stopped by e-BH or the clean bound, what is scored
and perturbed, the manifest's round records, the same bytes for the same seed, resume after kill -9, the Ray engine."""
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reward_auditor.audit import AuditError, AuditResult, audit

REPO = Path(__file__).resolve().parents[1]
WORDS = ("the capital of france is paris and a binary search works on a sorted list of numbers while "
         "the quick brown fox jumps over the lazy dog so please summarise this text in two sentences").split()


def long_chosen(n: int = 200, seed: int = 0) -> pd.DataFrame:
    "Pairs whose chosen answer is much longer than the rejected one: the length control prefers it, and LE, SP and SLC shrink its lead."
    rng = np.random.default_rng(seed)
    txt = lambda lo, hi: " ".join(rng.choice(WORDS, rng.integers(lo, hi)))
    return pd.DataFrame({"id": [f"i{k}" for k in range(n)], "subset": "chat",
                         "prompt": [txt(3, 15) + "?" for _ in range(n)],
                         "chosen": [txt(25, 40) for _ in range(n)], "rejected": [txt(3, 8) for _ in range(n)]})


KW = dict(progress=False, semantic_check=False, margin=1.0, round_size=20)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("seq")
    data = long_chosen()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seq = audit(data, ["length", "noise"], "all", sequential=True, out=d / "seq", **KW)
        full = audit(data, ["length", "noise"], "all", margin=1.0, progress=False, semantic_check=False)
    return data, seq, full, d


def test_cells_stop_when_flagged_or_clean_and_calls_are_saved(runs):
    data, seq, full, _ = runs
    t = seq.table.set_index(["model", "perturbation"])
    flagged = t[t["sequential_status"] == "flagged"]
    assert set(flagged.index) >= {("length", "LE")} and (flagged["verdict"] == "UNSUITABLE").all()
    assert flagged.loc[("length", "LE"), "stopped_round"] < 10            # decided before the data ran out
    noise = t.loc["noise"]
    assert (noise["sequential_status"] == "clean").all() and noise["stopped_round"].max() <= 5
    # a stopped cell was scored only on its rounds: 20 pairs a round
    np.testing.assert_array_equal(t["n_scored"], 20 * t["stopped_round"])
    # the anytime-valid p, never a fixed-N one; the fixed-N interval and permutation columns stay empty
    np.testing.assert_allclose(t["p"], np.minimum(1, 1 / t["e_value"]))
    assert t["ci_low"].isna().all() and t["p_min"].isna().all()
    calls = seq.manifest["sequential"]["calls"]
    assert calls["saved"] > 0.3 and calls["scored"] == sum(calls["by_round"]) < calls["full"]
    assert seq.manifest["scores"]["computed"] < full.manifest["scores"]["computed"]
    assert "e-BH" in seq.manifest["error_control"]["statement"]


def test_it_agrees_with_the_full_audit_where_the_full_audit_flags(runs):
    _, seq, full, _ = runs
    key = ["model", "subset", "perturbation"]
    m = full.table[key + ["verdict"]].merge(seq.table[key + ["verdict"]], on=key, suffixes=("_full", "_seq"))
    decided = m[m["verdict_full"] != "NO_EVIDENCE"]
    assert len(decided) >= 3 and (decided["verdict_full"] == decided["verdict_seq"]).all()


def test_the_manifest_records_every_rounds_decisions(runs):
    _, seq, _, d = runs
    rec = seq.manifest["sequential"]
    assert [r["round"] for r in rec["decisions"]] == list(range(1, rec["rounds_run"] + 1))
    stopped = [tuple(s["cell"]) for r in rec["decisions"] for s in r["stopped"]]
    assert len(stopped) == len(set(stopped)) == len(seq.table)               # each cell stops once, and is recorded
    by_cell = {tuple(s["cell"]): (r["round"], s["status"]) for r in rec["decisions"] for s in r["stopped"]}
    for row in seq.table.itertuples():
        assert by_cell[(row.model, row.subset, row.perturbation)] == (row.stopped_round, row.sequential_status)
    saved = AuditResult.load(d / "seq")                                      # and it is saved with the run
    assert saved.manifest["sequential"]["decisions"] == rec["decisions"]
    state = json.loads((d / "seq" / "sequential.json").read_text())
    assert state["run"]["decisions"] == rec["decisions"]


def test_stopped_conditions_are_neither_perturbed_nor_scored_again(tmp_path):
    data = long_chosen(160)
    made = []
    import reward_auditor.audit_sequential as AS
    real = AS.run_rounds

    def spy(*a, make, **kw):
        return real(*a, make=lambda frame, todo, r: made.append((r, sorted(todo))) or make(frame, todo, r), **kw)

    AS.run_rounds = spy
    try:
        r = audit(data, ["noise"], ["EF", "ST", "LE"], sequential=True, **KW)
    finally:
        AS.run_rounds = real
    stop = r.table.set_index("perturbation")["stopped_round"]
    for rnd, todo in made:
        assert todo == sorted(p for p in ("EF", "ST", "LE") if stop[p] >= rnd)
    assert r.manifest["sequential"]["rounds_run"] == stop.max() < 8          # then nothing is left to score
    assert set(r.items["round"]) == set(range(1, stop.max() + 1))
    changed = r.texts[r.texts["perturbation"] != "orig"].groupby("perturbation").size()
    assert (changed <= 20 * stop.reindex(changed.index)).all()


def test_same_seed_same_rounds_and_bytes(tmp_path):
    data = long_chosen(120)
    a = audit(data, ["length"], ["LE", "EF"], sequential=True, out=tmp_path / "a", **KW)
    b = audit(data, ["length"], ["LE", "EF"], sequential=True, out=tmp_path / "b", **KW)
    for f in ("results.parquet", "items.parquet", "sequential.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    assert a.manifest["sequential"]["decisions"] == b.manifest["sequential"]["decisions"]
    c = audit(data, ["length"], ["LE", "EF"], sequential=True, seed=1, **KW)
    first = lambda r: r.items[r.items["round"] == 1]["id"].tolist()
    assert first(a) != first(c)                                              # another seed, other rounds


KILL = r"""
import os, signal, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
import reward_auditor.audit_sequential as AS
from test_audit_sequential import long_chosen, KW
from reward_auditor.audit import audit
real, n = AS._save_state, [0]
def save(*a, **kw):
    n[0] += 1
    if n[0] == 4:          # round 4 is scored; its record is not written: a driver killed mid-run
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **kw)
AS._save_state = save
audit(long_chosen(), ["length", "noise"], "all", sequential=True, out=sys.argv[2], cache=sys.argv[3], **KW)
"""


def test_kill_9_then_resume_continues_from_the_last_finished_round(runs, tmp_path):
    _, seq, _, _ = runs
    out, cache = tmp_path / "killed", tmp_path / "scores.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", KILL, str(REPO), str(out), str(cache)], env=env, capture_output=True)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()[-2000:]
    state = json.loads((out / "sequential.json").read_text())
    assert state["run"]["rounds_done"] == 3 and not (out / "results.parquet").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = audit(long_chosen(), ["length", "noise"], "all", sequential=True, out=out, cache=cache, **KW)
    assert again.manifest["sequential"]["decisions"][:3] == state["run"]["decisions"]
    pd.testing.assert_frame_equal(again.table, seq.table)                     # as if it had never been killed
    assert again.manifest["sequential"]["decisions"] == seq.manifest["sequential"]["decisions"]


def test_unbounded_scales_need_a_stated_bound():
    data = long_chosen(60)
    with pytest.raises(AuditError, match="sequential-bound"):
        audit(data, ["length"], ["LE"], sequential=True, scale="logprob", **KW)
    r = audit(data, ["length"], ["LE"], sequential=True, scale="logprob", sequential_bound=0.5, **KW)
    assert r.manifest["sequential"]["clipped"] and r.manifest["sequential"]["bound"] == 0.5
    assert (r.table["cs_high"].abs() <= 0.5).all()
    with pytest.raises(AuditError, match="sequential audit only"):
        audit(data, ["length"], ["LE"], round_size=5, progress=False)
    with pytest.raises(AuditError, match="round_size must be"):
        audit(data, ["length"], ["LE"], sequential=True, progress=False, round_size=0)


def test_the_ray_engine_gives_the_local_result(runs, tmp_path):
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'reward_auditor[ray]')")
    data = long_chosen(80)
    local = audit(data, ["length", "noise"], ["LE", "EF"], sequential=True, cache=tmp_path / "l.sqlite", **KW)
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = audit(data, ["length", "noise"], ["LE", "EF"], sequential=True, engine="ray",
                       cache=tmp_path / "r.sqlite", **KW)
    finally:
        if started:
            ray.shutdown()
    pd.testing.assert_frame_equal(remote.table, local.table)
    assert remote.manifest["sequential"]["decisions"] == local.manifest["sequential"]["decisions"]


CLI_KILL = r"""
import os, signal, sys
import reward_auditor.audit_sequential as AS
from reward_auditor.cli import main
real, n = AS._save_state, [0]
def save(*a, **kw):
    n[0] += 1
    if n[0] == 3:          # round 3 scored, its record not yet written: SIGKILL, no clean-up
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **kw)
AS._save_state = save
sys.exit(main(sys.argv[1:]))
"""


def test_cli_sequential_killed_then_resumed(runs, tmp_path, capsys):
    """`reward-auditor audit --sequential`, killed (SIGKILL) before it records round 3, then `--resume`: the run
    goes on from round 3 and ends with the table of an uninterrupted run; the summary states the calls saved."""
    from reward_auditor.cli import main
    _, seq, _, _ = runs
    data = tmp_path / "pairs.jsonl"
    long_chosen().to_json(data, orient="records", lines=True)
    out = tmp_path / "run"
    common = ["--scorer", "length", "--scorer", "noise", "--sequential", "--round-size", "20", "--margin", "1.0",
              "--semantic-check", "off", "--no-report", "-q"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", CLI_KILL, "audit", "--data", str(data), *common, "--out", str(out)],
                       env=env, capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    assert json.loads((out / "sequential.json").read_text())["run"]["rounds_done"] == 2
    assert main(["audit", "--resume", "--data", str(data), "--scorer", "length", "--scorer", "noise", "-q",
                 "--out", str(out)]) == 0
    said = capsys.readouterr().out
    again = AuditResult.load(out)
    calls = again.manifest["sequential"]["calls"]
    assert f"{calls['scored']} pairs scored of the full audit's about {calls['full']}" in said
    pd.testing.assert_frame_equal(again.table, seq.table)
    assert again.manifest["sequential"]["decisions"] == seq.manifest["sequential"]["decisions"]


def test_cli_refuses_bad_sequential_options(tmp_path, capsys):
    from reward_auditor.cli import main
    base = ["audit", "--data", "sample", "--scorer", "length", "--out", str(tmp_path / "o"), "-q", "--no-report"]
    assert main([*base, "--sequential", "--round-size", "0"]) == 2
    assert "round size must be a whole number >= 1" in capsys.readouterr().err
    assert main([*base, "--sequential", "--scale", "nll"]) == 2
    assert "--sequential-bound" in capsys.readouterr().err
    assert main([*base, "--sequential-bound", "-1"]) == 2
    assert "sequential bound must be a number > 0" in capsys.readouterr().err
    assert main([*base, "--sequential", "--futility", "1"]) == 2
    assert "futility must be a number in [0, 1)" in capsys.readouterr().err
    assert main([*base, "--futility", "0.2"]) == 2                        # a sequential option without --sequential
    assert "apply to a sequential audit only" in capsys.readouterr().err


def test_futility_stops_null_cells_that_cannot_be_decided_and_claims_nothing(tmp_path):
    """A scorer that sees nothing (noise on a strict margin: never clean at 200 pairs) is stopped as futile and
    saves its rounds; with futility 0 the same cells run to the end, and no flagged cell changes."""
    data = long_chosen()
    kw = dict(KW, margin=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on = audit(data, ["length", "noise"], "all", sequential=True, out=tmp_path / "on", **kw)
        off = audit(data, ["length", "noise"], "all", sequential=True, out=tmp_path / "off", futility=0, **kw)
    t_on, t_off = (r.table.set_index(["model", "perturbation"]) for r in (on, off))
    assert (t_off["sequential_status"] != "futile").all()
    futile = t_on[t_on["sequential_status"] == "futile"]
    assert len(futile) >= 3 and (futile["verdict"] == "NO_EVIDENCE").all()
    assert (futile["stopped_round"] >= 3).all()                  # not before a quarter of the 10 rounds were in
    assert (t_off.loc[futile.index, "sequential_status"] == "exhausted").all()
    flagged = lambda t: set(t.index[t["sequential_status"] == "flagged"])
    assert flagged(t_on) == flagged(t_off)
    rec = on.manifest["sequential"]
    assert rec["futility"] == 0.1 and rec["stopped"]["futile"] == len(futile)
    chances = [s["decision_chance"] for r in rec["decisions"] for s in r["stopped"] if s["status"] == "futile"]
    assert len(chances) == len(futile) and max(chances) < 0.1
    assert rec["calls"]["scored"] < off.manifest["sequential"]["calls"]["scored"]
    assert "futile" in on.manifest["error_control"]["statement"]
    with pytest.raises(AuditError, match="futility must be a chance"):
        audit(data, ["length"], ["EF"], sequential=True, futility=1.5, **KW)


@pytest.mark.parametrize("family", ["subset", "model"])
def test_units_left_count_what_each_cell_will_still_see(family, tmp_path, monkeypatch):
    """Clusters of three items spread over three subsets: after every round, a cell's units so far plus the units
    the run says are still to come equal what the cell sees by the end (futility off, so every cell runs out)."""
    from reward_auditor import sequential as S
    seen = []
    step = S.SequentialRun.step

    def spy(self, last=False, left=None):
        seen.append(({c: len(v) for c, v in self.observations.items()}, left, last))
        return step(self, last, left)

    monkeypatch.setattr(S.SequentialRun, "step", spy)
    data = long_chosen(120)
    data["subset"] = np.random.default_rng(1).choice(["a", "b", "c"], len(data))
    data["grp"] = [f"g{k // 3}" for k in range(len(data))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = audit(data, ["noise"], ["EF", "LE"], sequential=True, progress=False, semantic_check=False,
                    margin=0.0, round_size=5, futility=0, family=family, group_by="grp", out=tmp_path)
    t = res.table.set_index(["model", "subset", "perturbation"])
    final = t.loc[t["sequential_status"] == "exhausted", "n_clusters"]
    assert len(final) >= 0.8 * len(t) and len(seen) == res.manifest["sequential"]["rounds_planned"] and seen[-1][2]
    for n, left, last in seen[:-1]:
        for c, k in n.items():
            if c in final.index:
                assert k + left[c] == final[c], (c, k, left[c])
