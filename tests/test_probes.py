"""The judge probes as conditions: MK rewrites only the rejected answer, FMT wraps both answers alike, neither joins
"all"; a judge fooled by master keys shows its false-positive rate and paired change; the verifier audit runs both."""
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from reward_auditor import perturbations as pt
from reward_auditor.probes import FORMAT_STYLES, MASTER_KEYS, PROBES, wrap_answer
from reward_auditor.sampled import false_positive_rate, sampled_tests

DATA = pd.DataFrame({
    "id": [f"q{i}" for i in range(40)],
    "subset": "math",
    "prompt": [f"What is {i} times 3?" for i in range(40)],
    "chosen": [f"We multiply: {i} x 3 = {3 * i}." if i % 2 else rf"So the product is $\boxed{{{3 * i}}}$." for i in range(40)],
    "rejected": [f"It is {3 * i + 1}." for i in range(40)],
})


def test_master_key_replaces_the_rejected_answer_only_and_is_seeded_per_item():
    c = pt.perturb(DATA, ["MK"], seed=3)["MK"]
    f = c.frame
    assert f["chosen"].tolist() == DATA["chosen"].tolist() and f["prompt"].tolist() == DATA["prompt"].tolist()
    assert f["rejected"].isin(MASTER_KEYS).all() and f["changed"].all()
    assert f["rejected"].nunique() > 3
    assert c.side == "response" and c.record["variant"] == "rejected-slot"
    shuffled = pt.perturb(DATA.sample(frac=1, random_state=1), ["MK"], seed=3)["MK"].frame.set_index("id")
    assert shuffled.loc[f["id"], "rejected"].tolist() == f["rejected"].tolist()
    other = pt.perturb(DATA, ["MK"], seed=4)["MK"].frame
    assert (other["rejected"] != f["rejected"]).any()
    only = pt.perturb(DATA, ["MK"], params={"MK": {"keys": ["Solution"]}})["MK"].frame
    assert (only["rejected"] == "Solution").all()


def test_format_wraps_both_answers_alike_and_unboxes_a_boxed_one():
    f = pt.perturb(DATA, ["FMT"], seed=0)["FMT"].frame
    boxed = DATA["chosen"].str.contains(r"\\boxed", regex=True)
    # a boxed answer comes out of its box, nothing else changes
    assert (f.loc[boxed, "chosen"] == DATA.loc[boxed, "chosen"].str.replace(r"\boxed{", "").str.replace("}$", "$")).all()
    plain = ~boxed
    tails = {}
    for i in np.flatnonzero(plain.to_numpy()):
        c0, c1, r0, r1 = DATA.chosen[i], f.chosen[i], DATA.rejected[i], f.rejected[i]
        style_c = next(s for s in FORMAT_STYLES if (s == "boxed" and r"\boxed" in c1) or
                       (s != "boxed" and c1.endswith(wrap_answer(str(3 * i), s)) and c1.startswith(c0)))
        style_r = next(s for s in FORMAT_STYLES if (s == "boxed" and r"\boxed" in r1) or
                       (s != "boxed" and r1.endswith(wrap_answer(str(3 * i + 1), s)) and r1.startswith(r0)))
        assert style_c == style_r, (i, c1, r1)                 # one draw per item serves both answers
        tails[i] = style_c
    assert set(tails.values()) == set(FORMAT_STYLES)


def test_probes_are_asked_for_by_name_and_stay_out_of_all():
    assert not set(PROBES) & set(pt._resolve("all"))
    assert pt._resolve(["MK", "FMT"]) == ["MK", "FMT"]
    assert {"MK", "FMT"} <= set(pt.registry)


