"""Endpoint scorers against an in-process stand-in for vLLM (127.0.0.1 only): bitwise equal to the in-process
scorer, retried through 503/429/timeouts, never more requests in flight than allowed, resumable after the server
dies, clear errors on other 4xx, and no API key anywhere on disk."""
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fake_vllm import FakeVLLM
from reward_auditor import audit as ra_audit
from reward_auditor.cache import ScoreCache
from reward_auditor.endpoints import EndpointError, EndpointRewardScorer
from reward_auditor.scorers import DiscriminativeScorer
import tiny_models
from tiny_models import tiny_rm


def make_pairs(n=20, seed=0):
    return tiny_models.make_pairs(n, seed)


@pytest.fixture(scope="module")
def rm(tmp_path_factory):
    torch.set_num_threads(1)
    return str(tiny_rm(tmp_path_factory.mktemp("ep") / "rm"))


@pytest.fixture(scope="module")
def pairs():
    return make_pairs()


def fast(url, **kw):
    return EndpointRewardScorer(url, batch_size=4, timeout=kw.pop("timeout", 5.0), backoff=0.01, **kw)


def test_bitwise_equal_to_in_process_through_the_audit(rm, pairs, tmp_path):
    conds, _ = ra_audit.make_conditions(pairs, ["EF", "LE"], seed=0)
    local = DiscriminativeScorer(rm, dtype="float32", device="cpu", batch_size=4)
    want, _ = ra_audit.score_conditions(local, pairs, conds, cache=ScoreCache(tmp_path / "l.sqlite"))
    with FakeVLLM(rm) as server:
        ep = fast(server.url, concurrency=3)
        ep.name = local.name
        got, _ = ra_audit.score_conditions(ep, pairs, conds, cache=ScoreCache(tmp_path / "e.sqlite"))
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert 1 <= server.max_active <= 3


def test_retries_503_429_and_timeouts_to_a_complete_result(rm, pairs):
    want = DiscriminativeScorer(rm, dtype="float32", device="cpu", batch_size=4).score_pairs(pairs, progress=False)
    with FakeVLLM(rm, fail=[503, 429, 503, "slow", 429], slow_first=1.5) as server:
        ep = fast(server.url, concurrency=2, timeout=0.5)
        got = ep.score_pairs(pairs, progress=False)
    assert got["margin"].to_numpy().tobytes() == want["margin"].to_numpy().tobytes()
    assert {503, 429} <= set(server.statuses) and ep.client.stats["retries"] >= 5


def test_concurrency_never_above_the_limit(rm, pairs):
    with FakeVLLM(rm, delay=0.05) as server:
        fast(server.url, concurrency=2).score_pairs(pairs, progress=False)
        assert server.max_active == 2  # reached, never exceeded
    with FakeVLLM(rm, delay=0.02) as server:
        fast(server.url, concurrency=1).score_pairs(pairs, progress=False)
        assert server.max_active == 1


def test_server_dying_keeps_committed_scores_and_a_rerun_computes_the_rest(rm, pairs, tmp_path):
    cache = ScoreCache(tmp_path / "c.sqlite")
    with FakeVLLM(rm, die_after=6) as server:  # 2 probe requests, then 4 batches, then gone
        ep = EndpointRewardScorer(server.url, batch_size=4, concurrency=1, timeout=2.0, retries=2, backoff=0.01)
        with pytest.raises(EndpointError, match="failed after 3 attempts"):
            ep.score_pairs(pairs, cache=cache, progress=False)
    kept = cache.count()
    assert kept == 16  # four whole batches committed
    with FakeVLLM(rm) as server:
        ep2 = fast(server.url)
        got = ep2.score_pairs(pairs, cache=cache, progress=False)
    unique = len(set(zip(pairs["prompt"].tolist() * 2, pairs["chosen"].tolist() + pairs["rejected"].tolist())))
    assert ep2.last_counts == {"computed": unique - kept, "cached": kept}
    want = DiscriminativeScorer(rm, dtype="float32", device="cpu", batch_size=4).score_pairs(pairs, progress=False)
    assert np.isfinite(got["margin"]).all()
    np.testing.assert_allclose(got["margin"], want["margin"], rtol=0, atol=1e-5)  # the rerun's batches differ


def test_other_4xx_stops_at_once_quoting_the_server(rm):
    with FakeVLLM(rm) as server:
        with pytest.raises(EndpointError, match="does not serve 'nope'"):
            fast(server.url, model="nope")
        ep = fast(server.url)
        ep.model = "renamed"
        with pytest.raises(EndpointError, match=r"HTTP 404: .*does not exist"):
            ep._classify([[1, 2, 3]])
        assert ep.client.stats["retries"] == 0


