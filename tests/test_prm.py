"""Process reward models: step data (TRL stepwise, ProcessBench, Math-Shepherd), the three step layouts against a hand
computation with transformers, step-preserving perturbations, the first-error metric and best-of-n against brute
force, and a TRL stepwise file audited end to end from the command line."""
import contextlib
import io
import itertools
import json
import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_models import PRM_STYLES, tiny_folders, tiny_prm, tiny_shepherd_mistral  # noqa: E402

from reward_auditor import perturbations as P  # noqa: E402
from reward_auditor.cache import ScoreCache  # noqa: E402
from reward_auditor.data import DataError, load_preferences, load_solutions  # noqa: E402
from reward_auditor.prm import QWEN_PRM_SYSTEM, PRMScorer, solution_reward  # noqa: E402
from reward_auditor.prm_audit import (best_of_n_table, choose_threshold, correctness_test,  # noqa: E402
                                      PRMAuditError, first_error_metrics, prm_step_audit)
from reward_auditor.scorers import ScorerError, load_scorer  # noqa: E402
from reward_auditor.steps import parse_solutions, solution_pairs  # noqa: E402

PROMPT = "What is 12 + 30, divided by 7?"
STEPS = ["12 + 30 = 42.", "Then 42 / 7 = 6.", "The answer is $\\frac{42}{7} = 6$."]


def trl_rows(n_problems: int = 4) -> list[dict]:
    "TRL stepwise rows: per problem a correct solution, one wrong from step 2, one wrong from step 1."
    rows = []
    for k in range(n_problems):
        a, b = 2 + k, 3 + k
        q = f"What is {a} + {b} * 2?"
        rows += [{"prompt": q, "completions": [f"{b} * 2 = {2 * b}.", f"{a} + {2 * b} = {a + 2 * b}.",
                                               f"The answer is ${a + 2 * b}$."], "labels": [True, True, True]},
                 {"prompt": q, "completions": [f"Step 1: {b} * 2 = {2 * b}.", f"Step 2: {a} + {2 * b} = {a + 2 * b + 1}."],
                  "labels": [True, False]},
                 {"prompt": q, "completions": [f"{a} + {b} = {a + b}.", f"{a + b} * 2 = {2 * (a + b)}."],
                  "labels": [False, False]}]
    return rows


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="module")
def prms(tmp_path_factory):
    return tiny_folders(tmp_path_factory.mktemp("prms"), tiny_prm, PRM_STYLES)


# ---------------------------------------------------------------------------------------------------- step scores
def _hand(style, folder, prompt, steps):
    "Step scores of one solution computed directly with transformers, no padding, the layout written out by hand."
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    with torch.no_grad():
        if style == "token-classification":
            m = transformers.AutoModelForTokenClassification.from_pretrained(str(folder)).eval()
            ids, ends = [tok.bos_token_id] + tok(prompt, add_special_tokens=False)["input_ids"], []
            for s in steps:
                ids += tok(s, add_special_tokens=False)["input_ids"] + tok("\n", add_special_tokens=False)["input_ids"]
                ends.append(len(ids) - 1)
            return torch.softmax(m(torch.tensor([ids])).logits[0, ends], -1)[:, 1].tolist()
        if style == "qwen-prm":
            m = transformers.AutoModel.from_pretrained(str(folder), trust_remote_code=True).eval()
            text = tok.apply_chat_template([{"role": "system", "content": QWEN_PRM_SYSTEM},
                                            {"role": "user", "content": prompt},
                                            {"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"}],
                                           tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            probs = torch.softmax(m(torch.tensor([ids]))[0][0], -1)
            mark = tok.convert_tokens_to_ids("<extra_0>")
            return [probs[i, 1].item() for i, t in enumerate(ids) if t == mark]
        m = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        ids = tok(prompt + " " + "\n".join(f"{s} ки" for s in steps))["input_ids"]
        lg = m(torch.tensor([ids])).logits[0]
        plus, minus = (tok(t, add_special_tokens=False)["input_ids"][-1] for t in ("+", "-"))
        tag = tok.encode("ки")[-1]  # the model card's recipe: the tag's id as the text carries it
        return [torch.softmax(lg[i, [plus, minus]], -1)[0].item() for i, t in enumerate(ids) if t == tag]


@pytest.mark.parametrize("style", PRM_STYLES)
def test_step_scores_equal_a_hand_computation(prms, style):
    sc = load_scorer(str(prms[style]), kind="prm", trust_remote_code=style == "qwen-prm")
    assert isinstance(sc, PRMScorer) and sc.style == style
    hand = _hand(style, prms[style], PROMPT, STEPS)
    assert len(hand) == len(STEPS)
    np.testing.assert_allclose(sc.step_scores(PROMPT, STEPS), hand, rtol=0, atol=1e-6)  # measured: at most 6e-8
    # padded batches of solutions of different lengths give the same step scores as one at a time
    other = ["2 + 2 = 4."]
    got = sc.score_solutions([PROMPT, "What is 2 + 2?"], [STEPS, other], progress=False)
    np.testing.assert_allclose(got[0], hand, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got[1], _hand(style, prms[style], "What is 2 + 2?", other), rtol=0, atol=1e-6)


def test_math_shepherd_reads_its_tag_on_the_real_mistral_v1_vocabulary(tmp_path):
    """Math-Shepherd's PRM is a Mistral-7B: in its SentencePiece vocabulary the text carries the tag as "▁ки" (12902),
    not the bare piece "ки" (1107). Step scores equal the model card's own computation on a real solution."""
    import transformers
    folder = tiny_shepherd_mistral(tmp_path / "ms-mistral")
    if folder is None:
        pytest.skip("Mistral-7B v1's tokenizer.model is absent: the mistral-common package ships it "
                    "(pip install mistral-common)")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert len(tok) == 32000 and tok.convert_tokens_to_ids("ки") == 1107  # the bare piece, never in the text
    assert tok.encode("ки") == [1, 12902] and tok.encode("+ -") == [1, 648, 387]  # the card's numbers
    question = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for "
                "her friends every day with four. She sells the remainder at the farmers' market daily for $2 per "
                "fresh duck egg. How much in dollars does she make every day at the farmers' market?")
    steps = ["Step 1: Janet's ducks lay 16 eggs per day, she eats 3 and bakes with 4, so 16 - 3 - 4 = 9 eggs remain.",
             "Step 2: She sells them for $2 each, so she makes 9 * 2 = $18 every day.",
             "Step 3: The answer is: 18"]
    sc = load_scorer(str(folder), kind="prm")
    assert sc.style == "math-shepherd" and sc._candidates == (648, 387)
    ids, pos = sc.layout(question, steps)
    assert [ids[p] for p in pos] == [12902] * 3
    # the model card's computation, written out: encode(f"{question} {output}"), read P(+) among {+, -} at each tag
    m = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    step_tag_id, candidates = tok.encode("ки")[-1], tok.encode("+ -")[1:]
    output = "\n".join(f"{s} ки" for s in steps)
    input_id = torch.tensor([tok.encode(f"{question} {output}")])
    with torch.no_grad():
        probs = m(input_id).logits[:, :, candidates].softmax(dim=-1)[:, :, 0]
    hand = probs[input_id == step_tag_id].tolist()
    assert len(hand) == 3
    np.testing.assert_allclose(sc.step_scores(question, steps), hand, rtol=0, atol=1e-6)
    # in a padded batch with a shorter solution, too
    got = sc.score_solutions([question, "What is 2 + 2?"], [steps, ["Step 1: 2 + 2 = 4. The answer is: 4"]],
                             progress=False)
    np.testing.assert_allclose(got[0], hand, rtol=0, atol=1e-6)
    assert len(got[1]) == 1


