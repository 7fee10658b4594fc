"""Scorers on tiny random models built offline: batching invariance, padding, BOS, DPO by hand, judge order swap,
OOM back-off, precomputed files, controls under perturbations, and resume after kill -9."""
import json
import math
import os
import signal
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

from reward_auditor.cache import ScoreCache
from reward_auditor.scorers import (CallableScorer, DiscriminativeScorer, DPOScorer, JudgeScorer, LengthScorer,
                                    NoiseScorer, OverlapScorer, PrecomputedScorer, ScorerError, judge_margin,
                                    load_scorer)
import tiny_models
from tiny_models import WORDS, tiny_lm, tiny_rm

REPO = Path(__file__).resolve().parents[1]


def make_pairs(n=24, seed=0):
    return tiny_models.make_pairs(n, seed)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("models")
    return {"rm": tiny_rm(d / "rm"), "rm_qwen": tiny_rm(d / "rm_qwen", arch="qwen2", seed=5),
            "rm_nopad": tiny_rm(d / "rm_nopad", pad=False, seed=6),
            "rm_bos": tiny_rm(d / "rm_bos", add_bos=True, seed=7),
            "rm_plain": tiny_rm(d / "rm_plain", template=False, seed=8),
            "policy": tiny_lm(d / "policy", seed=1), "ref": tiny_lm(d / "ref", seed=2),
            "judge": tiny_lm(d / "judge", arch="qwen2", seed=3)}


@pytest.fixture(scope="module")
def pairs():
    return make_pairs()


# --- discriminative -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["rm", "rm_qwen", "rm_nopad", "rm_bos", "rm_plain"])
def test_batched_equals_one_at_a_time_and_padding_sides(models, pairs, which):
    batched = load_scorer(models[which], batch_size=7).score_pairs(pairs, progress=False)
    single = load_scorer(models[which], batch_size=1).score_pairs(pairs, progress=False)
    left = load_scorer(models[which], batch_size=5, padding_side="left").score_pairs(pairs, progress=False)
    assert batched["margin"].abs().max() > 1e-3  # rewards actually vary
    np.testing.assert_allclose(batched["reward_chosen"], single["reward_chosen"], atol=1e-5)
    np.testing.assert_allclose(batched["reward_rejected"], single["reward_rejected"], atol=1e-5)
    np.testing.assert_allclose(left["margin"], single["margin"], atol=1e-5)


def test_pad_never_eos(models):
    rm = DiscriminativeScorer(models["rm_nopad"])
    assert rm.tokenizer.pad_token is None
    assert rm.pad_id != rm.tokenizer.eos_token_id and rm.model.config.pad_token_id == rm.pad_id


def test_no_doubled_bos(models):
    rm = DiscriminativeScorer(models["rm_bos"])
    assert rm.tokenizer("x", add_special_tokens=True)["input_ids"][0] == rm.tokenizer.bos_token_id  # adds BOS
    ids, _ = rm._encode_item("Hello?", "Hi.")
    bos = rm.tokenizer.bos_token_id
    assert ids[0] == bos and ids[1] != bos and ids.count(bos) == 1


def test_plain_layout_without_template(models):
    rm = DiscriminativeScorer(models["rm_plain"])
    assert rm.settings()["chat_template"] is False
    text = rm.tokenizer.decode(rm._encode_item("Hello?", "Hi.")[0])
    assert "User: Hello?" in text and "Assistant: Hi." in text


def test_truncation_counted_and_warned(models, pairs):
    rm = DiscriminativeScorer(models["rm"], max_length=24)
    with pytest.warns(UserWarning, match="were cut on the left") as caught:
        out = rm.score_pairs(pairs, progress=False)
    import re
    from reward_auditor.cli import MANIFEST_REPEATS  # the CLI leaves these to the manifest's one line per scorer
    assert any(re.match(MANIFEST_REPEATS[0], str(w.message)) for w in caught)
    assert rm.last_report["truncated"] > 0 and out["margin"].notna().all()
    full = DiscriminativeScorer(models["rm"]).score_pairs(pairs, progress=False)
    assert not np.allclose(out["margin"], full["margin"])
    right = DiscriminativeScorer(models["rm"], max_length=24, truncation_side="right")
    with pytest.warns(UserWarning, match="on the right"):
        assert not np.allclose(right.score_pairs(pairs, progress=False)["margin"], out["margin"])


