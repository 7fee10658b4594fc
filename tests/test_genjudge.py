"""Generative judges (`--kind genjudge`): sampled verdicts against an in-process OpenAI-compatible server whose judges
follow known rules (tests/fake_judge.py), and a tiny random causal LM through the transformers backend."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fake_judge import JUDGES, FakeJudgeServer
from tiny_models import make_pairs

from reward_auditor.audit import audit, differences
from reward_auditor.endpoints import EndpointError
from reward_auditor.generations import GenerationStore
from reward_auditor.genjudge import ChatBackend, GenerativeJudgeScorer, condition_verdicts
from reward_auditor.perturbations import condition_from_frame
from reward_auditor.verdicts import TemplateError, builtin_templates, load_template, smoothed_share

REPO = Path(__file__).resolve().parents[1]
PAD = " Furthermore, as noted above, this point deserves to be stated again in plain words for clarity."


@pytest.fixture(scope="module")
def server():
    with FakeJudgeServer() as srv:
        yield srv


def judge(server, model="length-judge", template="mt-bench", **kw):
    kw.setdefault("samples", 4)
    return GenerativeJudgeScorer(ChatBackend(server.url, model, concurrency=kw.pop("concurrency", 4)), template,
                                 name=model, **kw)


def conditions(data):
    out = {}
    f = data.copy()
    f["rejected"] = f["rejected"] + PAD
    out["pad-rejected"] = condition_from_frame("pad-rejected", data, f, side="response")
    f = data.copy()
    f["chosen"] = f["chosen"] + PAD
    out["pad-chosen"] = condition_from_frame("pad-chosen", data, f, side="response")
    f = data.copy()
    f["prompt"] = "Please answer: " + f["prompt"]
    out["prompt-prefix"] = condition_from_frame("prompt-prefix", data, f, side="prompt")
    return out


def test_audit_flags_the_length_judge_where_lengths_move_and_no_judge_elsewhere(server):
    data = make_pairs(40, seed=3)
    scorers = [judge(server, j) for j in ("length-judge", "position-judge", "null-judge")]
    res = audit(data, scorers, perturbations=None, conditions=conditions(data), permutations=2000, progress=False)
    got = {(r.model, r.perturbation): r.verdict for r in res.table.itertuples()}
    # padding the rejected answer wins it the length judge's vote: a degradation; padding the chosen one, an improvement
    assert got.pop(("length-judge", "pad-rejected")) == "UNSUITABLE"
    assert got.pop(("length-judge", "pad-chosen")) == "IMPROVES"
    assert set(got.values()) == {"NO_EVIDENCE"}, got  # the prompt prefix, and every cell of the unbiased-by-length judges
    row = res.table.set_index(["model", "perturbation"]).loc[("length-judge", "pad-rejected")]
    assert row["mean_delta"] > 0.2 and row["accuracy_after"] < row["accuracy_before"]
    # the report quotes the judge's own rationales for each flagged cell, escaped: sample 0, chosen answer first
    from reward_auditor.report import judge_rationales_html
    page = judge_rationales_html(res, k=2)
    assert page.count("<details") == 2 and "pad-rejected (UNSUITABLE)" in page and "pad-chosen (IMPROVES)" in page
    first = res.verdicts[(res.verdicts["order"] == "AB") & (res.verdicts["sample"] == 0)]
    assert first["rationale"].notna().all() and res.verdicts.loc[res.verdicts["sample"] > 0, "rationale"].isna().all()
    quoted = first[(first["model"] == "length-judge") & (first["condition"] == "pad-rejected")]["rationale"]
    from html import escape
    assert any(escape(t, quote=False)[:80] in page for t in quoted)


def test_parse_failures_are_counted_exactly(server):
    data = make_pairs(12, seed=1)
    before = server.invalid_emitted
    sc = judge(server, "flaky-judge")
    out = sc.score_pairs(data, progress=False)
    emitted = server.invalid_emitted - before
    assert emitted > 0
    assert int(out["n_invalid"].sum()) == emitted == int((sc.last_verdicts["verdict"] == "invalid").sum())
    assert sc.last_report["invalid"] == emitted
    assert (out["n_samples"] == 8).all()
    valid = out["n_samples"] - out["n_invalid"]
    assert np.allclose(out["smoothed_share"], (out["n_chosen"] + 0.5 * out["n_tie"] + 0.5) / (valid + 1))


def test_the_margin_lands_on_the_audits_decision_scale():
    "audit.differences reads σ(margin): for a genjudge item that is its smoothed share (c + ½)/(n_valid + 1)."
    c0, n0 = np.array([7.0, 4.0, 0.0, 3.5]), np.array([8.0, 8.0, 6.0, 7.0])
    c1, n1 = np.array([2.0, 4.0, 3.0, 3.5]), np.array([8.0, 7.0, 6.0, 8.0])
    from reward_auditor.verdicts import share_margin
    d = differences(share_margin(c0, n0), share_margin(c1, n1), "prob")
    assert np.allclose(d, smoothed_share(c0, n0) - smoothed_share(c1, n1), atol=1e-12)
    assert np.isclose(d[0], 7.5 / 9 - 2.5 / 9)  # hand computation
    dl = differences(share_margin(c0, n0), share_margin(c1, n1), "logprob")
    assert np.allclose(dl, np.log(smoothed_share(c0, n0)) - np.log(smoothed_share(c1, n1)))


def test_reparsing_and_fewer_samples_generate_nothing(server):
    data = make_pairs(6, seed=2)
    store = GenerationStore(":memory:")
    first = judge(server, store=store)
    a = first.score_pairs(data, progress=False)
    n = server.requests
    assert first.last_report["requests"] == 12  # 6 pairs × 2 orders, one request of n=4 each
    # another parser that reads the verdict inside <think> too: the same texts, other verdicts, no request
    loose = judge(server, store=store, parser={"pattern": r"\[\[\s*([ABC])\s*\]\]", "take": "first",
                                               "labels": {"A": "A", "B": "B", "C": "tie"}})
    b = loose.score_pairs(data, progress=False)
    fewer = judge(server, store=store, samples=2)  # its own layout would be n=2: it reads the stored n=4 blocks
    c = fewer.score_pairs(data, progress=False)
    assert server.requests == n and loose.last_report["requests"] == 0 == fewer.last_report["requests"]
    assert not a["margin"].equals(b["margin"])  # the decoy verdict in <think> is what the loose parser reads
    assert (c["n_samples"] == 4).all()
    pd.testing.assert_frame_equal(c, first.score_pairs(data, progress=False, samples=2))
    more = judge(server, store=store, samples=8, samples_per_request=4)  # K above the stored: only the new block
    more.score_pairs(data, progress=False)
    assert more.last_report["requests"] == 12 and more.last_report["stored_requests"] == 12


def test_reruns_are_bitwise_equal_whatever_the_concurrency(server):
    data = make_pairs(10, seed=4)
    outs = []
    for conc in (1, 4):
        sc = judge(server, "null-judge", concurrency=conc, store=GenerationStore(":memory:"))
        outs.append((sc.score_pairs(data, progress=False), sc.last_verdicts))
    assert outs[0][0]["margin"].to_numpy().tobytes() == outs[1][0]["margin"].to_numpy().tobytes()
    assert outs[0][0].to_csv() == outs[1][0].to_csv() and outs[0][1].to_csv() == outs[1][1].to_csv()


@pytest.mark.parametrize("template", builtin_templates())
def test_every_shipped_template_reads_its_own_verdict_format(server, template):
    data = pd.DataFrame({"id": ["x"], "subset": "chat", "prompt": ["Name a prime."],
                         "chosen": ["Two is the smallest prime number, and it is also the only even one of them."],
                         "rejected": ["Nine."]})
    sc = judge(server, "length-judge", template, samples=8)
    out = sc.score_pairs(data, progress=False).iloc[0]
    assert out["n_invalid"] == 0 and out["n_samples"] == (16 if sc.template.mode == "pairwise" else 8)
    assert out["margin"] > 0


def test_thinking_is_asked_through_chat_template_kwargs(server):
    sc = judge(server, thinking=False)
    sc.score_pairs(make_pairs(2, seed=5), progress=False)
    assert server.kwargs_seen[-1] == {"enable_thinking": False}
    texts = sc.generations(make_pairs(2, seed=5))
    assert not any("<think>" in t for ts in texts.values() for t in ts)


def test_a_server_that_ignores_n_is_one_clear_error(server):
    class One(ChatBackend):
        def generate(self, messages, n, seed, sampling):
            return super().generate(messages, 1, seed, sampling)
    sc = GenerativeJudgeScorer(One(server.url, "length-judge"), samples=3)
    with pytest.raises(Exception, match="returned 1"):
        sc.score_pairs(make_pairs(1), progress=False)
    with FakeJudgeServer(ignore_n=True) as srv:  # the backend's own check of the server's answer
        sc = GenerativeJudgeScorer(ChatBackend(srv.url, "length-judge", concurrency=1), samples=3)
        with pytest.raises(EndpointError, match=r"returned 1 choices for n=3: does the server honour n\?"):
            sc.score_pairs(make_pairs(1), progress=False)
        assert srv.requests == 1  # not retried: one clear error
    with FakeJudgeServer(fail=[503]) as srv:  # a transient error is retried
        ok = GenerativeJudgeScorer(ChatBackend(srv.url, "null-judge", backoff=0.01), samples=2)
        assert len(ok.score_pairs(make_pairs(1), progress=False)) == 1
    with pytest.raises(EndpointError, match="does not serve"):
        ChatBackend(server.url, "no-such-judge")


def test_a_user_template_is_data_and_its_faults_name_the_field(tmp_path, server):
    p = tmp_path / "mine.json"
    p.write_text('{"name": "mine", "mode": "pairwise", "user": "{{ prompt }}\\n[Answer A]\\n{{ answer_a }}\\n'
                 '[End of Answer A]\\n[Answer B]\\n{{ answer_b }}\\n[End of Answer B]\\nSay [[A]] or [[B]].",'
                 ' "parser": {"pattern": "Verdict: \\\\[\\\\[([AB])\\\\]\\\\]", "labels": {"A": "A", "B": "B"}}}')
    out = judge(server, template=p).score_pairs(make_pairs(3, seed=6), progress=False)
    assert (out["n_invalid"] == 0).all()
    p.write_text('{"name": "mine", "mode": "pairwise", "user": "{{ prompt }} {{ answer_a }}", "parser": {}}')
    with pytest.raises(TemplateError, match=r"mine.json.user: a pairwise template must show 'answer_b'"):
        load_template(p)


def test_condition_verdicts_copy_the_original_rows_of_unchanged_items(server):
    data = make_pairs(4, seed=7)
    sc = judge(server, "null-judge")
    sc.score_pairs(data, progress=False)
    base = sc.last_verdicts
    f = data.iloc[[1]].copy()
    f["chosen"] = f["chosen"] + PAD
    sc.score_pairs(f, progress=False)
    v = condition_verdicts("pad", base, sc.last_verdicts, data["id"], [False, True, False, False])
    assert list(v.columns) == ["condition", "id", "order", "sample", "verdict", "subset", "rationale"]
    assert len(v) == 4 * 8 and (v["condition"] == "pad").all()
    assert v["id"].tolist() == [i for i in data["id"] for _ in range(8)]
    cols = ["id", "order", "sample", "verdict", "subset", "rationale"]
    got = v[v["id"] == data["id"][1]][cols].reset_index(drop=True)
    assert got.equals(sc.last_verdicts[cols].reset_index(drop=True))  # the re-scored item: the scorer's new rows
    assert not got.equals(base[base["id"] == data["id"][1]][cols].reset_index(drop=True))  # which differ from the base's
    for i in data["id"].drop(1):  # the unchanged items: the original's rows, as they were
        assert v[v["id"] == i][cols].reset_index(drop=True).equals(base[base["id"] == i][cols].reset_index(drop=True))


RESUME = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from tiny_models import make_pairs
    from reward_auditor.genjudge import ChatBackend, GenerativeJudgeScorer
    sc = GenerativeJudgeScorer(ChatBackend({url!r}, "length-judge", concurrency=1), samples=4, store={store!r})
    sc.score_pairs(make_pairs(8, seed=9), progress=False)
""")