def test_server_ignoring_use_activation_is_refused(rm, pairs):
    with FakeVLLM(rm, ignore_activation=True) as server:
        with pytest.raises(EndpointError, match="ignores use_activation"):
            fast(server.url).score_pairs(pairs.head(2), progress=False)


def test_api_key_sent_but_never_stored(rm, pairs, tmp_path, monkeypatch):
    monkeypatch.setenv("RA_TEST_KEY", "sk-very-secret-123")
    seen = []
    with FakeVLLM(rm) as server:
        ep = fast(server.url, api_key_env="RA_TEST_KEY")
        orig = ep.client._headers
        ep.client._headers = lambda: (seen.append(orig()), orig())[1]
        cache = ScoreCache(tmp_path / "c.sqlite")
        ep.score_pairs(pairs.head(3), cache=cache, progress=False)
    assert seen and all(h["Authorization"] == "Bearer sk-very-secret-123" for h in seen)
    assert "sk-very-secret" not in json.dumps(ep.describe()) and "sk-very-secret" not in repr(vars(ep))
    assert b"sk-very-secret" not in (tmp_path / "c.sqlite").read_bytes()


def test_cli_endpoint_audit_and_resume(rm, tmp_path):
    from reward_auditor.cli import main
    out = tmp_path / "run"
    with FakeVLLM(rm) as server:
        args = ["audit", "--data", "sample", "--endpoint", server.url, "--perturbations", "EF,LE", "-B", "200",
                "--batch-size", "4", "--no-report", "-q", "--out", str(out)]
        assert main(args) == 0
        m = json.loads((out / "manifest.json").read_text())
        assert m["scores"]["computed"] > 0
        assert main(["audit", "--out", str(out), "--resume", "--data", "sample", "--perturbations", "EF,LE",
                     "--endpoint", server.url, "-q"]) == 0
        assert json.loads((out / "manifest.json").read_text())["scores"]["computed"] == 0
    fp = next(iter(m["models"].values()))
    assert fp["kind"] == "endpoint-rm"


def test_endpoint_judge_reads_exact_verdict_logprobs(tmp_path):
    from reward_auditor.endpoints import EndpointJudgeScorer
    from reward_auditor.scorers import JudgeScorer
    from tiny_models import tiny_lm
    lm = str(tiny_lm(tmp_path / "judge", arch="qwen2", seed=3))
    few = make_pairs(4, seed=1)
    want = JudgeScorer(lm, dtype="float32", device="cpu").score_pairs(few, progress=False)
    cache = ScoreCache(tmp_path / "c.sqlite")
    with FakeVLLM(lm=lm, fail=[503]) as server:
        ej = EndpointJudgeScorer(server.url, concurrency=2, timeout=5.0, backoff=0.01)
        got = ej.score_pairs(few, cache=cache, progress=False)
        assert server.max_active <= 2
        again = ej.score_pairs(few, cache=cache, progress=False)
    for col in ("margin", "z_fwd", "z_rev", "tie_mass"):
        np.testing.assert_allclose(got[col], want[col], rtol=0, atol=1e-4)
    assert ej.last_counts["computed"] == 0 and again["margin"].equals(got["margin"])
    assert ej.describe()["kind"] == "endpoint-judge" and "readout" in ej.settings()


def _hub_labels(lm, pres):
    "The two single-token labels the tiny judge most often ranks in its top 20 at the verdict position."
    from collections import Counter
    from reward_auditor.scorers import JudgeScorer
    probe = JudgeScorer(lm, dtype="float32", device="cpu", tie_label=None)
    seen, tok = Counter(), probe.tokenizer
    with torch.inference_mode():
        for p in pres:
            t = torch.tensor([probe._judge_fitting(p)])
            seen.update(torch.topk(probe.model(input_ids=t).logits[0, -1], 20).indices.tolist())
    ok = lambda s, i: s and s.strip() == s and tok.encode(s, add_special_tokens=False) == [i]
    return tuple([tok.decode([i]) for i, _ in seen.most_common() if ok(tok.decode([i]), i)][:2])