def test_remote_code_prm_needs_trust_and_is_found_from_its_config(prms):
    with pytest.raises(ScorerError, match=r"modeling_qwen2_prm\.py.*trust_remote_code=True"):
        load_scorer(str(prms["qwen-prm"]), kind="prm")
    with pytest.raises(ScorerError, match="trust_remote_code=True"):  # no kind: the config alone says PRM
        load_scorer(str(prms["qwen-prm"]))
    assert load_scorer(str(prms["token-classification"])).kind == "prm"  # a token classifier is a PRM


def test_aggregates_cache_and_manifest_settings(prms):
    folder = str(prms["token-classification"])
    pairs = pd.DataFrame({"id": ["a"], "prompt": [PROMPT], "chosen": ["\n".join(STEPS)], "rejected": ["x\ny"],
                          "chosen_steps": [STEPS], "rejected_steps": [["12 + 30 = 52.", "So 52."]]})
    store = ScoreCache()
    scores = {}
    for how in ("min", "prod", "last", "mean"):
        sc = load_scorer(folder, kind="prm", aggregate=how)
        res = sc.score_pairs(pairs, cache=store, progress=False)
        steps = list(res["step_scores_chosen"][0])
        expect = {"min": min(steps), "prod": float(np.prod(steps)), "last": steps[-1], "mean": float(np.mean(steps))}[how]
        assert math.isclose(res["reward_chosen"][0], math.log(expect / (1 - expect)), rel_tol=1e-12, abs_tol=1e-12)
        assert sc.settings()["aggregate"] == how
        scores[how] = sc.fingerprint
    assert len(set(scores.values())) == 1  # the cache holds step scores: one fingerprint for every aggregate
    assert store.count(scores["min"]) == 3 + 2  # one entry per step
    assert sc.last_counts == {"computed": 0, "cached": 2}
    with pytest.raises(ScorerError, match="unknown aggregate"):
        load_scorer(folder, kind="prm", aggregate="max")
    assert solution_reward([0.5, 0.25], "prod", "prob") == 0.125