def test_kill_9_then_resume_loses_nothing_and_gives_the_same_bytes(tmp_path):
    store = tmp_path / "generations.sqlite"
    with FakeJudgeServer(die_after=5) as hanging:
        code = RESUME.format(tests=str(REPO / "tests"), url=hanging.url, store=str(store))
        proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)})
        t0 = time.time()
        while hanging.requests < 5 and time.time() - t0 < 60:
            time.sleep(0.05)
        time.sleep(0.3)  # the sixth request is in flight (the server hangs on it)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(GenerationStore(store)) == 5  # every answered request was committed
    data = make_pairs(8, seed=9)
    with FakeJudgeServer() as srv:
        resumed = GenerativeJudgeScorer(ChatBackend(srv.url, "length-judge"), samples=4, store=store)
        a = resumed.score_pairs(data, progress=False)
        assert resumed.last_report["requests"] == 16 - 5 == srv.requests
        fresh = GenerativeJudgeScorer(ChatBackend(srv.url, "length-judge"), samples=4, store=tmp_path / "fresh.sqlite")
        b = fresh.score_pairs(data, progress=False)
    assert a.to_csv() == b.to_csv() and resumed.last_verdicts.to_csv() == fresh.last_verdicts.to_csv()


def test_a_tiny_local_lm_samples_gibberish_counted_as_parse_failures(tmp_path):
    from tiny_models import tiny_lm
    from reward_auditor.genjudge import LocalBackend
    folder = tiny_lm(tmp_path / "lm")
    data = make_pairs(3, seed=8)
    data.loc[2, "rejected"] = " ".join(["capital"] * 600)  # beyond the tiny model's 512 positions
    outs = []
    from reward_auditor.specs import scorer_from
    short = {"name": "short", "mode": "pairwise", "user": "{{ prompt }}\nA: {{ answer_a }}\nB: {{ answer_b }}\n[[A]] or [[B]]?",
             "parser": {"pattern": r"\[\[([AB])\]\]", "labels": {"A": "A", "B": "B"}}}  # fits the tiny model's window
    for make in (lambda: GenerativeJudgeScorer(LocalBackend(str(folder), device="cpu", dtype="float32"), short,
                                               samples=2, max_tokens=12),
                 lambda: scorer_from({"model": str(folder), "kind": "genjudge", "samples": 2, "max_tokens": 12,
                                      "device": "cpu", "dtype": "float32", "template": short})):
        sc = make()
        outs.append((sc.score_pairs(data, progress=False), sc.generations(data)))
        assert sc.last_report["completion_tokens"] == 0  # the second call read the store
    out, texts = outs[0]
    assert (out["n_samples"] == 4).all() and (out["n_invalid"] == 4).all() and out["margin"].isna().all()
    assert sc.last_report["too_long"] == 4  # the third pair's two presentations, 2 samples each: never generated
    assert all(isinstance(t, str) for ts in texts.values() for t in ts)
    assert texts == outs[1][1]  # the same seeds from content: the same samples in a new process state
    assert len({t for ts in texts.values() for t in ts if t}) > 1  # sampled, not greedy


