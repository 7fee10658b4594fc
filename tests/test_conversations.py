"""Multi-turn preference data: every accepted format, bad conversations named down to the turn, the exact text and
token ids the chat-template scorers feed their models, turn-first truncation, single-turn data unchanged, histories
through save/load and perturbation, and Anthropic HH audited end to end through the command line."""
import gzip
import json
import warnings

import numpy as np
import pandas as pd
import pytest

from conftest import shared_file
from test_cli import cli

from reward_auditor.data import (DataError, history_key, history_of, load_preferences, split_by_turns,
                                 split_hh_turns, turn_counts)

U = lambda t: {"role": "user", "content": t}  # noqa: E731
A = lambda t: {"role": "assistant", "content": t}  # noqa: E731
S = {"role": "system", "content": "You are terse.  "}
# four user turns; a "Human:" in the middle of a line and trailing whitespace inside the turns
HIST = [S, U("What does 'Human: hi' mean in a log?"), A("It marks a speaker.  "), U("And 'Assistant:'?"),
        A("The other speaker."), U("Thanks."), A("You're welcome.\tReally  ")]
FINAL, CHOSEN, REJECTED = "One more: what is a turn?", "One message of a conversation.", "No idea."


def hh_transcript(answer):
    body = "".join(f"\n\n{'Human' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in HIST[1:])
    return body + f"\n\nHuman: {FINAL}\n\nAssistant: {answer}"


def rows_in_every_format():
    msgs = HIST + [U(FINAL)]
    share = [{"from": {"system": "system", "user": "human", "assistant": "gpt"}[m["role"]], "value": m["content"]}
             for m in msgs]
    return {
        "trl-explicit": ("trl", {"prompt": msgs, "chosen": [A(CHOSEN)], "rejected": [A(REJECTED)]}),
        "trl-implicit": ("trl", {"chosen": msgs + [A(CHOSEN)], "rejected": msgs + [A(REJECTED)]}),
        "openai": ("messages", {"messages": msgs, "chosen": CHOSEN, "rejected": REJECTED}),
        "openai-pref": ("messages", {"input": {"messages": msgs}, "preferred_output": [A(CHOSEN)],
                                     "non_preferred_output": [A(REJECTED)]}),
        "sharegpt": ("sharegpt", {"conversations": share, "chosen": {"from": "gpt", "value": CHOSEN},
                                  "rejected": {"from": "gpt", "value": REJECTED}}),
    }


@pytest.mark.parametrize("name", list(rows_in_every_format()))
def test_every_format_gives_the_same_conversation(tmp_path, name):
    fmt, rec = rows_in_every_format()[name]
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    for f in (load_preferences(path), load_preferences(path, format=fmt)):
        assert f.attrs["format"] == fmt
        assert f.loc[0, ["prompt", "chosen", "rejected"]].tolist() == [FINAL, CHOSEN, REJECTED]
        assert history_of(f) == [tuple(HIST)]  # system message and inner whitespace kept byte for byte
        assert turn_counts(f).tolist() == [4]


def test_hh_transcripts_split_into_turns():
    f = load_preferences([{"chosen": hh_transcript(CHOSEN), "rejected": hh_transcript(REJECTED)}], format="hh")
    h = history_of(f)[0]
    assert [m["role"] for m in h] == ["user", "assistant"] * 3
    assert h[0]["content"] == "What does 'Human: hi' mean in a log?"  # mid-line "Human:" stays text
    assert h[5]["content"] == "You're welcome.\tReally"  # only the whitespace around a turn goes
    assert f.loc[0, "prompt"] == FINAL and f.loc[0, "hh_turns"] == 4
    assert split_hh_turns("\n\nHuman: a\n\nAssistant: b") == [U("a"), A("b")]


BAD = [
    ({"messages": [U("hi"), {"role": "bot", "content": "x"}, U("q")]}, "field 'history': turn 2 has unknown role 'bot'"),
    ({"messages": [U("hi"), U("q")]}, "turn 2 the final user turn follows a user turn"),
    ({"messages": [A("hi"), U("q")]}, "turn 1 is an assistant message where the user's turn should be"),
    ({"messages": [U(""), A("x"), U("q")]}, "turn 1 (user) is empty"),
    ({"messages": [["user", "hi"], A("x"), U("q")]}, "turn 1 is a list, not a message"),
    ({"messages": [S]}, "field 'messages': has no user turn"),
]


@pytest.mark.parametrize("rec,msg", BAD)
def test_bad_conversations_name_file_row_and_turn(tmp_path, rec, msg):
    path = tmp_path / "bad.jsonl"
    good = {"messages": [U("fine")], "chosen": "a", "rejected": "b"}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**rec, "chosen": "a", "rejected": "b"}) + "\n")
    with pytest.raises(DataError, match="line 2"):
        load_preferences(path)
    with pytest.raises(DataError) as e:
        load_preferences(path)
    assert msg in str(e.value) and str(path) in str(e.value)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert len(load_preferences(path, errors="drop")) == 1
    assert "dropped 1 invalid row(s) of 2" in str(w[0].message)