def test_oom_halves_the_batch(models, pairs):
    rm = DiscriminativeScorer(models["rm"], batch_size=8)
    ref = rm.score_pairs(pairs, progress=False)
    real = rm._forward

    def flaky(ids, *a):
        if ids.shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(ids, *a)

    rm._forward = flaky
    got = rm.score_pairs(pairs, progress=False)
    np.testing.assert_allclose(got["margin"], ref["margin"], atol=1e-5)
    assert rm.last_report["oom_backoffs"] >= 1 and rm.last_report["final_batch_size"] == 2

    def always(ids, *a):
        raise RuntimeError("CUDA out of memory.")
    rm._forward = always
    with pytest.raises(ScorerError, match="single sequence"):
        rm.score_pairs(pairs.iloc[:1], progress=False)


def test_other_errors_are_not_swallowed(models, pairs):
    rm = DiscriminativeScorer(models["rm"])
    rm._forward = lambda *a: (_ for _ in ()).throw(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        rm.score_pairs(pairs, progress=False)


def test_fingerprint_follows_weights_and_settings(models, tmp_path):
    a = DiscriminativeScorer(models["rm"])
    assert a.fingerprint == DiscriminativeScorer(models["rm"], batch_size=3, padding_side="left").fingerprint
    assert a.fingerprint != DiscriminativeScorer(models["rm"], max_length=100).fingerprint
    assert a.fingerprint != DiscriminativeScorer(models["rm_qwen"]).fingerprint
    other = tiny_rm(tmp_path / "rm_seed9", seed=9)
    assert a.fingerprint != DiscriminativeScorer(other).fingerprint
    assert DiscriminativeScorer(models["rm"], dtype="bfloat16").fingerprint != a.fingerprint


def test_prompt_and_response_perturbations_reuse_originals(models, pairs, tmp_path):
    rm = DiscriminativeScorer(models["rm"])
    cache = ScoreCache(tmp_path / "c.sqlite")
    orig = rm.score_pairs(pairs, cache=cache, progress=False)
    n_texts = len(set(zip(pairs.prompt, pairs.chosen)) | set(zip(pairs.prompt, pairs.rejected)))
    assert rm.last_counts == {"computed": n_texts, "cached": 0}
    # prompt perturbation touching 5 items: 10 new texts, the rest from the cache
    pp = pairs.copy()
    pp.loc[:4, "prompt"] = pp.loc[:4, "prompt"] + " @user_42"
    rm.score_pairs(pp, cache=cache, progress=False)
    assert rm.last_counts == {"computed": 10, "cached": n_texts - 10}
    # response perturbation of the chosen answers of 3 items
    rp = pairs.copy()
    rp.loc[:2, "chosen"] = rp.loc[:2, "chosen"] + "!"
    out = rm.score_pairs(rp, cache=cache, progress=False)
    assert rm.last_counts == {"computed": 3, "cached": n_texts - 3}
    np.testing.assert_allclose(out["reward_rejected"], orig["reward_rejected"])


# --- DPO ----------------------------------------------------------------------------------------------------

def _hand_logprob(folder, tok, prompt, response):
    from transformers import AutoModelForCausalLM
    head = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
                                   tokenize=False)
    p_ids = tok(head, add_special_tokens=False)["input_ids"]
    f_ids = tok(full, add_special_tokens=False)["input_ids"]
    assert f_ids[:len(p_ids)] == p_ids
    m = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        lsm = torch.log_softmax(m(torch.tensor([f_ids])).logits[0].double(), -1)
    lps = [lsm[t - 1, f_ids[t]].item() for t in range(len(p_ids), len(f_ids))]
    return sum(lps), len(lps)