def test_an_endpoint_recipe_of_kind_genjudge(server):
    from reward_auditor.specs import SpecError, scorer_from
    sc = scorer_from({"endpoint": server.url, "model": "position-judge", "kind": "genjudge", "template": "rm-bench",
                      "samples": 3, "thinking": False, "name": "pos"})
    assert (sc.name, sc.kind, sc.template.name, sc.samples, sc.sampling["thinking"]) == ("pos", "genjudge", "rm-bench", 3, False)
    with pytest.raises(SpecError, match="'tokenizer' does not apply"):
        scorer_from({"endpoint": server.url, "kind": "genjudge", "model": "null-judge", "tokenizer": "x"})


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.slow)])  # Ray starts in ~30 s
def test_an_engine_fills_the_generation_store_and_the_audit_is_bitwise_the_in_process_one(server, engine, tmp_path):
    data = make_pairs(10, seed=11)
    conds = conditions(data)
    kw = dict(perturbations=None, conditions=conds, permutations=500, progress=False)
    here = audit(data, [judge(server, "length-judge")], out=tmp_path / "here", **kw)
    if engine == "ray":
        ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'reward_auditor[ray]')")
        if not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}})
        from reward_auditor.engines import RayEngine
        eng = RayEngine(workers=1, cpus_per_worker=0.5, unit_batches=2)
    else:
        from reward_auditor.engines import LocalEngine
        eng = LocalEngine(unit_batches=2)
    before = server.requests
    sc = judge(server, "length-judge")
    there = audit(data, [sc], out=tmp_path / "there", engine=eng, **kw)
    assert eng.reports[-1].computed == server.requests - before == 10 * 2 * 4  # 10 pairs, 2 orders, orig + 3 conditions
    assert sc.last_report["requests"] == 0  # the audit's own scoring read what the engine stored
    cols = ["model", "id", "perturbation", "margin_before", "margin_after"]
    assert here.items[cols].to_csv() == there.items[cols].to_csv()
    assert here.table["p"].to_numpy().tobytes() == there.table["p"].to_numpy().tobytes()