def test_no_shared_prefix_and_bad_input_exit_2(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"chosen": [U("a"), A("x")], "rejected": [U("b"), A("y")]}) + "\n"
                    + json.dumps({"chosen": [U("a"), A("x")], "rejected": [U("a"), A("y")]}) + "\n")
    r = cli("audit", "--data", path, "--scorer", "length", "--out", tmp_path / "run", "-q", "--no-report")
    assert r.returncode == 2 and "line 1" in r.stderr and "share no prefix" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_single_turn_conversations_equal_plain_text():
    conv = load_preferences([{"prompt": [U("q")], "chosen": [A("a")], "rejected": [A("b")]},
                             {"messages": [U("q2")], "chosen": "c", "rejected": "d"}][:1])
    plain = load_preferences([{"prompt": "q", "chosen": "a", "rejected": "b"}])
    pd.testing.assert_frame_equal(conv, plain)
    assert "history" not in conv.columns and history_key(()) == ""


# --- scorers on a tiny model with a Jinja chat template ------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from tiny_models import tiny_lm, tiny_rm
    d = tmp_path_factory.mktemp("conv-models")
    return {"rm": tiny_rm(d / "rm"), "lm": tiny_lm(d / "lm", seed=1), "ref": tiny_lm(d / "ref", seed=2)}


def three_turn_frame():
    hist = [U("What is the capital of France?"), A("Paris."), U("And of Spain?"), A("Madrid.")]
    return pd.DataFrame({"id": ["c1", "s1"], "subset": ["chat", "chat"], "prompt": ["And of Italy?", "And of Italy?"],
                         "chosen": ["Rome.", "Rome."], "rejected": ["Milan.", "Milan."],
                         "history": [hist, []]}), hist


def test_rm_sees_exactly_the_chat_template(models):
    from reward_auditor.scorers import DiscriminativeScorer, encode_text
    rm = DiscriminativeScorer(models["rm"])
    frame, hist = three_turn_frame()
    tok = rm.tokenizer
    seen = []
    rm.model.register_forward_pre_hook(lambda m, a, kw: seen.extend(
        [row[mask.bool()].tolist() for row, mask in zip(kw["input_ids"], kw["attention_mask"])]), with_kwargs=True)
    out = rm.score_pairs(frame, progress=False)
    want = {}
    for h, ans in [(hist, "Rome."), (hist, "Milan."), ([], "Rome."), ([], "Milan.")]:
        text = tok.apply_chat_template(h + [U("And of Italy?"), A(ans)], tokenize=False)
        assert text.startswith("<s><|user|>\n" + ("What is the capital" if h else "And of Italy?"))
        want[(len(h), ans)] = tok(text, add_special_tokens=False)["input_ids"]
        assert encode_text(tok, text) == want[(len(h), ans)]
    assert sorted(seen) == sorted(want.values())
    assert out.loc[0, "margin"] != out.loc[1, "margin"]  # the history changes the reward
    # same final turn, different history: distinct cache keys; single-turn keys are the plain (prompt, answer)
    from reward_auditor.cache import ScoreCache, key_digest
    cache = ScoreCache()
    rm.score_pairs(frame, cache=cache, progress=False)
    assert cache.get_many(rm.fingerprint, [("And of Italy?", "Rome.")])[0] == pytest.approx(out.loc[1, "reward_chosen"])
    assert cache.get_many(rm.fingerprint, [("And of Italy?", "Rome.", history_key(hist))])[0] == \
        pytest.approx(out.loc[0, "reward_chosen"])
    assert key_digest(("And of Italy?", "Rome.")) != key_digest(("And of Italy?", "Rome.", history_key(hist)))