def test_chat_judge_top_k_exact_where_listed_bounded_otherwise(tmp_path, monkeypatch):
    from reward_auditor.endpoints import EndpointChatJudgeScorer, EndpointJudgeScorer
    from reward_auditor.scorers import JudgeScorer
    from tiny_models import tiny_lm
    lm = str(tiny_lm(tmp_path / "judge", arch="qwen2", seed=3))
    few = make_pairs(6, seed=1)
    pres = JudgeScorer(lm, dtype="float32", device="cpu", tie_label=None).pair_items(few)
    kw = dict(labels=_hub_labels(lm, pres), tie_label=None, spellings=("{}",), timeout=5.0, backoff=0.01)
    monkeypatch.setenv("RA_TEST_KEY", "sk-chat-secret-456")
    with FakeVLLM(lm=lm) as server:
        (_, z_exact, _), = EndpointJudgeScorer(server.url, **kw).presentation_scores(pres)
        wide = EndpointChatJudgeScorer(server.url, top_k=20, api_key_env="RA_TEST_KEY", **kw)
        (_, z_wide, _), = wide.presentation_scores(pres)
        narrow = EndpointChatJudgeScorer(server.url, top_k=2, api_key_env="RA_TEST_KEY", **kw)
        (_, z_narrow, _), = narrow.presentation_scores(pres)
        cache = ScoreCache(tmp_path / "c.sqlite")
        got = narrow.score_pairs(few, cache=cache, progress=False)
    assert server.auth == {"Bearer sk-chat-secret-456"}
    # both labels listed: exactly the completions judge's z
    listed = len(pres) - wide.last_report["bounded"] - wide.last_report["verdict_missing"]
    assert listed > 0 and int((np.abs(z_wide - z_exact) < 1e-4).sum()) == listed
    # a label pushed out of the top 2: a bound on z (same sign, no larger), counted
    bound = np.isfinite(z_narrow) & (np.abs(z_narrow - z_exact) > 1e-4)
    assert narrow.last_report["bounded"] == int(bound.sum()) > 0
    assert np.all(np.sign(z_narrow[bound]) * np.sign(z_exact[bound]) >= 0)
    assert np.all(np.abs(z_narrow[bound]) <= np.abs(z_exact[bound]) + 1e-6)
    assert np.isnan(z_narrow[~np.isfinite(z_narrow)]).sum() == narrow.last_report["verdict_missing"]
    assert got["margin"].notna().any() and narrow.last_report["bounded"] > 0
    s = narrow.settings()
    assert s["readout"] == "chat/top-k approximation" and s["top_k"] == 2
    assert narrow.fingerprint != wide.fingerprint and narrow.kind == "endpoint-chat-judge"
    assert "sk-chat-secret" not in json.dumps(narrow.describe()) and "sk-chat-secret" not in repr(vars(narrow))
    assert b"sk-chat-secret" not in (tmp_path / "c.sqlite").read_bytes()
    with pytest.raises(EndpointError, match="between 1 and 20"):
        EndpointChatJudgeScorer("http://127.0.0.1:9", top_k=21)


def test_cli_chat_judge_counts_in_the_manifest(tmp_path):
    from reward_auditor.cli import main
    from tiny_models import tiny_lm
    lm = str(tiny_lm(tmp_path / "judge", arch="qwen2", seed=3))
    out = tmp_path / "run"
    with FakeVLLM(lm=lm, boost={"A": 12.0}) as server:  # "A" always listed, "B" mostly not: bounded margins
        args = ["audit", "--data", "sample", "--endpoint", server.url, "--kind", "judge", "--endpoint-api", "chat",
                "--perturbations", "EF,LE", "-B", "200", "--no-report", "-q", "--out", str(out)]
        assert main(args) == 0
    m = json.loads((out / "manifest.json").read_text())
    fp = next(iter(m["models"].values()))
    assert fp["kind"] == "endpoint-chat-judge" and fp["settings"]["readout"] == "chat/top-k approximation"
    assert fp["settings"]["top_k"] == 20
    by = next(iter(m["scores"]["by_model"].values()))
    assert all(c.get("bounded", 0) <= c["computed"] + c["cached"] for c in by.values())
    assert by["orig"]["bounded"] > 0 and by["EF"]["bounded"] > 0  # the bound is counted in the manifest
    # (LE's longer answers exceed the tiny judge's 512 tokens, the limit the server reports: too long, not bounded)


