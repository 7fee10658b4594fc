"The report states what its numbers show: one accuracy, chance on decided pairs, the bar at each rank, truncation."
import numpy as np
import pandas as pd
import pytest


# ---- the detectability warning quotes the procedure's bar at the test's rank ---------------------------------------

def test_detectability_warning_quotes_the_bh_bar_at_the_rank_not_alpha_over_two():
    from reward_auditor.audit import AuditSettings, detectability_warnings
    fam = pd.DataFrame({"model": "rm", "subset": "chat", "perturbation": ["A", "B", "C", "D"], "group": "response",
                        "p_min": [0.001, 0.02, 0.5, 0.5], "n_nonzero": [10, 6, 1, 1],
                        "detectable": [True, False, False, False]})
    (w,) = detectability_warnings(fam, AuditSettings())        # two-sided BH, alpha 0.05: 0.025 per tail
    # B's smallest p 0.02 ranks 2nd of 4: BH needs p <= 0.025 * 2/4 = 0.0125 there, not 0.025
    assert "B (N0 = 6, p >= 0.02, flagged only at p <= 0.0125)" in w
    # C (p_min 0.5) would fail at rank 4 too (B's 0.02 > 0.025 · 3/4 then): it must get ahead of B, to 0.0125
    assert "C (N0 = 1, p >= 0.5, flagged only at p <= 0.0125)" in w
    assert "needed at best" not in w
    (w1,) = detectability_warnings(fam, AuditSettings(two_sided=False))   # one-sided: alpha 0.05 · 2/4
    assert "B (N0 = 6, p >= 0.02, flagged only at p <= 0.025)" in w1


# ---- calibration: one cluster correction, the hand example's own sum, the ECE bin edges -----------------------------

def test_effective_n_is_cr1_over_hc1_like_the_temperature_interval():
    sm = pytest.importorskip("statsmodels.api")
    from reward_auditor.calibration import effective_n
    rng = np.random.default_rng(3)
    hit = (rng.random(40) < 0.6).astype(float)
    hit[::7] = 0.5
    g = np.repeat(np.arange(13), [5, 1, 3, 2, 4, 3, 1, 6, 2, 3, 4, 3, 3])
    ols = sm.OLS(hit, np.ones((40, 1)))
    deff = (ols.fit(cov_type="cluster", cov_kwds={"groups": g}).bse[0] / ols.fit(cov_type="HC1").bse[0]) ** 2
    assert effective_n(hit, g) == pytest.approx(40 / deff, rel=1e-9)
    # four prompts counted three times each: deff = (4/3 · 3)/(12/11) = 11/3, not the uncorrected 3
    assert effective_n(np.repeat([1.0, 0.0, 1.0, 0.5], 3), np.repeat(np.arange(4), 3)) == pytest.approx(36 / 11)


def test_adaptive_ece_hand_example_states_what_its_terms_sum_to():
    import json
    import re
    from pathlib import Path
    from reward_auditor.calibration import ece
    nb = json.loads((Path(__file__).parents[1] / "nbs" / "02e_calibration.ipynb").read_text())
    text = next("".join(c["source"]) for c in nb["cells"]
                if c["cell_type"] == "markdown" and "The adaptive variant on the same six pairs" in "".join(c["source"]))
    stated = float(re.findall(r"= (0\.\d{6})`", text)[-1])
    terms = abs(1 - 2 * .622459) + abs(1 - .731059 - .817574) + abs(2 - .880797 - .952574)
    assert stated == pytest.approx(terms / 6, abs=5e-7)                                     # 0.160030
    assert stated == pytest.approx(ece(np.array([2, 1, 0.5, -0.5, 3, -1.5]), 3, "adaptive"), abs=5e-7)


def test_ece_bin_edges_follow_numpy_histogram_and_the_convention_is_documented():
    from reward_auditor.calibration import bin_index
    edges = np.linspace(0.5, 1.0, 11)
    want = [int(np.flatnonzero(np.histogram([c], edges)[0])[0]) for c in edges]   # netcal bins with histogramdd
    assert bin_index(edges).tolist() == want == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9]
    doc = " ".join(bin_index.__doc__.split())
    assert "[lo, hi)" in doc and "netcal" in doc and "scikit-learn" in doc


# ---- LE changes both answers alike ------------------------------------------------------------------------------------

def test_le_wraps_both_answers_of_a_pair_in_the_same_opener_head_and_recap():
    from reward_auditor.perturbations import LE_LIST_HEADS, LE_OPENERS, perturb, registry
    df = pd.DataFrame({"id": [f"q{i}" for i in range(20)], "subset": "chat", "prompt": "Why is the grass wet?",
                       "chosen": "Because it rained. The ground is still wet.", "rejected": "No idea. Ask someone."})
    f = perturb(df, ["LE"], seed=0)["LE"].frame
    for c, r in zip(f["chosen"], f["rejected"]):
        cl, rl = c.split("\n"), r.split("\n")
        assert cl[0] in LE_OPENERS and cl[0] == rl[0]
        assert [x for x in cl if x in LE_LIST_HEADS] == [x for x in rl if x in LE_LIST_HEADS]
        assert cl[-1].split(":")[0] == rl[-1].split(":")[0]          # the recap's lead-in
    assert f["chosen"].str.split("\n").str[0].nunique() > 1         # still drawn per item
    assert registry["LE"].paired and registry["LE"].version == "2"  # new outputs, a new version: no stale reuse