# ------------------------------------------------------------------------------------------------------ step data
def test_three_formats_read_as_solutions_and_pairs(tmp_path):
    trl = write_jsonl(tmp_path / "trl.jsonl", trl_rows(2))
    pb = write_jsonl(tmp_path / "pb.jsonl", [
        {"id": "p-1", "problem": "What is 2 + 2?", "steps": ["2 + 2 = 4.", "So 4."], "label": -1},
        {"id": "p-2", "problem": "What is 2 + 2?", "steps": ["2 + 2 = 5.", "So 5."], "label": 0},
        {"id": "p-3", "problem": "What is 3 + 3?", "steps": ["3 + 3 = 6.", "6 * 1 = 7.", "So 7."], "label": 1}])
    ms = write_jsonl(tmp_path / "ms.jsonl", [
        {"input": "What is 2 + 2? Step 1: 2 + 2 = 4. ки\nStep 2: So 4. ки",
         "label": "What is 2 + 2? Step 1: 2 + 2 = 4. +\nStep 2: So 4. +"},
        {"input": "What is 2 + 2? Step 1: 2 + 2 = 5. ки\nStep 2: So 5. ки",
         "label": "What is 2 + 2? Step 1: 2 + 2 = 5. -\nStep 2: So 5. -"}])
    s = load_solutions(trl)
    assert len(s) == 6 and s["group_id"].nunique() == 2 and s["first_error"].tolist() == [-1, 1, 0] * 2
    p = load_preferences(trl)
    assert p.attrs["format"] == "stepwise" and len(p) == 4 and p["group_id"].nunique() == 2
    assert all(len(c) == len(lab) for c, lab in zip(p["chosen_steps"], p["chosen_labels"]))
    pbs = load_solutions(pb)
    assert pbs["labels"].tolist() == [[1, 1], [0, -1], [1, 0, -1]] and pbs["first_error"].tolist() == [-1, 0, 1]
    assert len(load_preferences(pb)) == 1  # only the 2 + 2 problem has a correct and a wrong solution
    mss = load_solutions(ms)
    assert mss["steps"][0] == ["Step 1: 2 + 2 = 4.", "Step 2: So 4."] and mss["labels"].tolist() == [[1, 1], [0, 0]]
    # the same problem in all three files shares one group id
    assert pbs["group_id"][0] == mss["group_id"][0]


SHEPHERD_Q = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast and bakes with four. She sells the rest "
              "for $2 each. How much does she make every day?")
SHEPHERD_STEPS = ["Janet's ducks lay 16 eggs, she uses 3 + 4 = 7, so 16 - 7 = 9 remain.",
                  "She makes 9 * 2 = $20 every day.", "The answer is: 20"]


def _shepherd_record(q: str, steps: list[str], marks: list[str], sep: str, labels: str) -> dict:
    "A Math-Shepherd record: the problem, then each step (after its marker) followed by the tag, steps one a line."
    body = "\n".join(f"{m}{s} ки" for m, s in zip(marks, steps))
    lab = body
    for c in labels:
        lab = lab.replace("ки", c, 1)
    return {"input": q + sep + body, "label": q + sep + lab}


@pytest.mark.parametrize("form,marks,sep", [
    ("Step k:", ["Step 1: ", "Step 2: ", "Step 3: "], " "),
    ("step k: (lower case)", ["step 1: ", "step 2: ", "step 3: "], " "),
    ("unmarked, after the question mark", ["", "", ""], " "),
    ("unmarked, the problem on its own line", ["", "", ""], "\n"),
])
def test_math_shepherd_records_read_with_lower_case_or_no_step_markers(tmp_path, form, marks, sep):
    recs = [_shepherd_record(SHEPHERD_Q, SHEPHERD_STEPS, marks, sep, "+--"),
            _shepherd_record("Compute 3 * 4.", ["3 * 4 = 12.", "The answer is: 12"], marks[:2], "\n", "++")]
    s = load_solutions(write_jsonl(tmp_path / "ms.jsonl", recs))
    assert s.attrs["format"] == "math-shepherd" and len(s) == 2
    assert s["prompt"].tolist() == [SHEPHERD_Q, "Compute 3 * 4."]
    assert s["steps"][0] == [m + x for m, x in zip(marks, SHEPHERD_STEPS)]
    assert s["steps"][1] == [m + x for m, x in zip(marks, ["3 * 4 = 12.", "The answer is: 12"])]
    assert s["labels"].tolist() == [[1, 0, 0], [1, 1]] and s["first_error"].tolist() == [1, -1]


@pytest.mark.parametrize("row,field,what", [
    ({"prompt": "q?", "completions": ["a", "b"], "labels": [True]}, "labels", "has 1 labels for 2 steps"),
    ({"prompt": "q?", "completions": [], "labels": []}, "completions", "has no steps"),
    ({"prompt": "q?", "completions": ["a", " "], "labels": [True, True]}, "completions[1]", "is an empty step"),
    ({"prompt": "q?", "completions": ["a"], "labels": ["maybe"]}, "labels[0]", "is not true/false"),
    ({"problem": "q?", "steps": ["a", "b"], "label": 2}, "label", "outside -1..1"),
    ({"input": "q? Step 1: a ки", "label": "q? Step 1: a ?"}, "label", "does not match 'input'"),
    ({"input": "Step 1: a ки", "label": "Step 1: a +"}, "input", "has no problem text before the first step"),
    ({"input": "a b ки", "label": "a b +"}, "input", "has no problem text before the first step"),
])
def test_a_broken_row_exits_2_naming_file_row_and_field(tmp_path, row, field, what):
    from reward_auditor.cli import main
    good = trl_rows(1) if "completions" in row else (
        [{"problem": "q?", "steps": ["a"], "label": -1}] if "steps" in row else
        [{"input": "q? Step 1: a ки", "label": "q? Step 1: a +"}])
    f = write_jsonl(tmp_path / "bad.jsonl", good + [row])
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["audit", "--data", str(f), "--scorer", "length", "--out", str(tmp_path / "o"), "-q",
                     "--no-report"]) == 2
    line = err.getvalue().strip()
    assert line.count("\n") == 0 and str(f) in line and f"line {len(good) + 1}" in line
    assert f"field '{field}'" in line and what in line