def test_dpo_equals_hand_computation(models, pairs):
    dpo = load_scorer(models["policy"], kind="dpo", reference=models["ref"], beta=0.1, batch_size=5,
                      padding_side="left")
    sub = pairs.iloc[:4]
    out = dpo.score_pairs(sub, progress=False)
    for i, row in enumerate(sub.itertuples()):
        for col, resp in (("reward_chosen", row.chosen), ("reward_rejected", row.rejected)):
            lp_pol, _ = _hand_logprob(models["policy"], dpo.tokenizer, row.prompt, resp)
            lp_ref, _ = _hand_logprob(models["ref"], dpo.tokenizer, row.prompt, resp)
            assert abs(out[col].iloc[i] - 0.1 * (lp_pol - lp_ref)) < 1e-5


def test_dpo_reference_free_sum_and_mean(models, pairs):
    row = pairs.iloc[0]
    lp, n = _hand_logprob(models["policy"], DPOScorer(models["policy"]).tokenizer, row.prompt, row.chosen)
    s = DPOScorer(models["policy"], beta=1.0, reduction="sum").score_texts([row.prompt], [row.chosen], progress=False)
    m = DPOScorer(models["policy"], beta=2.0, reduction="mean").score_texts([row.prompt], [row.chosen], progress=False)
    assert abs(s[0] - lp) < 1e-5 and abs(m[0] - 2.0 * lp / n) < 1e-5


def test_dpo_batched_equals_single(models, pairs):
    a = DPOScorer(models["policy"], reference=models["ref"], batch_size=8).score_pairs(pairs, progress=False)
    b = DPOScorer(models["policy"], reference=models["ref"], batch_size=1).score_pairs(pairs, progress=False)
    np.testing.assert_allclose(a["margin"], b["margin"], atol=1e-5)


def test_dpo_rejects_mismatched_reference(models, tmp_path):
    other = tiny_lm(tmp_path / "other_vocab", seed=4, vocab_size=300)
    with pytest.raises(ScorerError, match="vocabulary"):
        DPOScorer(models["policy"], reference=other)


# --- judge --------------------------------------------------------------------------------------------------

def test_judge_order_swap(models, pairs, tmp_path):
    judge = load_scorer(models["judge"], kind="judge", batch_size=6)
    cache = ScoreCache(tmp_path / "j.sqlite")
    sub = pairs.iloc[:6]
    j = judge.score_pairs(sub, cache=cache, progress=False)
    assert judge.last_counts == {"computed": 12, "cached": 0}
    sw = judge.score_pairs(sub.rename(columns={"chosen": "rejected", "rejected": "chosen"}), cache=cache,
                           progress=False)
    assert judge.last_counts == {"computed": 0, "cached": 12}
    np.testing.assert_allclose(sw["z_fwd"], -j["z_rev"], atol=1e-12)
    np.testing.assert_allclose(sw["z_rev"], -j["z_fwd"], atol=1e-12)
    np.testing.assert_allclose(sw["margin"], -j["margin"], atol=1e-12)
    np.testing.assert_allclose(sw["position_bias"], j["position_bias"], atol=1e-12)
    assert j["z_fwd"].abs().max() > 1e-4 and (j["tie_mass"].between(0, 1)).all()
    # fresh, uncached, one at a time: same numbers
    one = JudgeScorer(models["judge"], batch_size=1).score_pairs(sub, progress=False)
    np.testing.assert_allclose(one["z_fwd"], j["z_fwd"], atol=1e-5)
    assert 0 <= judge.last_report["position_consistency"] <= 1


def test_judge_z_is_verdict_logprob_difference(models):
    judge = JudgeScorer(models["judge"], spellings=("{}",), tie_label=None)
    (idx, z, tie), = list(judge.presentation_scores([("Q?", "first", "second")]))
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(models["judge"]).eval()
    ids = judge._judge_prompt("Q?", "first", "second")
    with torch.no_grad():
        lsm = torch.log_softmax(m(torch.tensor([ids])).logits[0, -1].double(), -1)
    a, b = (judge.tokenizer.encode(x, add_special_tokens=False)[0] for x in "AB")
    assert abs(z[0] - (lsm[a] - lsm[b]).item()) < 1e-5 and tie[0] == 0.0