def test_dpo_masks_exactly_the_answer(models):
    import torch
    from transformers import AutoModelForCausalLM
    from reward_auditor.scorers import DPOScorer
    from reward_auditor.scorer_kinds import _response_start
    dpo = DPOScorer(models["lm"], reference=models["ref"], beta=0.1)
    frame, hist = three_turn_frame()
    tok = dpo.tokenizer
    full = tok.apply_chat_template(hist + [U("And of Italy?"), A("Rome.")], tokenize=False)
    head = tok.apply_chat_template(hist + [U("And of Italy?")], tokenize=False, add_generation_prompt=True)
    ids, start = _response_start(tok, "And of Italy?", "Rome.", None, hist)
    assert ids == tok(full, add_special_tokens=False)["input_ids"]
    assert ids[:start] == tok(head, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids[start:]) == "Rome." + tok.eos_token + "\n"  # the answer and its end of turn, nothing else

    def logp(folder):
        m = AutoModelForCausalLM.from_pretrained(folder).eval()
        with torch.no_grad():
            lsm = torch.log_softmax(m(torch.tensor([ids])).logits[0].double(), -1)
        return sum(lsm[t - 1, ids[t]].item() for t in range(start, len(ids)))
    got = dpo.score_pairs(frame, progress=False)
    assert got.loc[0, "reward_chosen"] == pytest.approx(0.1 * (logp(models["lm"]) - logp(models["ref"])), abs=1e-5)

    # a template that renders the final user turn differently when the answer follows: found by the answer text
    tok.chat_template = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' and loop.last %}"
                         "{{ '<|user|>\n[last] ' + m['content'] + eos_token + '\n' }}{% else %}"
                         "{{ '<|' + m['role'] + '|>\n' + m['content'] + eos_token + '\n' }}{% endif %}{% endfor %}"
                         "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")
    ids2, start2 = _response_start(tok, "And of Italy?", "Rome.", None, hist)
    assert tok.decode(ids2[start2:]) == "Rome." + tok.eos_token + "\n"


def test_judge_sees_the_history(models):
    from reward_auditor.scorers import JudgeScorer
    judge = JudgeScorer(models["lm"])
    frame, hist = three_turn_frame()
    tok = judge.tokenizer
    text = judge.template.format(prompt="And of Italy?", a="Rome.", b="Milan.", tie=', or "[[C]]" for a tie')
    want = tok.apply_chat_template(hist + [U(text)], tokenize=False, add_generation_prompt=True)
    assert judge._judge_prompt("And of Italy?", "Rome.", "Milan.", history=hist) == \
        tok(want, add_special_tokens=False)["input_ids"]
    out = judge.score_pairs(frame, progress=False)
    assert np.isfinite(out["margin"]).all() and out.loc[0, "z_fwd"] != out.loc[1, "z_fwd"]