def test_drop_invalid_skips_and_counts(tmp_path):
    f = write_jsonl(tmp_path / "trl.jsonl", trl_rows(2) + [{"prompt": "q?", "completions": ["a"], "labels": []}])
    with pytest.raises(DataError, match="line 7"):
        load_preferences(f)
    with pytest.warns(UserWarning, match="dropped 1 invalid row"):
        p = load_preferences(f, errors="drop")
    from reward_auditor.audit import dropped_record
    assert dropped_record(p) == {"count": 1, "first_row": 7, "field": p.attrs["dropped"][0][1],
                                 "problem": p.attrs["dropped"][0][2]} and len(p) == 4
    with pytest.warns(UserWarning):
        assert len(load_solutions(f, errors="drop")) == 6


def test_pairs_are_every_correct_over_every_wrong_solution_of_a_problem():
    rng = np.random.default_rng(1)
    rows = [{"prompt": f"q{rng.integers(3)}?", "completions": ["a", "b"], "labels": [bool(x) for x in rng.random(2) < 0.6]}
            for _ in range(30)]
    sols, _ = parse_solutions(rows)
    pairs = solution_pairs(sols)
    brute = sum(1 for a, b in itertools.permutations(range(len(sols)), 2)
                if sols.group_id[a] == sols.group_id[b] and sols.first_error[a] < 0 <= sols.first_error[b])
    assert len(pairs) == brute and pairs["id"].is_unique


# --------------------------------------------------------------------------------------------------- perturbations
def test_per_step_perturbations_keep_step_count_and_protected_spans():
    p = load_preferences(trl_rows(3))
    names = ["SN", "MX", "SP", "LE", "PH", "CN"] + (["ST"] if P.wordnet_lite() is not None else [])
    conds = P.perturb(p, names, seed=3)
    for name, c in conds.items():
        for side in ("chosen", "rejected"):
            for before, after, text in zip(p[f"{side}_steps"], c.frame[f"{side}_steps"], c.frame[side]):
                assert len(after) == len(before), name
                assert text == "\n".join(after)
                if name in ("MX", "SN") or P.registry[name].side == "prompt":
                    continue
                for b, a in zip(before, after):
                    assert all(b[i:j] in a for i, j in P.protected_spans(b)), (name, b, a)
        if P.registry[name].side == "prompt":
            assert c.frame["chosen_steps"].tolist() == p["chosen_steps"].tolist()
    sn = conds["SN"].frame
    assert [[P.step_marker(s)[1] for s in x] for x in sn["chosen_steps"]] == \
        [[P.step_marker(s)[1] for s in x] for x in p["chosen_steps"]]
    assert conds["MX"].n_changed > 0 and conds["SN"].n_changed == len(p)


def _math_normal(text: str) -> str:
    "A normal form under the certified MX rewrites: delimiters, spaces, \\, and \\dfrac undone."
    t = re.sub(r"\\[()\[\]]|\$", "", text).replace("\\dfrac", "\\frac").replace("\\,", "")
    return re.sub(r"\s+", "", t)


def test_mx_variants_are_certified_equivalent():
    from reward_auditor.verifiers import read_expr
    texts = ["So $x^2-1=0$ and $\\frac{1}{2}+\\frac{3}{4}$.", "Then $$2a+3b=7$$ holds.", "We get 12 + 30 = 42 now.",
             "Half is \\(\\frac{42}{2} = 21\\)."]
    for k in range(20):
        for t in texts:
            v = P.math_variant(t, np.random.default_rng(k))
            assert _math_normal(v) == _math_normal(t), (t, v)
    # the verifier audit's parser reads a rewritten expression as the same one
    v = P.math_variant("$\\frac{1}{2}+\\frac{3}{4}$", np.random.default_rng(0))
    body = re.sub(r"^\\\(|\\\)$|^\$|\$$", "", v)
    assert read_expr(body) == read_expr("\\frac{1}{2}+\\frac{3}{4}")
    assert "SN" not in P._resolve("all")


# ------------------------------------------------------------------------------------------------ step diagnostics
def _brute_f1(truth, scores, tau):
    "First-error F1 written from the definition, step by step."
    right_err = right_ok = n_err = n_ok = 0
    for e, s in zip(truth, scores):
        pred = -1
        for k, x in enumerate(s):
            if x < tau:
                pred = k
                break
        if e < 0:
            n_ok += 1
            right_ok += pred == -1
        else:
            n_err += 1
            right_err += pred == e
    a, b = right_err / n_err, right_ok / n_ok
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def test_first_error_f1_and_threshold_equal_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(3, 12))
        scores = [list(np.round(rng.random(int(rng.integers(1, 6))), 2)) for _ in range(n)]
        truth = [int(rng.integers(-1, len(s))) for s in scores]
        if all(t < 0 for t in truth) or all(t >= 0 for t in truth):
            continue
        grid = sorted({0.0, 1.0, 1.5, *[x for s in scores for x in s], *[x + 0.005 for s in scores for x in s]})
        best = max(_brute_f1(truth, scores, t) for t in grid)
        tau = choose_threshold(truth, scores)
        assert abs(_brute_f1(truth, scores, tau) - best) < 1e-12
        for t in grid[::5]:
            assert abs(first_error_metrics(truth, scores, t)["f1"] - _brute_f1(truth, scores, t)) < 1e-12