def test_judge_unreadable_is_missing_not_half(models, pairs):
    judge = JudgeScorer(models["judge"], min_verdict_mass=0.999)
    out = judge.score_pairs(pairs.iloc[:3], progress=False)
    assert out["margin"].isna().all() and judge.last_report["missing"] == 3
    short = JudgeScorer(models["judge"], max_length=40)
    out = short.score_pairs(pairs.iloc[:3], progress=False)
    assert out["margin"].isna().all() and short.last_report["too_long"] == 6


def test_judge_margin_worked_example():
    from scipy.special import expit
    assert abs(expit(judge_margin(1.5, -0.5)) - 0.597558) < 1e-6
    assert abs(expit(judge_margin(1.5, -0.5, "logit_avg")) - 0.622459) < 1e-6
    assert np.isfinite(judge_margin(1e4, 1e4 - 3))
    with pytest.raises(ScorerError):
        judge_margin(0, 0, "mean")


# --- resume after kill -9 -----------------------------------------------------------------------------------

KILL_SCRIPT = """
import sys, time
sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
import torch; torch.set_num_threads(1)
import pandas as pd
from reward_auditor.scorers import load_scorer
rm = load_scorer({model!r}, batch_size=4)
real = rm._forward
def slow(*a):
    time.sleep(0.1)
    return real(*a)
rm._forward = slow
frame = pd.read_json({frame!r}, lines=True, dtype=False)
rm.score_pairs(frame, cache={cache!r}, progress=False)
print("finished")
"""