def test_a_prompt_longer_than_the_window_loses_its_samples_not_the_run():
    data = make_pairs(3, seed=12)
    data.loc[1, "chosen"] = " ".join(["word"] * 400)
    with FakeJudgeServer(max_prompt_words=300) as srv:
        sc = GenerativeJudgeScorer(ChatBackend(srv.url, "length-judge"), samples=4)
        out = sc.score_pairs(data, progress=False)
    assert out["n_invalid"].tolist() == [0, 8, 0] and np.isnan(out["margin"].iloc[1])
    assert sc.last_report["too_long"] == 8 and np.isfinite(out["margin"].iloc[[0, 2]]).all()
    with FakeJudgeServer(fail=[400]) as srv:  # any other refusal still stops at once, quoting the server
        with pytest.raises(EndpointError, match="HTTP 400"):
            GenerativeJudgeScorer(ChatBackend(srv.url, "length-judge"), samples=2).score_pairs(data, progress=False)


def test_a_window_refusal_is_not_stored_so_a_larger_window_generates_it():
    data = make_pairs(2, seed=12)
    data.loc[1, "chosen"] = " ".join(["word"] * 400)
    store = GenerationStore(":memory:")
    with FakeJudgeServer(max_prompt_words=300) as small:
        sc = GenerativeJudgeScorer(ChatBackend(small.url, "length-judge"), samples=2, store=store)
        a = sc.score_pairs(data, progress=False)
    assert a["n_invalid"].tolist() == [0, 4] and sc.last_report["too_long"] == 4
    with FakeJudgeServer() as big:  # the same judge behind a larger window, the same store
        sc = GenerativeJudgeScorer(ChatBackend(big.url, "length-judge"), samples=2, store=store)
        b = sc.score_pairs(data, progress=False)
        assert sc.last_report["requests"] == big.requests == 2  # the refused pair's two orders, asked again
    assert sc.last_report["stored_requests"] == 2 and sc.last_report["too_long"] == 0
    assert b["n_invalid"].tolist() == [0, 0] and np.isfinite(b["margin"]).all()
    # an engine's commit keeps the same rule: a refused record is not written, a generated one is
    refused = {"texts": ["", ""], "finish": ["too_long"] * 2, "completion_tokens": 0, "prompt_tokens": 0}
    fine = {"texts": ["Verdict: [[A]]", "Verdict: [[B]]"], "finish": ["stop"] * 2, "completion_tokens": 4,
            "prompt_tokens": 9}
    sc._fill_store = store
    sc.commit_unit([("refused-key",), ("fine-key",)], [refused, fine])
    assert set(store.get_many(["refused-key", "fine-key"])) == {"fine-key"}