def test_correctness_test_is_exact_mcnemar_and_flips_per_problem():
    from scipy.stats import binomtest
    before = [1] * 7 + [0] * 3 + [1] * 4
    after = [0] * 7 + [1] * 3 + [1] * 4
    t = correctness_test(before, after)
    assert t["exact"] and abs(t["p_value"] - binomtest(7, 10, 0.5).pvalue) < 1e-12
    # clusters: per-problem sums, exact enumeration over problems
    g = list("aabbccdd")
    b, a = [1, 1, 1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 0, 1, 0, 0]
    sums = pd.Series(np.subtract(b, a)).groupby(g).sum().to_numpy()
    tot = sum(abs(sum(s * x for s, x in zip(signs, sums))) >= abs(sums.sum()) - 1e-12
              for signs in itertools.product((1, -1), repeat=len(sums)))
    assert correctness_test(b, a, g)["p_value"] == tot / 2 ** len(sums)


def test_best_of_n_equals_subset_enumeration():
    rng = np.random.default_rng(3)
    groups = np.repeat(["a", "b", "c"], [4, 5, 3])
    correct = rng.random(12) < 0.5
    reward = np.round(rng.random(12), 1)  # ties on purpose
    tab = best_of_n_table(groups, correct, reward, ns=[1, 2, 3]).set_index("n")
    for n in (1, 2, 3):
        vals = []
        for g in "abc":
            idx = np.flatnonzero(groups == g)
            picks = []
            for sub in itertools.combinations(idx, n):
                top = max(reward[list(sub)])
                picks.append(np.mean([correct[i] for i in sub if reward[i] == top]))
            vals.append(np.mean(picks))
        assert abs(tab.loc[n, "prm"] - np.mean(vals)) < 1e-12


def test_step_audit_reports_a_fixed_threshold(prms):
    sols, _ = parse_solutions(trl_rows(3))
    sc = load_scorer(str(prms["token-classification"]), kind="prm")
    res = prm_step_audit(sols, sc, ["SN"], threshold=0.5, B=999)
    assert res.manifest["threshold"] == 0.5 and res.manifest["threshold_source"] == "given"
    after = res.steps[res.steps.perturbation == "SN"]
    assert all(len(a) == len(b) for a, b in zip(after.step_scores, sols.steps))
    # the F1 before and after, recomputed from the definition on scores taken from the scorer directly
    before = [sc.step_scores(p, st) for p, st in zip(sols.prompt, sols.steps)]
    assert abs(res.summary.f1_before[0] - _brute_f1(sols.first_error, before, 0.5)) < 1e-12
    assert abs(res.summary.f1_after[0] - _brute_f1(after.first_error, list(after.step_scores), 0.5)) < 1e-12


# ---------------------------------------------------------------------------------------------------------- CLI
def test_trl_stepwise_file_audited_end_to_end_from_the_cli(prms, tmp_path):
    from reward_auditor.cli import main
    f = write_jsonl(tmp_path / "trl.jsonl", trl_rows(4) + [{"prompt": "q?", "completions": ["a"], "labels": []}])
    out = tmp_path / "run"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["audit", "--data", str(f), "--model", f"prm={prms['token-classification']}", "--kind", "prm",
                   "--aggregate", "prod", "--perturbations", "SN,MX,PH", "-B", "199", "--out", str(out), "-q",
                   "--no-report", "--drop-invalid"])
    assert rc == 0, buf.getvalue()
    items = pd.read_parquet(out / "items.parquet")
    assert {"step_scores_chosen_before", "step_scores_chosen_after"} <= set(items.columns)
    mf = json.loads((out / "manifest.json").read_text())
    assert mf["models"]["prm"]["settings"]["aggregate"] == "prod" and mf["models"]["prm"]["kind"] == "prm"
    assert set(mf["perturbations"]) == {"SN", "MX", "PH"}
    assert mf["data"]["dropped_invalid"][str(f)]["count"] == 1 and mf["data"]["n_items"] == 8  # 4 problems × 2 pairs
    assert mf["data"]["dropped_invalid"][str(f)]["first_row"] == 13  # the line of the broken solution
    prm = json.loads((out / "prm" / "prm" / "prm.json").read_text())
    assert prm["aggregate"] == "prod" and prm["n_solutions"] == 12 and prm["perturbations"] == ["SN", "MX", "PH"]
    assert "first-error F1" in buf.getvalue()
    # the per-pair step scores in items.parquet are the scorer's own, and the reward is the product's log-odds
    with pytest.warns(UserWarning):
        pairs = load_preferences(f, errors="drop").set_index("id")
    sc = load_scorer(str(prms["token-classification"]), kind="prm")
    for r in items[items.perturbation == "SN"].itertuples():
        pair = pairs.loc[r.id]
        want = sc.step_scores(pair["prompt"], list(pair["chosen_steps"]))
        np.testing.assert_allclose(r.step_scores_chosen_before, want, rtol=0, atol=1e-6)
        assert len(r.step_scores_chosen_after) == len(want)
        q = float(np.prod(r.step_scores_chosen_before))
        assert math.isclose(r.reward_chosen_before, math.log(q / (1 - q)), rel_tol=1e-9, abs_tol=1e-9)