def test_chat_judge_counts_cover_cached_presentations(tmp_path):
    "bounded / verdict_missing come from a readout stored beside z and tie: a killed and resumed run reports the one-shot counts."
    import sqlite3
    import subprocess
    import sys
    from reward_auditor.cache import key_digest
    from reward_auditor.cli import main
    from reward_auditor.endpoints import EndpointChatJudgeScorer
    from tiny_models import tiny_lm
    repo = Path(__file__).resolve().parents[1]
    lm = str(tiny_lm(tmp_path / "judge", arch="qwen2", seed=3))
    args = lambda url, out: ["audit", "--data", "sample", "--endpoint", url, "--kind", "judge", "--endpoint-api", "chat",
                             "--perturbations", "EF,LE", "-B", "200", "--no-report", "-q", "--out", str(out)]
    counts = lambda out: json.loads((out / "manifest.json").read_text())["scores"]["by_model"]
    readouts = lambda by: {m: {c: {k: v for k, v in n.items() if k in ("bounded", "verdict_missing")}
                               for c, n in conds.items()} for m, conds in by.items()}
    with FakeVLLM(lm=lm, boost={"A": 12.0}) as server:  # "A" always listed, "B" mostly not: bounded margins
        assert main(args(server.url, tmp_path / "one")) == 0
        # the same audit killed (SIGKILL) after two committed chunks of the original pairs, then resumed
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "tests")]), "OMP_NUM_THREADS": "1",
               "RA_KILL_AFTER_COMMITS": "2"}
        r = subprocess.run([sys.executable, str(repo / "tests" / "killer.py"), *args(server.url, tmp_path / "two")],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == -9, r.stderr[-2000:]
        kept = ScoreCache(tmp_path / "two" / "scores.sqlite").count()
        assert kept > 0 and not (tmp_path / "two" / "items.parquet").exists()
        assert main(["audit", "--out", str(tmp_path / "two"), "--resume", "--data", "sample", "--perturbations",
                     "EF,LE", "--endpoint", server.url, "--kind", "judge", "--endpoint-api", "chat", "-q"]) == 0
    one, two = counts(tmp_path / "one"), counts(tmp_path / "two")
    assert two != one  # the resumed run computed less (part was cached) ...
    assert readouts(two) == readouts(one)  # ... and reports the same bounded / verdict_missing counts
    assert sum(n.get("bounded", 0) for m in one.values() for n in m.values()) > 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "two" / "items.parquet"),
                                  pd.read_parquet(tmp_path / "one" / "items.parquet"), check_exact=True)

    # a cache written before readouts were stored (z and tie only) still opens; those presentations are asked again
    few = make_pairs(4, seed=1)
    cache = ScoreCache(tmp_path / "old.sqlite")
    with FakeVLLM(lm=lm, boost={"A": 12.0}) as server:
        cj = EndpointChatJudgeScorer(server.url, timeout=5.0, backoff=0.01)
        cj.score_pairs(few, cache=cache, progress=False)
        want = {k: cj.last_report[k] for k in ("bounded", "verdict_missing")}
        old = cj.pair_items(few)[:3]
        con = sqlite3.connect(tmp_path / "old.sqlite")
        con.executemany("DELETE FROM scores WHERE key=?", [(key_digest((*p, "readout")),) for p in old])
        con.commit()
        con.close()
        cj.score_pairs(few, cache=cache, progress=False)
    assert cj.last_counts["computed"] == 3 and {k: cj.last_report[k] for k in want} == want


def _files_holding(folder: Path, needle: bytes) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


def test_a_server_naming_its_model_after_the_key_gets_it_masked_everywhere(rm, tmp_path, monkeypatch, capsys):
    "The served model id is the server's text: a key in it is masked in every file of the run and every line printed."
    from reward_auditor.cli import main
    key = "rk-live-ServedAsModel0123456789"  # not shaped like a token: masked because it is the key
    monkeypatch.setenv("RA_TEST_KEY", key)
    out = tmp_path / "run"
    with FakeVLLM(rm, name=f"org/\x1b]0;owned\x07{key}\x1b[2J") as server:   # escapes too: a terminal's commands
        args = ["audit", "--data", "sample", "--endpoint", server.url, "--endpoint-tokenizer", rm,
                "--api-key-env", "RA_TEST_KEY", "--perturbations", "EF", "-B", "50", "--batch-size", "4",
                "--no-report", "--out", str(out)]
        assert main(args) == 0
        assert f"Bearer {key}" in server.auth  # the key did go to the server the user named
    written = [p.name for p in out.rglob("*") if p.is_file()]
    assert {"manifest.json", "risk_table.csv"} <= set(written) and any("results" in w for w in written)
    assert _files_holding(out, key.encode()) == [] and _files_holding(out, b"ServedAsModel") == []
    printed = capsys.readouterr()
    assert "ServedAsModel" not in printed.out + printed.err
    assert "\x1b" not in printed.out + printed.err and "\x07" not in printed.out + printed.err
    assert "reward-auditor: ]0;owned***[2J: 160/160" in printed.err   # the progress line names it as text
    names = pd.read_parquet(out / "results.parquet")["model"].unique().tolist()
    assert names == ["]0;owned***[2J"]