def test_kill9_then_resume_computes_only_missing(models, tmp_path):
    frame = make_pairs(60, seed=11)
    frame.to_json(tmp_path / "pairs.jsonl", orient="records", lines=True)
    cache_path = tmp_path / "resume.sqlite"
    script = tmp_path / "score.py"
    script.write_text(KILL_SCRIPT.format(repo=str(REPO), tests=str(REPO / "tests"), model=str(models["rm"]),
                                         frame=str(tmp_path / "pairs.jsonl"), cache=str(cache_path)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    committed = 0
    try:
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None:
            if cache_path.exists():
                try:
                    committed = sqlite3.connect(cache_path, timeout=30).execute(
                        "SELECT COUNT(*) FROM scores").fetchone()[0]
                except sqlite3.OperationalError:
                    committed = 0
                if committed >= 20:
                    break
            time.sleep(0.02)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    rm = load_scorer(models["rm"], batch_size=4)
    committed = ScoreCache(cache_path).count(rm.fingerprint)
    total = len(set(zip(frame.prompt, frame.chosen)) | set(zip(frame.prompt, frame.rejected)))
    assert 20 <= committed < total and committed % 4 == 0  # whole batches only
    resumed = rm.score_pairs(frame, cache=cache_path, progress=False)
    assert rm.last_counts == {"computed": total - committed, "cached": committed}
    fresh = load_scorer(models["rm"], batch_size=4).score_pairs(frame, progress=False)
    np.testing.assert_allclose(resumed["margin"], fresh["margin"], atol=1e-5)
    rm.score_pairs(frame, cache=cache_path, progress=False)
    assert rm.last_counts == {"computed": 0, "cached": total}


# --- callables, files, controls, load_scorer ----------------------------------------------------------------

def test_precomputed_layouts(tmp_path, pairs):
    sub = pairs.iloc[:3]
    ids = sub["id"].tolist()
    pd.DataFrame({"id": ids[:2], "reward_chosen": [1.0, 2.0], "reward_rejected": [0.5, 3.0]}).to_parquet(tmp_path / "a.parquet")
    out = load_scorer(tmp_path / "a.parquet").score_pairs(sub)
    np.testing.assert_allclose(out["margin"], [0.5, -1.0, np.nan])
    rb = [{"id": ids[0], "subset": "chat", "scores_chosen": [4.0], "scores_rejected": [1.0], "results": 1}]
    (tmp_path / "rb.jsonl").write_text("\n".join(json.dumps(r) for r in rb))
    s = load_scorer(tmp_path / "rb.jsonl")
    np.testing.assert_allclose(s.score_pairs(sub)["margin"], [3.0, np.nan, np.nan])
    assert s.last_report["missing"] == 2 and s.last_counts == {"computed": 0, "cached": 1}
    s.score_pairs(sub.assign(changed=[True, False, False]))
    assert s.last_report["changed_not_covered"] == 1 and s.last_report["found"] == 0
    # as an audit calls it: the original first, then only the changed rows, without a `changed` column
    fresh = load_scorer(tmp_path / "rb.jsonl")
    fresh.score_pairs(sub)
    pert = fresh.score_pairs(sub.assign(prompt=sub.prompt + " @someone"))
    assert pert["margin"].isna().all() and fresh.last_report["changed_not_covered"] == 1
    bound = PrecomputedScorer(tmp_path / "rb.jsonl", data=sub)
    assert bound.score_pairs(sub.assign(chosen=sub.chosen + "!"))["margin"].isna().all()
    pd.DataFrame({"prompt": [sub.prompt.iloc[0]] * 2, "response": [sub.chosen.iloc[0], sub.rejected.iloc[0]],
                  "reward": [1.0, -1.0]}).to_csv(tmp_path / "t.csv", index=False)
    np.testing.assert_allclose(load_scorer(tmp_path / "t.csv").score_pairs(sub)["margin"], [2.0, np.nan, np.nan])
    pd.DataFrame({"x": [1]}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ScorerError, match="not a known score layout"):
        load_scorer(tmp_path / "bad.csv")
    (tmp_path / "multi.json").write_text(json.dumps([{"id": "a", "scores_chosen": [1.0], "scores_rejected": [1.0, 2.0]}]))
    with pytest.raises(ScorerError, match="row 1"):
        load_scorer(tmp_path / "multi.json")


def test_callable_batched_and_cached(tmp_path, pairs):
    seen = []

    def f(prompts, responses):
        seen.extend(responses)
        return [len(r) for r in responses]
    s = CallableScorer(f, batched=True, batch_size=5)
    cache = tmp_path / "cb.sqlite"
    out = s.score_pairs(pairs, cache=cache, progress=False)
    np.testing.assert_allclose(out["margin"], pairs.chosen.str.len() - pairs.rejected.str.len())
    n = len(seen)
    s.score_pairs(pairs, cache=cache, progress=False)
    assert len(seen) == n and s.last_counts["computed"] == 0
    bad = CallableScorer(lambda ps, rs: [1.0], batched=True)
    with pytest.raises(ScorerError, match="shape"):
        bad.score_pairs(pairs, progress=False)


def _typo(text, rng):
    words = text.split()
    out = []
    for w in words:
        if len(w) >= 4 and rng.random() < 0.5:
            i = rng.integers(1, len(w) - 2)
            w = w[:i] + w[i + 1] + w[i] + w[i + 2:]
        out.append(w)
    return " ".join(out)


def test_controls_behave_as_designed():
    rng = np.random.default_rng(0)
    n = 400
    topics = [list(rng.choice(WORDS, 6)) for _ in range(n)]
    prompts = [" ".join(t) + "?" for t in topics]
    chosen = [" ".join(list(t[:4]) + list(rng.choice(WORDS, 5))) for t in topics]   # repeats the prompt's words
    rejected = [" ".join(list(t[:1]) + list(rng.choice(WORDS, int(rng.integers(2, 14))))) for t in topics]
    orig = pd.DataFrame({"id": [str(i) for i in range(n)], "prompt": prompts, "chosen": chosen, "rejected": rejected})
    spanish = orig.assign(chosen=["la respuesta es " + str(i) for i in range(n)],
                          rejected=["no lo sé, " + str(i) for i in range(n)])
    typos = orig.assign(prompt=[_typo(p, rng) for p in prompts])
    ov = OverlapScorer()
    m0 = ov.score_pairs(orig)["margin"]
    assert (m0 > 0).mean() > 0.6 and m0.abs().max() <= 4  # beats chance, bounded margins
    assert (ov.score_pairs(spanish)["margin"] == 0).all()  # translation destroys the overlap
    assert ov.score_pairs(typos)["margin"].mean() < m0.mean()  # typos in the prompt erode it
    tagged = orig.assign(prompt=orig.prompt + " @zq_handle https://example.com/x")
    np.testing.assert_array_equal(ov.score_pairs(tagged)["margin"], m0)  # IU/IW add prompt words only
    noise = NoiseScorer()
    a, b = noise.score_pairs(orig)["margin"], noise.score_pairs(typos)["margin"]
    assert abs(a.mean()) < 0.2 and abs(a.std() - math.sqrt(2)) < 0.2 and abs(np.corrcoef(a, b)[0, 1]) < 0.15
    np.testing.assert_array_equal(a, NoiseScorer().score_pairs(orig)["margin"])  # deterministic
    ln = LengthScorer()
    np.testing.assert_allclose(ln.score_pairs(orig)["margin"],
                               np.log1p(orig.chosen.str.split().str.len()) - np.log1p(orig.rejected.str.split().str.len()))
    # appending the same text to both answers pulls the log-ratio of lengths towards 0
    longer = orig.assign(chosen=orig.chosen + " and more words here", rejected=orig.rejected + " and more words here")
    assert ln.score_pairs(longer)["margin"].abs().mean() < ln.score_pairs(orig)["margin"].abs().mean()


def test_load_scorer_errors(models, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ScorerError, match="empty is a folder but not a model"):
        load_scorer(tmp_path / "empty")
    with pytest.raises(ScorerError, match="kind='dpo'"):
        load_scorer(models["policy"])
    with pytest.raises(ScorerError, match="causal LM"):
        load_scorer(models["policy"], kind="discriminative")
    with pytest.raises(ScorerError, match="sequence classifier"):
        load_scorer(models["rm"], kind="judge")
    with pytest.raises(ScorerError, match="does not exist"):
        load_scorer(str(tmp_path / "missing_model"))
    with pytest.raises(ScorerError, match="unknown scorer kind"):
        load_scorer(models["rm"], kind="bogus")
    with pytest.raises(ScorerError, match="lacks column"):
        load_scorer("length").score_pairs(pd.DataFrame({"id": ["a"], "prompt": ["p"]}))
    with pytest.raises(ScorerError, match="row 2"):
        load_scorer("length").score_pairs(pd.DataFrame({"id": ["a", "b"], "prompt": ["p", "q"],
                                                        "chosen": ["x", None], "rejected": ["y", "z"]}))


def test_import_is_light():
    code = "import sys, reward_auditor.scorers, reward_auditor.cache; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_controls_on_the_sample_with_the_real_perturbations():
    """overlap loses confidence where its shared vocabulary is destroyed (CN, LC, SLC) and not elsewhere;
    noise is unmoved on average; length reacts only to response-side changes."""
    from scipy import stats
    from scipy.special import expit
    try:
        from reward_auditor.data import load_sample
        from reward_auditor.perturbations import perturb
        data = load_sample()
        conds = perturb(data, names=["EF", "IU", "IW", "CN", "LC", "SLC"], seed=0)
    except Exception as e:  # perturbation resources (apertium) may be absent
        pytest.skip(f"perturbations unavailable here: {type(e).__name__}: {e}")
    m = lambda s, f: expit(s.score_pairs(f, progress=False)["margin"].to_numpy())
    ov, noise, ln = OverlapScorer(), NoiseScorer(), LengthScorer()
    m0 = m(ov, data)
    assert (m0 > 0.5).mean() > 0.6  # better than chance on the original data
    p = {k: stats.ttest_1samp(m0 - m(ov, c), 0, alternative="greater").pvalue for k, c in conds.items()}
    assert p["LC"] < 1e-3 and p["SLC"] < 1e-3 and p["CN"] < 0.05
    np.testing.assert_allclose(m(ov, conds["IU"]), m0)
    np.testing.assert_allclose(m(ov, conds["EF"]), m0)
    n0 = m(noise, data)
    for c in conds.values():
        assert abs(np.mean(n0 - m(noise, c))) < 0.1
    np.testing.assert_array_equal(m(ln, conds["CN"]), m(ln, data))  # prompt noise cannot move a length bias