def test_processbench_file_without_pairs_runs_the_step_audit_alone(prms, tmp_path):
    from reward_auditor.cli import main
    f = write_jsonl(tmp_path / "pb.jsonl", [
        {"id": f"p{k}", "problem": f"What is {k} + {k}?", "steps": [f"{k} + {k} = {2 * k + (k % 2)}.", "Done."],
         "label": 0 if k % 2 else -1} for k in range(6)])
    err, buf = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(buf):
        rc = main(["audit", "--data", str(f), "--model", str(prms["token-classification"]), "--kind", "prm",
                   "--perturbations", "SN", "--out", str(tmp_path / "run"), "-q"])
    assert rc == 0, err.getvalue()
    assert "only the step-level PRM audit runs" in err.getvalue()
    summary = pd.read_parquet(tmp_path / "run" / "prm" / "token-classification" / "prm_summary.parquet")
    assert summary["perturbation"].tolist() == ["SN"] and summary["n"].tolist() == [6]


def test_prm_options_need_kind_prm_and_models_lists_prm_families(tmp_path):
    from reward_auditor.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["audit", "--data", "sample", "--scorer", "length", "--aggregate", "min",
                     "--out", str(tmp_path / "o")]) == 2
    assert "--kind prm" in err.getvalue()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["models", "--json"]) == 0
    fams = {r["family"] for r in json.loads(buf.getvalue())}
    assert {"prm-token-classification", "qwen2.5-math-prm", "math-shepherd"} <= fams


# ------------------------------------------------------------------------------------ conditions kept and reloaded
def _stepped_pairs():
    sols, _ = parse_solutions(trl_rows(3))
    return solution_pairs(sols)


def test_a_condition_from_the_cross_run_store_keeps_the_perturbed_steps(prms, tmp_path, monkeypatch):
    "A second audit takes LE from the store: its step lists are the perturbed ones, so the PRM scores the same texts."
    from reward_auditor.audit import audit, store_key
    monkeypatch.setenv("REWARD_AUDITOR_CACHE", str(tmp_path / "user-cache"))
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "on")
    pairs = _stepped_pairs()
    sc = load_scorer(str(prms["token-classification"]), kind="prm")
    runs = []
    for k in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs.append(audit(pairs, sc, ["LE"], permutations=199, progress=False, cache=False))
    assert runs[0].manifest["perturbation_store"]["conditions"] == {"LE": "made"}
    assert runs[1].manifest["perturbation_store"]["conditions"] == {"LE": "store"}
    a, b = runs[0].items, runs[1].items
    assert (a["margin_after"] != a["margin_before"]).all()  # LE rewrites every step: every margin moves
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    pd.testing.assert_frame_equal(runs[0].table, runs[1].table, check_exact=True)
    # the key covers the step lists: the same answer texts cut into other steps are other items
    other = pairs.copy()
    other["chosen_steps"] = [[s[0] + "\n" + s[1], *s[2:]] for s in pairs["chosen_steps"]]
    assert other["chosen"].tolist() == ["\n".join(s) for s in other["chosen_steps"]]  # the same texts
    assert store_key(pairs, "LE", 0, {}) != store_key(other, "LE", 0, {})


def test_a_rewrite_pack_of_step_data_audits_as_in_one_go(prms, tmp_path, monkeypatch):
    "perturb --out pack.parquet on step data, then audit --conditions pack.parquet: the in-process audit, bit for bit."
    from reward_auditor.cli import main
    from reward_auditor.store import read_pack
    monkeypatch.setenv("REWARD_AUDITOR_STORE", "off")
    f = write_jsonl(tmp_path / "trl.jsonl", trl_rows(3))
    pack = tmp_path / "pack.parquet"
    common = ["--model", f"prm={prms['token-classification']}", "--kind", "prm", "-B", "199", "--no-report", "-q"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["perturb", "--data", str(f), "--perturbations", "LE,SN", "--out", str(pack), "-q"]) == 0
        assert main(["audit", "--data", str(f), "--perturbations", "LE,SN", "--out", str(tmp_path / "direct"),
                     *common]) == 0
        assert main(["audit", "--conditions", str(pack), "--out", str(tmp_path / "packed"), *common]) == 0
    for name in ("results.parquet", "items.parquet", "texts.parquet"):
        a, b = pd.read_parquet(tmp_path / "direct" / name), pd.read_parquet(tmp_path / "packed" / name)
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    original, _ = read_pack(pack)
    assert original["chosen_steps"].tolist() == _stepped_pairs()["chosen_steps"].tolist()  # not LE's rewrite
    items = pd.read_parquet(tmp_path / "packed" / "items.parquet")
    assert (items.loc[items.perturbation == "LE", "margin_after"]
            != items.loc[items.perturbation == "LE", "margin_before"]).all()