def test_a_local_judge_rebuilt_on_a_worker_keeps_trust_remote_code_and_takes_the_workers_device(tmp_path):
    from tiny_models import tiny_lm
    from reward_auditor.engines import build_scorer, scorer_recipe
    from reward_auditor.genjudge import LocalBackend, local_genjudge
    folder = tiny_lm(tmp_path / "lm")
    sc = GenerativeJudgeScorer(LocalBackend(str(folder), device="cpu", dtype="float32", trust_remote_code=True),
                               samples=2, max_tokens=8, name="tiny")
    assert sc.backend.trust_remote_code is True
    rec = scorer_recipe(sc)
    assert rec["kwargs"]["trust_remote_code"] is True and "device" not in rec["kwargs"]
    seen = {}

    def spy(spec, **kw):  # what the worker builds the judge with
        seen.update(kw, spec=spec)
        return local_genjudge(spec, **kw)
    built = build_scorer({**rec, "cls": spy}, device="cpu")   # the worker's device, given by its engine
    assert seen["device"] == "cpu" and seen["trust_remote_code"] is True and seen["spec"] == str(folder)
    assert built.backend.trust_remote_code is True and built.fingerprint == sc.fingerprint
    assert (built.samples, built.sampling, built.name) == (sc.samples, sc.sampling, sc.name)