def test_truncation_drops_oldest_turns_first(models):
    from reward_auditor.scorers import DiscriminativeScorer
    frame, hist = three_turn_frame()
    full = DiscriminativeScorer(models["rm"])
    n_full = len(full._encode_item("And of Italy?", "Rome.", history=hist)[0])
    n_short = len(full._encode_item("And of Italy?", "Rome.", history=hist[2:])[0])
    cut = DiscriminativeScorer(models["rm"], max_length=(n_full + n_short) // 2)
    with pytest.warns(UserWarning, match="oldest messages were left out"):
        got = cut.score_pairs(frame.iloc[:1], progress=False)
    assert cut.last_report["history_messages_dropped"] == 4 and cut.last_report["history_items_cut"] == 2
    want = full.score_pairs(frame.iloc[:1].assign(history=[hist[2:]]), progress=False)
    np.testing.assert_allclose(got["margin"], want["margin"], atol=1e-6)


def test_template_error_names_the_row(models, tmp_path):
    from transformers import AutoTokenizer
    from reward_auditor.scorers import DiscriminativeScorer, ScorerError
    import shutil
    d = tmp_path / "strict"
    shutil.copytree(models["rm"], d)
    tok = AutoTokenizer.from_pretrained(d)
    tok.chat_template = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
                         "{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    tok.save_pretrained(d)
    frame, hist = three_turn_frame()
    frame.at[0, "history"] = [S] + hist
    with pytest.raises(ScorerError, match=r"row id 'c1'.*System role not supported"):
        DiscriminativeScorer(d).score_pairs(frame, progress=False)


def test_plain_rendering_without_a_template():
    from tiny_models import tiny_tokenizer
    from reward_auditor.scorers import render_chat
    tok = tiny_tokenizer(template=False)
    assert render_chat(tok, "q", "a", history=[U("hi"), A("yo")]) == "User: hi\n\nAssistant: yo\n\nUser: q\n\nAssistant: a\n\n"
    assert render_chat(tok, "q", None, "sys") == "System: sys\n\nUser: q\n\nAssistant:"


def test_controls_use_the_final_user_turn():
    from reward_auditor.scorers import OverlapScorer
    frame, _ = three_turn_frame()
    out = OverlapScorer().score_pairs(frame, progress=False)
    assert out.loc[0, "margin"] == out.loc[1, "margin"]


# --- perturbation, save/load, audit ---------------------------------------------------------------------------

def test_perturb_turns_and_round_trips(tmp_path):
    from reward_auditor.audit import AuditResult, audit
    from reward_auditor.perturbations import perturb
    frame, hist = three_turn_frame()
    frame = load_preferences(frame.assign(prompt=["And of `Italy`?", "Italy, please?"]))
    final = perturb(frame, ["IU"], seed=3)["IU"].frame
    assert history_of(final) == history_of(frame)  # default: only the final user turn changes
    every = perturb(frame, ["CN"], seed=3, turns="all")["CN"].frame
    again = perturb(frame, ["CN"], seed=3, turns="all")["CN"].frame
    assert history_of(every) == history_of(again)  # same seed, same bytes
    h0, h1 = history_of(frame)[0], history_of(every)[0]
    assert [m["role"] for m in h1] == [m["role"] for m in h0]
    assert all(a == b for a, b in zip(h0, h1) if a["role"] == "assistant")
    assert any(a != b for a, b in zip(h0, h1) if a["role"] == "user")
    assert "`Italy`" in every.loc[0, "prompt"]  # protected span kept
    resp = perturb(frame, ["ST"], seed=3)["ST"].frame
    assert history_of(resp) == history_of(frame) and (resp["prompt"] == frame["prompt"]).all()

    res = audit(frame, "length", ["IU", "LE"], permutations=50, out=tmp_path / "run", progress=False)
    back = AuditResult.load(tmp_path / "run")
    orig = back.texts[back.texts["perturbation"] == "orig"]
    assert history_of(orig) == history_of(frame)
    assert res.manifest["data"]["turns"] == {"single_turn": 1, "multi_turn": 1, "max_user_turns": 3}

    out = tmp_path / "pert.parquet"
    r = cli("perturb", "--data", _write(frame, tmp_path / "pairs.jsonl"),
            "--perturbations", "CN", "--perturb-turns", "all", "--out", out, "-q")
    assert r.returncode == 0, r.stderr
    p = pd.read_parquet(out)
    assert [len(h) for h in history_of(p)] == [4, 0]
    for suffix in (".csv", ".jsonl"):  # text files hold the history as JSON (never pickle); it reads back the same
        r = cli("perturb", "--data", tmp_path / "pairs.jsonl", "--perturbations", "CN", "--perturb-turns", "all",
                "--out", out.with_suffix(suffix), "-q")
        assert r.returncode == 0, r.stderr
        q = pd.read_csv(out.with_suffix(suffix)) if suffix == ".csv" else pd.read_json(out.with_suffix(suffix), lines=True)
        assert history_of(q) == history_of(p)
    reloaded = load_preferences(tmp_path / "pairs.jsonl")
    pd.testing.assert_frame_equal(reloaded, frame)


def _write(frame, path):
    frame.to_json(path, orient="records", lines=True, force_ascii=False)
    return path


def test_split_by_turns():
    frame, _ = three_turn_frame()
    assert split_by_turns(load_preferences(frame))["subset"].tolist() == ["chat · multi-turn", "chat · single-turn"]


def test_hh_end_to_end_through_the_cli(tmp_path, models):
    src = shared_file("hh-rlhf-harmless-base", "test.jsonl.gz")
    lines = gzip.open(src, "rt", encoding="utf-8").read().split("\n")[:24]  # the first rows keep the test fast
    data = tmp_path / "hh" / "test.jsonl.gz"
    data.parent.mkdir()
    with gzip.open(data, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    out = tmp_path / "run"
    r = cli("audit", "--data", data, "--model", models["rm"], "--out", out, "--perturbations", "CN,ST",
            "--permutations", "100", "--by", "turns", "--drop-invalid", "-q",
            "--semantic-check", "off")  # ST still rewrites the turns; the meaning check has tests of its own
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["data"]["turns"]["multi_turn"] > 0 and m["data"]["turns"]["single_turn"] > 0
    assert set(m["data"]["subsets"]) == {"hh · single-turn", "hh · multi-turn"}
    page = (out / "report.html").read_text()
    assert "user turns (" in page and "<details>" in page


# --- single-turn data is exactly what it was before conversations ---------------------------------------------

# pinned from the release before conversations were supported: the sample's data fingerprint and its control scores
GOLDEN = {"fingerprint": "65c77a5e1e16d784dd0d8bb0580ad3481b8957c1914ddeb24fef2e18be7ca025",
          "length": "27b8bd73be0b92778a742568f72921728063de1cc54e3f717e08c4b14c39e83b",
          "overlap": "887bf79527136a277f68b4a3a24813f33c84725129b0879ae935effaee142823",
          "noise": "ffc8e8a842a8221ba5b974d7e15c8f547601ac62cbf597143390ef8c14da8753"}


def test_single_turn_is_byte_identical(tmp_path, models):
    import hashlib
    from reward_auditor.audit import audit, data_fingerprint
    from reward_auditor.cache import ScoreCache
    from reward_auditor.data import load_sample
    from reward_auditor.scorers import CONTROLS, DiscriminativeScorer
    d = load_sample()
    assert "history" not in d.columns and data_fingerprint(d) == GOLDEN["fingerprint"]
    for k in ("length", "overlap", "noise"):
        csv = CONTROLS[k]().score_pairs(d, progress=False).to_csv(index=False, float_format="%.15g")
        assert hashlib.sha256(csv.encode()).hexdigest() == GOLDEN[k], k
    # the same pairs as single-turn conversations, or with an all-empty history column: the same run, byte for byte
    conv = load_preferences([{"id": r.id, "subset": r.subset, "prompt": [U(r.prompt)], "chosen": [A(r.chosen)],
                              "rejected": [A(r.rejected)]} for r in d.itertuples()])
    pd.testing.assert_frame_equal(conv, d[["id", "subset", "prompt", "chosen", "rejected"]])
    empty = d.assign(history=[[] for _ in range(len(d))])
    rm = DiscriminativeScorer(models["rm"])
    runs = {}
    for name, data in (("plain", d), ("conv", conv), ("empty", empty)):
        cache = ScoreCache(tmp_path / f"{name}.sqlite")
        r = audit(data, ["length", rm], ["EF", "ST"], permutations=100, progress=False, cache=cache)
        keys = sorted(k for k, in cache._connect().execute("select key from scores"))
        runs[name] = (r.table.to_csv(), r.items.to_csv(), keys, r.manifest["data"]["sha256"])
    assert runs["plain"] == runs["conv"] == runs["empty"]


def test_report_history_is_collapsed_and_escaped():
    from reward_auditor.report import history_html
    page = history_html([U("<script>alert(1)</script>"), A("fine & dandy")])
    assert page.startswith("<details><summary>2 user turns (2 earlier messages)</summary>")
    assert "<script>" not in page and "&lt;script&gt;" in page and "fine &amp; dandy" in page
    assert history_html([]) == "" and history_html(None) == ""


def test_report_header_counts_turns():
    from reward_auditor.report import _conversation_rows
    cells = {"all": {"orig": {"truncated": 2, "answer_cut": 0, "history_cut": 2, "n": 8},
                     "EF": {"truncated": 3, "answer_cut": 0, "history_cut": 3, "n": 8}}}
    m = {"data": {"turns": {"single_turn": 3, "multi_turn": 5, "max_user_turns": 4}, "perturb_turns": "all"},
         "truncation": {"rm": {"cells": cells}},
         # counts of what this run computed (a resumed run computes nothing): the header must not read them
         "scores": {"by_model": {"rm": {"orig": {"computed": 0, "cached": 16}}}}}
    assert _conversation_rows(m) == [("conversations", "3 single-turn and 5 multi-turn items (up to 4 user turns); "
                                      "prompt-side perturbations change every user turn; earlier turns left out "
                                      "to fit the length limit for rm: 2 of 8 original pairs (up to 3 in a condition)")]
    none = {**m, "truncation": {"rm": {"cells": {"all": {"orig": {"history_cut": 0, "n": 8}}}}}}
    assert _conversation_rows(none)[0][1].endswith("no earlier turns left out for the length limits")
    assert _conversation_rows({"data": {}}) == []

def test_pairwise_family_sees_the_history(models):
    from reward_auditor import families as F
    from reward_auditor.scorers import load_scorer
    sc = load_scorer(str(models["lm"]), kind="pairwise", device="cpu")
    frame, hist = three_turn_frame()
    tok = sc.tokenizer
    # RLHFlow's layout: earlier turns and the final user turn in its plain `<turn>` context, no BOS
    ctx = "\n" + "".join(f"\n<turn> {m['role']}\n {m['content']}" for m in [*hist, U("And of Italy?")]) + "\n"
    assert F.turns_context([*hist, U("And of Italy?")]) == ctx
    text = tok.apply_chat_template([U(F.PAIR_TEMPLATE.format(prompt=ctx, a="Rome.", b="Milan."))], tokenize=False,
                                   add_generation_prompt=True)[len(tok.bos_token):]
    assert sc._judge_prompt("And of Italy?", "Rome.", "Milan.", history=hist) == tok(text, add_special_tokens=False)["input_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = sc.score_pairs(frame, progress=False)
    assert out.loc[0, "margin"] != out.loc[1, "margin"]


def test_truncation_counting_uses_the_scoring_encoding_with_history(models):
    "`truncation` and the audit's counts see what scoring sees: a 3-turn item whose oldest turns are left out."
    from reward_auditor.audit import truncation_counts
    from reward_auditor.data import history_key
    from reward_auditor.perturbations import condition_from_frame
    from reward_auditor.scorers import DiscriminativeScorer
    frame, hist = three_turn_frame()
    full = DiscriminativeScorer(models["rm"])
    n_full = len(full._encode_item("And of Italy?", "Rome.", history=hist)[0])
    n_short = len(full._encode_item("And of Italy?", "Rome.", history=hist[2:])[0])
    cut = DiscriminativeScorer(models["rm"], max_length=(n_full + n_short) // 2)
    # scoring drops the first exchange (2 messages) and then fits: no token cut, answer intact
    ids, _, dropped = cut._encode_fitting(("And of Italy?", "Rome.", history_key(hist)))
    assert dropped == 2 and len(ids) == n_short
    assert cut.truncation("And of Italy?", "Rome.", hist) == (n_short, 0, False, 2)
    assert cut.truncation("And of Italy?", "Rome.") == (len(full._encode_item("And of Italy?", "Rome.")[0]), 0, False, 0)
    # the old single-text count (history ignored) would have seen nothing here
    assert full.truncation("And of Italy?", "Rome.", hist)[1:] == (0, False, 0)
    pert = frame.copy()
    pert["chosen"] = pert["chosen"] + " Indeed."
    cond = condition_from_frame("X", frame, pert, side="response", group="stylized")
    tr = truncation_counts(cut, frame, {"X": cond})
    for name in ("orig", "X"):  # the multi-turn pair (c1) lost turns; the single-turn one (s1) did not
        assert tr["cells"]["chat"][name] == {"truncated": 1, "answer_cut": 0, "history_cut": 1, "n": 2}, tr["cells"]
    assert tr["texts_over_limit"] >= 2