# ------------------------------------------------------------------------------------------- writes in the run folder
def _pb_file(tmp_path):
    return write_jsonl(tmp_path / "pb.jsonl", [
        {"id": f"p{k}", "problem": f"What is {k} + {k}?", "steps": [f"{k} + {k} = {2 * k + (k % 2)}.", "Done."],
         "label": 0 if k % 2 else -1} for k in range(6)])


def _run_cli(args):
    from reward_auditor.cli import main
    err, buf = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(buf), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(args)
    return rc, err.getvalue()


@pytest.mark.parametrize("plant", ["prm", "tmp"])
def test_the_step_audit_writes_only_inside_the_run_folder(prms, tmp_path, plant):
    "A planted link (prm/ itself, or a fixed-name temporary file) never makes the step audit write outside the run."
    folder = prms["token-classification"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("keep me")
    run = tmp_path / "run"
    target = run / "prm" / "token-classification"
    if plant == "prm":
        run.mkdir()
        (run / "prm").symlink_to(outside, target_is_directory=True)
    else:
        target.mkdir(parents=True)
        for name in ("prm_summary.parquet", "prm_best_of_n.parquet", "prm_steps.parquet", "prm.json"):
            (target / f".{name}.tmp").symlink_to(outside / "victim")
    rc, err = _run_cli(["audit", "--data", str(_pb_file(tmp_path)), "--model", str(folder), "--kind", "prm",
                        "--perturbations", "SN", "-B", "99", "--out", str(run), "-q"])
    assert sorted(p.name for p in outside.iterdir()) == ["victim"] and (outside / "victim").read_text() == "keep me"
    if plant == "prm":
        assert rc == 2 and "outside the run folder" in err and "Traceback" not in err, err
        assert len([ln for ln in err.splitlines() if ": error:" in ln]) == 1, err
        assert not (run / "prm" / "token-classification").exists()  # refused before anything was made there
    else:  # the planted names are not used: the files are written under fresh temporary names, then renamed
        assert rc == 0, err
        assert pd.read_parquet(target / "prm_summary.parquet")["perturbation"].tolist() == ["SN"]


@pytest.mark.parametrize("tau", ["nan", "inf", "-1", "2", "-inf", "x"])
def test_a_threshold_outside_0_1_is_refused(prms, tmp_path, tau):
    "--prm-threshold nan/inf/−1/2 gave F1 = 0 with p = 1; now one line naming the option, exit 2 (and the API refuses)."
    rc, err = _run_cli(["audit", "--data", str(_pb_file(tmp_path)), "--model", str(prms["token-classification"]),
                        "--kind", "prm", "--prm-threshold", tau, "--out", str(tmp_path / "run"), "-q"])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--prm-threshold" in err and "Traceback" not in err, err
    assert not (tmp_path / "run" / "prm").exists()
    if tau != "x":
        sols, _ = parse_solutions(trl_rows(2))
        sc = load_scorer(str(prms["token-classification"]), kind="prm")
        with pytest.raises(PRMAuditError, match=r"threshold .*\[0, 1\]"):
            prm_step_audit(sols, sc, [], threshold=float(tau), B=99)


def test_a_planted_prm_link_is_refused_before_the_pair_audit(prms, tmp_path):
    "With preference pairs too, a prm/ link out of the run folder was refused only after the whole pair audit ran."
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "prm").symlink_to(outside, target_is_directory=True)
    data = write_jsonl(tmp_path / "trl.jsonl", trl_rows(3))           # pairs: the pair audit would run first
    rc, err = _run_cli(["audit", "--data", str(data), "--model", f"prm={prms['token-classification']}",
                        "--kind", "prm", "--perturbations", "SN", "-B", "99", "--no-report", "--out", str(run), "-q"])
    assert rc == 2 and "outside the run folder" in err and "Traceback" not in err, err
    assert sorted(p.name for p in run.iterdir()) == ["prm"] and list(outside.iterdir()) == []  # nothing scored or saved


@pytest.mark.parametrize("saved", [5, "nan", float("nan"), [0.5]])  # json writes a float NaN as NaN, reads it back
def test_a_bad_threshold_in_a_resumed_run_file_is_refused_before_any_work(prms, tmp_path, saved):
    "--resume takes prm_threshold from run.json unchecked: the pair audit ran, then the step audit refused it."
    data = write_jsonl(tmp_path / "trl.jsonl", trl_rows(3))
    run = tmp_path / "run"
    common = ["audit", "--data", str(data), "--model", f"prm={prms['token-classification']}", "--kind", "prm",
              "--perturbations", "SN", "-B", "99", "--no-report", "--out", str(run), "-q"]
    rc, err = _run_cli([*common, "--prm-threshold", "0.5"])
    assert rc == 0, err
    f = run / "run.json"
    args = json.loads(f.read_text())
    assert args["prm_threshold"] == 0.5
    args["prm_threshold"] = saved
    f.write_text(json.dumps(args))
    for name in ("results.parquet", "prm"):                             # what a resumed run would write again
        p = run / name
        if p.is_dir():
            import shutil
            shutil.rmtree(p)
        else:
            p.unlink()
    rc, err = _run_cli(["audit", "--data", str(data), "--model", f"prm={prms['token-classification']}",
                        "--perturbations", "SN", "--out", str(run), "--resume", "-q"])
    assert rc == 2 and "--prm-threshold" in err and "Traceback" not in err, err
    assert len([ln for ln in err.splitlines() if ": error:" in ln]) == 1, err
    assert not (run / "results.parquet").exists() and not (run / "prm").exists()  # refused before any work