def test_the_run_folder_keeps_every_verdict_and_items_carry_the_counts(server, tmp_path):
    from reward_auditor.audit import AuditResult
    data = make_pairs(8, seed=13)
    res = audit(data, [judge(server, "flaky-judge")], perturbations=None, conditions=conditions(data),
                permutations=200, progress=False, out=tmp_path / "run")
    v = res.verdicts
    assert list(v.columns) == ["model", "condition", "id", "order", "sample", "verdict", "subset", "rationale"]
    assert set(v["condition"]) == {"original", "pad-rejected", "pad-chosen", "prompt-prefix"}
    assert len(v) == 4 * 8 * 2 * 4 and set(v["verdict"]) <= {"chosen", "rejected", "tie", "invalid"}
    it = res.items
    for col in ("n_samples", "n_invalid", "share", "smoothed_share"):
        assert f"{col}_before" in it and f"{col}_after" in it
    one = it[it["perturbation"] == "pad-rejected"].set_index("id")
    orig_bad = v[(v["condition"] == "original") & (v["verdict"] == "invalid")].groupby("id").size()
    assert (one["n_invalid_before"] == orig_bad.reindex(one.index, fill_value=0)).all()
    pert_bad = v[(v["condition"] == "pad-rejected") & (v["verdict"] == "invalid")].groupby("id").size()
    assert (one["n_invalid_after"] == pert_bad.reindex(one.index, fill_value=0)).all()
    assert res.manifest["scores"]["by_model"]["flaky-judge"]["orig"]["invalid"] == int(orig_bad.sum()) > 0
    back = AuditResult.load(tmp_path / "run")
    pd.testing.assert_frame_equal(back.verdicts, v)
    assert (tmp_path / "run" / "generations.sqlite").is_file()


def test_the_command_line_names_what_does_not_apply(server, tmp_path, capsys):
    from reward_auditor.cli import main
    base = ["audit", "--data", "sample", "--limit", "6", "--perturbations", "EF", "--permutations", "100",
            "--out", str(tmp_path / "r"), "--no-report"]
    assert main(base + ["--scorer", "length", "--samples", "4"]) == 2
    assert "--samples applies to generative judges" in capsys.readouterr().err
    assert main(base + ["--model", str(tmp_path), "--kind", "genjudge", "--batch-size", "4"]) == 2
    assert "--batch-size does not apply to --kind genjudge" in capsys.readouterr().err
    assert main(base + ["--endpoint", server.url, "--endpoint-model", "null-judge", "--kind", "genjudge",
                        "--endpoint-tokenizer", "x"]) == 2
    assert "'tokenizer' does not apply" in capsys.readouterr().err
    assert main(base + ["--endpoint", server.url, "--endpoint-model", "null-judge", "--kind", "genjudge",
                        "--samples", "2", "--thinking", "off", "--judge-template", "judgebench"]) == 0
    m = json.loads((tmp_path / "r" / "manifest.json").read_text())
    s = m["models"]["null-judge"]["settings"]
    assert server.kwargs_seen[-1] == {"enable_thinking": False}
    assert (m["models"]["null-judge"]["kind"], s["samples"], s["template"], s["thinking"]) == (
        "genjudge", 2, "judgebench", False)