# ---- truncation is counted on every path, and "nothing was cut" needs evidence ---------------------------------------

def test_endpoint_run_counts_truncation_like_the_in_process_run(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fake_vllm import FakeVLLM
    from tiny_models import tiny_rm
    from reward_auditor.audit import audit
    from reward_auditor.data import load_preferences
    from reward_auditor.endpoints import EndpointRewardScorer
    from reward_auditor.report import truncation_html
    from reward_auditor.scorers import DiscriminativeScorer
    rm = str(tiny_rm(tmp_path / "rm"))
    pairs = load_preferences("sample").head(10)
    local = DiscriminativeScorer(rm, dtype="float32", device="cpu", batch_size=4, max_length=160)
    a = audit(pairs, [local], ["EF", "LE"], permutations=100, progress=False)
    with FakeVLLM(rm) as server:
        ep = EndpointRewardScorer(server.url, batch_size=4, max_length=160, timeout=5.0, backoff=0.01)
        ep.name = local.name
        b = audit(pairs, [ep], ["EF", "LE"], permutations=100, progress=False)
    got, want = b.manifest["truncation"].get(ep.name), a.manifest["truncation"][local.name]
    assert got is not None and got["cells"] == want["cells"]
    assert got["cells"]["all"]["orig"]["truncated"] == 8 and got["texts_over_limit"] == want["texts_over_limit"] > 0
    assert b.manifest["truncation_unknown"] == []
    cols = ["perturbation", "n", "accuracy_before", "effect_size", "p", "n_truncated", "n_answer_cut"]
    pd.testing.assert_frame_equal(b.table[cols], a.table[cols])
    html = truncation_html(b.manifest)
    assert "8 of 10 original pairs truncated" in html and "nothing was cut" not in html


def test_report_says_unknown_not_nothing_cut_without_counts():
    from reward_auditor.report import truncation_html
    unknown = truncation_html({"truncation": {}, "truncation_unknown": ["served-judge"]})
    assert "nothing was cut" not in unknown and "Truncation unknown" in unknown and "served-judge" in unknown
    assert "nothing was cut" not in truncation_html({"truncation": {}})       # a run that recorded nothing
    assert "nothing was cut" in truncation_html({"truncation": {}, "truncation_unknown": []})  # no token limit at all


# ---- one accuracy per table, named; chance judged on the decided pairs with the ties shown ---------------------------

def _tie_heavy_audit(tmp_path=None):
    from reward_auditor.audit import audit
    # 3 pairs right, 2 wrong, 5 tied: accuracy 0.3 with ties wrong, 3/5 = 0.6 of the decided pairs
    score = {}
    rows = []
    for i in range(10):
        c, r = f"answer c{i}", f"answer r{i}"
        score[c], score[r] = (1.0, 0.0) if i < 3 else (0.0, 1.0) if i < 5 else (0.5, 0.5)
        rows.append({"id": f"p{i}", "subset": "s", "prompt": f"Question {i}?", "chosen": c, "rejected": r})
    return audit(pd.DataFrame(rows), [lambda p, r: score[r]], ["IU", "IW"], permutations=50, progress=False,
                 out=tmp_path)


def test_chance_is_judged_on_decided_pairs_and_ties_are_shown():
    from reward_auditor.audit import BELOW_CHANCE_NOTE, chance_counts, findings
    from reward_auditor.report import below_chance_html, risk_display
    res = _tie_heavy_audit()
    t = res.table
    assert t["accuracy_before"].iloc[0] == pytest.approx(0.3) and t["n_tied_before"].iloc[0] == 5
    f = findings(t)
    assert f["caveat"].tolist() == [""] and f["ties"].tolist() == [5]           # 3 right > 2 wrong: not below chance
    assert below_chance_html(t) == "" and not risk_display(t)["subset"].str.contains("below chance").any()
    cc = chance_counts(t.iloc[[0]]).iloc[0]
    assert (cc["right"], cc["wrong"], cc["tied"]) == (3, 2, 5) and cc["decided_accuracy"] == pytest.approx(0.6)
    assert cc["p_chance"] == pytest.approx(0.5)                                  # P(X >= 3 | 5, ½) = 16/32
    # 2 right, 3 wrong, 5 tied: below chance, and the caveat gives the three counts and the decided accuracy
    low = t.assign(accuracy_before=0.2)
    assert findings(low)["caveat"].tolist() == [BELOW_CHANCE_NOTE]
    html = below_chance_html(low)
    assert "2 right, 3 wrong, 5 tied" in html and "0.400 of the 5 decided pairs" in html and "p = 0.812" in html


def test_two_accuracies_are_each_named_with_their_ties():
    from reward_auditor.calibration import calibration
    from reward_auditor.report import RISK_CAPTION
    res = _tie_heavy_audit()
    cal = calibration(res, n_boot=50)
    row = cal.table[(cal.table["condition"] == "orig")].iloc[0]
    assert row["accuracy"] == pytest.approx(0.55) and row["n_tied"] == 5           # (3 + 5/2)/10: ties count ½
    assert res.table["accuracy_before"].iloc[0] == pytest.approx(0.3)             # the risk table: ties wrong
    assert "counted half right" in cal.summary() and "counted half right" in cal.to_markdown()
    assert "n_tied" in cal.temperature_table()
    assert "tie (equal scores) counted wrong" in RISK_CAPTION
    from reward_auditor.audit import findings_html
    assert "a tie (equal scores) counted wrong" in findings_html(res.table)