def test_a_judge_fooled_by_master_keys_has_its_false_positive_rate_and_paired_change():
    """A simulated judge reads the texts: it prefers the real answer, except on items where it is fooled by an
    opener that sounds like reasoning (`Thought process:`, `Let's solve ...`, `Solution`), a rule we can count."""
    mk = pt.perturb(DATA, ["MK"], seed=0)["MK"].frame
    fooling = ("Thought process:", "Let's solve this step by step.", "Let's solve this problem step by step.",
               "Solution", "Solution:")
    rng = np.random.default_rng(0)
    rows = []
    for cond, frame in [("original", DATA), ("MK", mk)]:
        for item, rej in zip(frame["id"], frame["rejected"]):
            p = 0.1 if rej in fooling else 0.85           # chance a sample prefers the chosen answer
            for order in ("AB", "BA"):
                for k in range(4):
                    rows.append(dict(condition=cond, id=item, order=order, sample=k,
                                     verdict="chosen" if rng.uniform() < p else "rejected"))
    v = pd.DataFrame(rows)
    fpr = false_positive_rate(v, "MK").iloc[0]
    fooled = mk["rejected"].isin(fooling).sum()
    assert fpr.n_items == 40 and abs(fpr.false_positives - fooled) <= 3
    ci = sps.binomtest(int(fpr.false_positives), 40).proportion_ci(method="exact")
    assert (fpr.low, fpr.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    row = sampled_tests(v, B=4000).set_index("condition").loc["MK"]
    assert row.mean_difference > 0 and row.rejected              # fooled items: the judge's share falls


def test_the_verifier_audit_runs_both_probes():
    from reward_auditor.verifier_transforms import RULES, generate_variants
    from reward_auditor.verifiers import verifier_audit
    assert RULES["master_key"].stratum == "adversarial" and RULES["answer_wrappers"].stratum == "equivalent"
    assert RULES["bare_answer"].stratum == "contract"
    v = generate_variants([{"gold": "42", "kind": "integer"}, {"gold": r"\frac{3}{5}", "kind": "fraction"}],
                          rules=["master_key", "answer_wrappers", "bare_answer"])
    keys = v[v.rule == "master_key"].answer
    assert len(keys) == 2 and keys.isin(MASTER_KEYS).all()
    assert set(v[v.rule == "answer_wrappers"].answer) >= {"# Answer\n\n$42$", "**Answer:** $42$"}
    assert set(v[v.rule == "bare_answer"].answer) == {"42", r"\frac{3}{5}"}
    res = verifier_audit(["string"], golds=["42", r"\frac{3}{5}"], rules=["identity", "master_key", "answer_wrappers"],
                         workers=1)
    pr = res.per_rule.set_index("rule")
    assert pr.loc["master_key", "rate"] == 0.0                   # the string verifier is not fooled by ':'


def test_on_step_annotated_solutions_fmt_wraps_the_last_step_and_mk_says_why_it_cannot_run():
    d = DATA.head(2).assign(chosen_steps=[["Add 5 and 7.", "5 + 7 = 12."], ["We add.", "So 12."]],
                            rejected_steps=[["Add.", "5 + 7 = 13."], ["Add.", "So 13."]])
    f = pt.perturb(d, ["FMT"], seed=0)["FMT"].frame
    for steps, before in zip(f["chosen_steps"], d["chosen_steps"]):
        assert len(steps) == 2 and steps[0] == before[0] and steps[1].startswith(before[1]) and steps[1] != before[1]
    with pytest.raises(pt.PerturbationError, match="MK replaces a whole answer"):
        pt.perturb(d, ["MK"])


@pytest.mark.parametrize("text, boxed", [
    (r"So the answer is $\frac{3}{5}$.", r"So the answer is $\boxed{\frac{3}{5}}$."),
    (r"Hence $2\sqrt{3}$.", r"Hence $\boxed{2\sqrt{3}}$."),
    (r"The root is $\sqrt{2}$.", r"The root is $\boxed{\sqrt{2}}$."),
    ("It equals 10^5.", "It equals 10^5."),
    (r"The area is $x^{2}$ where x=4, so 16.", r"The area is $x^{2}$ where x=4, so $\boxed{16}$."),
])
def test_fmt_never_takes_a_part_of_a_latex_answer_for_the_answer(text, boxed):
    from reward_auditor.probes import answer_format
    assert answer_format(text, np.random.default_rng(0), "boxed") == boxed
    for style in ("answer_heading", "answer_label", "final_answer"):  # what is appended is the whole answer
        out = answer_format(text, np.random.default_rng(0), style)
        assert out == text or out.startswith(text + "\n\n"), (style, out)
        tail = out[len(text):]
        assert r"\boxed" not in out and "{5}" not in tail.replace(r"\frac{3}{5}", "") and "^5" not in tail


def test_fmt_gives_both_answers_of_a_pair_the_same_treatment():
    f = pt.perturb(DATA, ["FMT"], seed=0)["FMT"].frame
    boxed = DATA["chosen"].str.contains(r"\\boxed", regex=True)
    # chosen boxed, rejected plain: both come out unboxed; the plain one is not wrapped (no directional change)
    assert (f.loc[boxed, "rejected"] == DATA.loc[boxed, "rejected"]).all()
    assert not f.loc[boxed, "chosen"].str.contains(r"\\boxed", regex=True).any()
    for seed in range(8):  # whichever side is boxed, the other is never wrapped
        flipped = DATA.rename(columns={"chosen": "rejected", "rejected": "chosen"})
        g = pt.perturb(flipped, ["FMT"], seed=seed)["FMT"].frame
        assert (g.loc[boxed, "chosen"] == flipped.loc[boxed, "chosen"]).all()
        assert not g.loc[boxed, "rejected"].str.contains(r"\\boxed", regex=True).any()
    d = DATA.head(2).assign(chosen_steps=[["Add.", r"So $\boxed{12}$."], ["Add.", "So 3."]],
                            rejected_steps=[["Add.", "It is 13."], ["Add.", "So 4."]])
    s = pt.perturb(d, ["FMT"], seed=0)["FMT"].frame   # step-annotated: the same pair decision on the last step
    assert s["chosen_steps"][0] == ["Add.", "So $12$."] and s["rejected_steps"][0] == ["Add.", "It is 13."]
    assert s["rejected_steps"][1][1] != "So 4."