def test_resume_on_the_command_line_reads_the_stored_generations(server, tmp_path):
    from reward_auditor.cli import main
    cmd = ["audit", "--data", "sample", "--limit", "6", "--perturbations", "EF", "--permutations", "100",
           "--out", str(tmp_path / "r"), "--no-report", "--endpoint", server.url, "--endpoint-model", "length-judge",
           "--kind", "genjudge", "--samples", "2"]
    assert main(cmd) == 0
    first = (tmp_path / "r" / "items.parquet").read_bytes()
    n = server.requests
    assert main(cmd[:-4] + ["--resume", "--endpoint", server.url, "--endpoint-model", "length-judge"]) == 0
    assert server.requests == n and (tmp_path / "r" / "items.parquet").read_bytes() == first


def test_the_result_hands_its_verdicts_to_the_sampled_statistics(server):
    data = make_pairs(30, seed=14)
    res = audit(data, [judge(server, "length-judge"), judge(server, "position-judge")], perturbations=None,
                conditions=conditions(data), permutations=500, progress=False)
    t = res.sampled_tests(B=2000)
    assert set(t["model"]) == {"length-judge", "position-judge"} and set(t["condition"]) == set(conditions(data))
    flagged = {(r.model, r.condition) for r in t.itertuples() if r.rejected}
    assert flagged == {("length-judge", "pad-rejected")}, flagged  # share of the chosen answer drops only there
    o = res.order_tests().set_index(["model", "condition"])
    # the position judge picks slot A 8 times in 10 whatever it is shown: its first slot wins in both orders
    assert (o.loc["position-judge", "first_slot_share"] > 0.9).all() and (o.loc["position-judge", "p_adjusted"] < 0.01).all()
    assert (o.loc["length-judge", "position_bias"].abs() < 0.2).all()


def test_a_sequential_audit_of_judges_spends_fewer_generations_and_agrees_where_the_full_one_flags(server):
    """The length judge's padded cells are flagged within a few rounds and the blind judge's cells stop as futile,
    so the sequential audit asks the server for far fewer generations; on every cell the full audit flags, it
    flags the same way."""
    data = make_pairs(80, seed=21)
    kw = dict(perturbations=None, conditions=conditions(data), permutations=1000, progress=False)
    scorers = lambda: [judge(server, "length-judge"), judge(server, "null-judge")]
    before = server.choices
    full = audit(data, scorers(), **kw)
    full_calls, before = server.choices - before, server.choices
    seq = audit(data, scorers(), sequential=True, round_size=10, **kw)
    seq_calls = server.choices - before
    assert seq_calls < 0.6 * full_calls
    key = ["model", "perturbation"]
    m = full.table[key + ["verdict"]].merge(seq.table[key + ["verdict", "sequential_status"]], on=key,
                                            suffixes=("_full", "_seq"))
    flagged = m[m["verdict_full"].isin(["UNSUITABLE", "IMPROVES"])]
    assert len(flagged) >= 2 and (flagged["verdict_full"] == flagged["verdict_seq"]).all()
    blind = m[m["model"] == "null-judge"]
    assert set(blind["sequential_status"]) <= {"futile", "exhausted", "clean"} and (blind["verdict_seq"] == "NO_EVIDENCE").all()
    assert seq.manifest["sequential"]["calls"]["saved"] > 0.4