def test_a_huge_solution_is_refused_before_work_and_hashed_once(prms, monkeypatch, tmp_path):
    "150,000 steps (1.6 MB) hung the cache lookup (the whole solution hashed once per step): now refused at once."
    import signal
    from reward_auditor import cache as C
    sc = load_scorer(str(prms["token-classification"]), kind="prm")
    hashed = []
    real = C.key_digest
    monkeypatch.setattr(C, "key_digest", lambda key: hashed.append(sum(len(k) for k in key)) or real(key))

    def late(*_):
        raise TimeoutError("the huge solution was not refused within 60 s")
    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(60)
    try:
        huge = [f"step {k:06d}." for k in range(150_000)]
        assert len("\n".join(huge)) > 1.6e6
        with pytest.raises(ScorerError, match=r"row id 'big'.*150000 steps.*max_length=512"):
            sc.score_solutions([PROMPT], [huge], ScoreCache(), progress=False, ids=["big"])
        assert hashed == []  # refused before the cache was asked
        # under the step limit but over the token limit: the cache lookup hashes each solution once, not per step
        long = [f"step {k:03d}: " + "x" * 500 for k in range(400)]
        with pytest.raises(ScorerError, match="over max_length=512"):
            sc.score_solutions([PROMPT], [long], ScoreCache(), progress=False)
        n_hashed = len(hashed)
        # from the command line: refused before the perturbations run (their edit sizes on 1.6 MB also took minutes)
        rows = trl_rows(1)
        rows[0]["completions"], rows[0]["labels"] = huge, [True] * len(huge)
        rc, err = _run_cli(["audit", "--data", str(write_jsonl(tmp_path / "huge.jsonl", rows)), "--model",
                            str(prms["token-classification"]), "--kind", "prm", "--perturbations", "SN,LE", "-B", "99",
                            "--out", str(tmp_path / "run"), "-q", "--no-report"])
        assert rc == 2 and "150000 steps" in err and "max_length=512" in err and "Traceback" not in err, err
        assert not (tmp_path / "run" / "conditions").exists()
        from reward_auditor.audit import audit  # and from Python, before make_conditions
        with pytest.raises(ScorerError, match=r"150000 steps.*max_length=512"):
            audit(solution_pairs(parse_solutions(rows)[0]), sc, ["SN", "LE"], permutations=99, progress=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert n_hashed == 400 and sum(hashed[:400]) < 400 * 100  # per step: a 73-character key and the step number


def test_step_level_p_values_are_bh_adjusted_per_subset_family(prms):
    "The PRM summary's p-values get BH within each subset's family of perturbations, as the pair table does."
    from scipy.stats import false_discovery_control
    from reward_auditor.prm_audit import adjust_families
    rows = trl_rows(4)
    sols, _ = parse_solutions(rows)
    sols["subset"] = ["a"] * 6 + ["b"] * 6  # two subsets: families all, a and b
    sc = load_scorer(str(prms["token-classification"]), kind="prm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = prm_step_audit(sols, sc, ["SN", "MX", "LE", "PH"], threshold=0.5, B=999)
    s = res.summary
    assert list(s["subset"].unique()) == ["all", "a", "b"] and "BH" in res.manifest["multiplicity"]
    for _, fam in s.groupby("subset"):
        assert len(fam) == 4
        np.testing.assert_allclose(fam["p_adjusted"], false_discovery_control(fam["p_value"].to_numpy(), method="bh"),
                                   rtol=0, atol=1e-15)
    assert (s["p_adjusted"] >= s["p_value"]).all()
    # by hand: sorted p (0.01, 0.03, 0.04, 0.5) give 4p/rank = (0.04, 0.06, 0.0533, 0.5); the step-up minimum from the
    # top gives 0.0533 to both 0.03 and 0.04; subset x is a family of one, left as it is
    toy = pd.DataFrame({"subset": ["all"] * 4 + ["x"], "p_value": [0.01, 0.04, 0.03, 0.5, 0.02]})
    got = adjust_families(toy)["p_adjusted"].tolist()
    np.testing.assert_allclose(got, [0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.5, 0.02], rtol=1e-15)
    # a perturbation tested on fewer than two problems (NaN) stays out of its family: the others are unchanged
    gap = pd.concat([toy, pd.DataFrame({"subset": ["all"], "p_value": [np.nan]})], ignore_index=True)
    with_gap = adjust_families(gap)["p_adjusted"].tolist()
    np.testing.assert_allclose(with_gap[:5], got, rtol=1e-15)
    assert np.isnan(with_gap[5])
