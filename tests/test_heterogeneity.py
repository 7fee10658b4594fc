"""Subset heterogeneity: cross-checks against scipy/statsmodels, file readers and the CLI entry point."""
import json
from types import SimpleNamespace
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.stats import contingency

from conftest import shared_file
from reward_auditor.heterogeneity import (
    HeterogeneityError, HeterogeneityReport, bias_corrected_v, chisq_min_n, chisq_min_v, chisq_power,
    correctness_frame, heterogeneity, heterogeneity_cli, heterogeneity_many, read_results, v_interval,
    wilson_interval)


def _rb2_records(rng, n_per_subset, acc):
    "RewardBench 2-style per-prompt records: one chosen score against three rejected ones."
    out = []
    for subset, n in n_per_subset.items():
        for i in range(n):
            good = rng.random() < acc[subset]
            rej = list(rng.normal(size=3))
            ch = max(rej) + 0.5 if good else min(rej) - 0.5
            out.append({"id": f"{subset}-{i}", "subset": subset, "scores_chosen": [ch], "scores_rejected": rej})
    return out


@pytest.mark.parametrize("k,n", [(0, 5), (5, 5), (1, 3), (37, 120), (999, 1000), (250, 1763)])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_wilson_matches_statsmodels(k, n, level):
    from statsmodels.stats.proportion import proportion_confint
    np.testing.assert_allclose(wilson_interval(k, n, level), proportion_confint(k, n, 1 - level, "wilson"), atol=1e-12)


def test_power_worked_numbers_and_statsmodels():
    from statsmodels.stats.power import GofChisquarePower
    assert chisq_power(1763, 4) == pytest.approx(0.938, abs=5e-4)
    assert chisq_min_n(4) == 1194
    assert chisq_min_v(1763, 4) == pytest.approx(0.082, abs=5e-4)
    gof = GofChisquarePower()
    for n, df, v in [(1763, 4, 0.1), (300, 1, 0.2), (5000, 9, 0.05)]:
        assert chisq_power(n, df, v) == pytest.approx(gof.power(effect_size=v, nobs=n, alpha=0.05, n_bins=df + 1), abs=1e-10)
    # power is computed for a hypothesised V, never the observed one: it does not depend on the data
    assert chisq_power(1763, 4, v=0.1, k=2) < chisq_power(1763, 4, v=0.1, k=3)


def test_against_scipy_on_random_tables():
    rng = np.random.default_rng(5)
    for _ in range(20):
        r = int(rng.integers(2, 7))
        tab = rng.integers(5, 80, size=(r, 2))
        frame = pd.DataFrame({"subset": np.repeat([f"s{i}" for i in range(r)], tab.sum(1)),
                              "correct": np.concatenate([[True] * a + [False] * b for a, b in tab])})
        res = heterogeneity(frame)
        ref = stats.chi2_contingency(tab)
        assert res.statistic == pytest.approx(ref.statistic, rel=1e-12)
        assert res.pvalue == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
        assert res.df == ref.dof
        assert res.cramers_v == pytest.approx(contingency.association(tab, "cramer"), rel=1e-12)
        lo, hi = res.v_ci
        assert lo <= res.v_corrected <= hi or res.v_corrected == 0.0


def test_v_interval_inverts_noncentral_chi2():
    lo, hi = v_interval(30.0, 500, 4)
    assert stats.ncx2.cdf(30.0, 4, 500 * lo**2) == pytest.approx(0.975, abs=1e-8)
    assert stats.ncx2.cdf(30.0, 4, 500 * hi**2) == pytest.approx(0.025, abs=1e-8)
    assert v_interval(0.3, 500, 4) == (0.0, 0.0)          # chi2.cdf(0.3; 4) < 0.025


def test_bias_corrected_v_under_independence_is_near_zero():
    rng = np.random.default_rng(0)
    vs, vcs = [], []
    for _ in range(200):
        tab = rng.multinomial(300, np.full(8, 1 / 8)).reshape(4, 2)
        x2 = stats.chi2_contingency(tab, correction=False).statistic
        vs.append(np.sqrt(x2 / 300))
        vcs.append(bias_corrected_v(x2, 300, 4, 2))
    assert np.mean(vcs) < np.mean(vs) / 2


def test_rewardbench2_file_ties_dropped_and_cli(tmp_path):
    rng = np.random.default_rng(1)
    recs = _rb2_records(rng, {"Safety": 120, "Precise IF": 90, "Math": 60, "Ties": 30},
                        {"Safety": 0.9, "Precise IF": 0.3, "Math": 0.6, "Ties": 0.5})
    (tmp_path / "rm-a.json").write_text(json.dumps(recs))
    (tmp_path / "rm-b.jsonl").write_text("\n".join(json.dumps(dict(r, model="rm-b")) for r in recs[::-1]))
    rep = heterogeneity_cli([tmp_path / "rm-a.json", tmp_path / "rm-b.jsonl"], seed=0)
    assert isinstance(rep, HeterogeneityReport)
    assert set(rep.results) == {"rm-a", "rm-b"}
    a = rep.results["rm-a"]
    assert a.n == 270 and "Ties" not in a.table.index and a.settings["dropped"] == ["Ties"]
    assert a.weakest == "Precise IF" and a.strongest == "Safety"
    assert a.statistic == rep.results["rm-b"].statistic          # same data, different order and format
    frame = rep.to_frame()
    assert list(frame["model"]) == sorted(frame["model"]) or frame["cramers_v"].is_monotonic_decreasing
    assert "grade" in rep.summary() and rep.to_markdown().count("\n|") >= 3 and "<table" in rep._repr_html_()
    assert "negligible < 0.1" in a.summary() and "<pre>" in a._repr_html_()


def test_results_column_wins_and_ties_count_as_wrong():
    recs = [{"id": 1, "subset": "a", "scores_chosen": 1.0, "scores_rejected": 1.0},
            {"id": 2, "subset": "a", "scores_chosen": 2.0, "scores_rejected": 1.0}]
    assert correctness_frame(recs)["correct"].tolist() == [False, True]
    recs2 = [dict(r, results=1 - i) for i, r in enumerate(recs)]
    assert correctness_frame(recs2)["correct"].tolist() == [True, False]


def test_many_models_bh_and_excess():
    from statsmodels.stats.multitest import multipletests
    rng = np.random.default_rng(2)
    subsets = np.repeat(["a", "b", "c"], [200, 150, 100])
    frames = []
    for m, scale in [("m1", 1.0), ("m2", 0.95), ("m3", 0.0)]:
        p = np.where(subsets == "a", 0.8, np.where(subsets == "b", 0.6, 0.5)) * scale + (1 - scale) * 0.5
        frames.append(pd.DataFrame({"model": m, "subset": subsets, "correct": rng.random(len(subsets)) < p}))
    rep = heterogeneity_many(pd.concat(frames))
    raw = [rep.results[m].p for m in rep.table["model"]]
    np.testing.assert_allclose(rep.table["p_adjusted"], multipletests(raw, method="fdr_bh")[1], rtol=1e-12)
    assert rep.table["cramers_v"].is_monotonic_decreasing
    assert set(rep.table["weakest_excess"]) <= {"a", "b", "c"}
    np.testing.assert_allclose(rep.excess.sum(axis=0), 0, atol=1e-12)


def test_resampled_pvalue_seeded_and_close_to_exact_for_small_tables():
    frame = pd.DataFrame({"subset": list("aaaaaabbbbbbcccc"), "correct": [1] * 5 + [0] + [0] * 5 + [1] + [1] * 4})
    r1 = heterogeneity(frame, seed=7, n_resamples=2000)
    r2 = heterogeneity(frame, seed=7, n_resamples=2000)
    assert r1.pvalue_resampled is not None and r1.pvalue_resampled == r2.pvalue_resampled
    assert r1.p == r1.pvalue_resampled
    big = heterogeneity(pd.DataFrame({"subset": ["a"] * 100 + ["b"] * 100, "correct": [1, 0] * 100}))
    assert big.pvalue_resampled is None


def test_audit_items_frame_uses_original_condition_only():
    items = pd.DataFrame({"model": "rm", "subset": ["x"] * 40 + ["y"] * 40,
                          "condition": (["orig"] * 20 + ["EF"] * 20) * 2,
                          "id": [str(i % 20) for i in range(80)],
                          "margin": [1.0] * 20 + [-1.0] * 20 + [-1.0] * 10 + [1.0] * 10 + [1.0] * 20})
    res = heterogeneity(items)
    assert res.n == 40 and res.subsets.set_index("subset")["accuracy"].to_dict() == {"x": 1.0, "y": 0.5}
    with pytest.raises(HeterogeneityError, match="condition"):
        heterogeneity(items, condition="SP")


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(HeterogeneityError, match="no such file"):
        read_results(tmp_path / "missing.json")
    (tmp_path / "bad.jsonl").write_text('{"subset": "a"}\n{oops\n')
    with pytest.raises(HeterogeneityError, match="line 2"):
        read_results(tmp_path / "bad.jsonl")
    two = pd.DataFrame({"model": ["a", "b"] * 10, "subset": ["x", "y"] * 10, "correct": True})
    with pytest.raises(HeterogeneityError, match="heterogeneity_many"):
        heterogeneity(two)
    with pytest.raises(HeterogeneityError, match="both outcomes"):
        heterogeneity(pd.DataFrame({"subset": ["x", "y"] * 10, "correct": True}))
    with pytest.raises(HeterogeneityError, match="no results files"):
        heterogeneity_cli([])


def test_real_rmbench_length_rule():
    rows = []
    for dom in ["chat", "code", "safety-refuse", "safety-response"]:
        for x in json.loads(shared_file("rm-bench", f"{dom}_filtered.json").read_text()):
            rows.append({"subset": dom, "correct": len(x["chosen"][0]) > len(x["rejected"][0])})
    res = heterogeneity(pd.DataFrame(rows), model="longer-wins")
    assert res.n == 798 and res.df == 3
    assert res.weakest == "safety-refuse" and res.strongest == "safety-response"
    # 798 prompts cannot see V = 0.10 with 0.80 power at df = 3, but the result is significant: no power caveat
    assert res.power < 0.8 and res.grade == "large"
    assert res.cramers_v > 0.4 and res.pvalue < 1e-20


def test_saved_audit_folder_and_audit_result_items(tmp_path):
    rng = np.random.default_rng(4)
    ids = [f"i{j}" for j in range(120)]
    subsets = np.repeat(["chat", "code", "safety"], 40)
    rows = []
    for model, bias in [("good", 1.0), ("flat", 0.0)]:
        mb = rng.normal(size=120) + bias * np.where(subsets == "safety", 2.0, -0.5)
        for pert in ["EF", "ST"]:
            rows.append(pd.DataFrame({"model": model, "subset": subsets, "id": ids, "perturbation": pert,
                                      "changed": True, "margin_before": mb, "margin_after": mb - 1.0}))
    items = pd.concat(rows, ignore_index=True)
    folder = tmp_path / "audit"
    folder.mkdir()
    items.to_parquet(folder / "items.parquet")
    rep = heterogeneity_cli([folder])
    assert set(rep.results) == {"good", "flat"}
    assert rep.results["good"].n == 120                              # one row per item, not per perturbation
    assert rep.results["good"].strongest == "safety"

    class Result:                                                    # the shape of AuditResult
        pass
    r = Result()
    r.items = items[items["model"] == "good"]
    assert heterogeneity(r).statistic == rep.results["good"].statistic
    assert heterogeneity(r).model == "good"
    after = heterogeneity(r, condition="ST")
    assert after.accuracy < rep.results["good"].accuracy
    r.items = items
    assert heterogeneity_many(r).table.set_index("model").loc["flat", "n"] == 120
    with pytest.raises(HeterogeneityError, match="items.parquet"):
        heterogeneity_cli([tmp_path])


def test_untestable_models_are_skipped_with_the_reason():
    ok = pd.DataFrame({"subset": ["a", "b"] * 50, "correct": [True, False, True, True] * 25})
    perfect = pd.DataFrame({"subset": ["a", "b"] * 50, "correct": True})
    rep = heterogeneity_many({"ok": ok, "perfect": perfect})
    assert list(rep.results) == ["ok"] and "both outcomes" in rep.skipped["perfect"]
    assert "skipped perfect" in rep.summary()
    with pytest.raises(HeterogeneityError, match="no model could be tested"):
        heterogeneity_many({"perfect": perfect})


@pytest.mark.parametrize("level", [0.5, 0.8, 0.95, 0.99, 0.999])
def test_wilson_ends_exact_and_bracketing(level):
    "k = 0 gives lo = 0 exactly, k = n gives hi = 1 exactly, and lo ≤ k/n ≤ hi for every k of n ≤ 400."
    for n in [*range(1, 60), 97, 100, 1000 - 1, 1763]:
        k = np.arange(n + 1)
        lo, hi = wilson_interval(k, np.full(n + 1, n), level)
        assert lo[0] == 0.0 and hi[-1] == 1.0
        assert (lo <= k / n).all() and (k / n <= hi).all()
        assert (0 <= lo).all() and (hi <= 1).all() and (lo[1:] > 0).all() and (hi[:-1] < 1).all()
    lo, hi = wilson_interval([0, 2, 0], [4, 0, 0])
    assert lo[0] == 0.0 and np.isnan(lo[1:]).all() and np.isnan(hi[1:]).all()


def _saved_equal(a, b):
    pd.testing.assert_frame_equal(a.table, b.table)
    pd.testing.assert_frame_equal(a.excess, b.excess)
    assert a.summary() == b.summary() and a.to_markdown() == b.to_markdown() and a._repr_html_() == b._repr_html_()
    assert list(a.results) == list(b.results) and a.skipped == b.skipped and a.alpha == b.alpha
    for m in a.results:
        ra, rb = a.results[m], b.results[m]
        pd.testing.assert_frame_equal(ra.table, rb.table)
        pd.testing.assert_frame_equal(ra.subsets, rb.subsets)
        assert ra.summary() == rb.summary() and ra.to_markdown() == rb.to_markdown()
        assert (ra.v_ci, ra.gap_ci, ra.settings, ra.p) == (rb.v_ci, rb.gap_ci, rb.settings, rb.p)


def test_report_save_load_round_trip(tmp_path):
    "Frames, numbers and text survive save/load, with resampled p-values, skipped models and odd model names."
    rng = np.random.default_rng(7)
    sub = np.repeat(["a", "b", "c/d"], [30, 12, 40])
    frames = {"<b>rm/1</b>": pd.DataFrame({"subset": sub, "correct": rng.random(len(sub)) < 0.7}),
              "rm 2": pd.DataFrame({"subset": sub, "correct": rng.random(len(sub)) < np.where(sub == "b", 0.3, 0.8)}),
              "all-right": pd.DataFrame({"subset": sub, "correct": True})}
    rep = heterogeneity_many(frames, n_resamples=199, seed=1)
    assert rep.skipped and any(r.pvalue_resampled is not None for r in rep.results.values())
    out = rep.save(tmp_path / "het")
    assert not list(out.rglob("*.pkl"))
    back = HeterogeneityReport.load(out)
    _saved_equal(rep, back)
    assert back.results["rm 2"].table.attrs.get("dropped") == rep.results["rm 2"].table.attrs.get("dropped")
    single = HeterogeneityReport.load(heterogeneity_many({"x": frames["rm 2"]}).save(tmp_path / "one"))
    assert "weakest_excess" not in single.table.columns and list(single.results) == ["x"]
    with pytest.raises(HeterogeneityError, match="report.json is missing"):
        HeterogeneityReport.load(tmp_path)


def test_v_interval_is_clipped_to_one():
    """A 3 x 2 table with complete separation: the noncentral-chi2 upper end is 1.44 before clipping."""
    from reward_auditor.heterogeneity import _ncp_solve, v_interval
    from scipy import stats as sps
    t = np.array([[6, 0], [0, 6], [6, 0]])
    x2 = sps.chi2_contingency(t, correction=False).statistic
    assert math.sqrt(_ncp_solve(x2, 2, 0.025) / 18) == pytest.approx(1.4388, abs=1e-3)
    lo, hi = v_interval(x2, 18, 2)
    assert hi == 1.0 and 0 < lo < 1
    frame = pd.DataFrame({"subset": np.repeat(["a", "b", "c"], 6), "correct": [1] * 6 + [0] * 6 + [1] * 6})
    res = heterogeneity(frame, resample=False)
    assert res.v_ci[1] == 1.0 and res.cramers_v == pytest.approx(1.0)


def test_grade_words_and_underpowered_only_when_not_significant():
    from reward_auditor.heterogeneity import grade
    rng = np.random.default_rng(0)
    # significant and underpowered: size word, never "underpowered"
    big = pd.DataFrame({"subset": np.repeat(["a", "b", "c"], 60),
                        "correct": np.r_[rng.random(60) < 0.9, rng.random(60) < 0.5, rng.random(60) < 0.2]})
    r = heterogeneity(big)
    assert r.p < 0.05 and r.power < 0.8 and r.grade in ("medium", "large")
    # not significant and underpowered: "underpowered"
    flat = pd.DataFrame({"subset": np.repeat(["a", "b"], 40), "correct": np.r_[[1, 0] * 20, [1, 0] * 20]})
    r = heterogeneity(flat)
    assert r.p > 0.05 and r.power < 0.8 and r.grade == "underpowered"
    # not significant but well powered: the size word
    assert grade(0.02, 0.95, significant=False) == "negligible"
    # Cohen's w cut-offs
    assert [grade(w, 1.0) for w in (0.0999, 0.1, 0.2999, 0.3, 0.4999, 0.5)] == \
        ["negligible", "small", "small", "medium", "medium", "large"]


def test_clustered_rows_use_the_rao_scott_correction():
    from reward_auditor.heterogeneity import HeterogeneityError, heterogeneity
    rng = np.random.default_rng(1)
    fate = rng.random(60) < np.repeat([0.8, 0.6], 30)
    rows = pd.DataFrame({"subset": np.repeat(["A", "B"], 90), "prompt": np.repeat([f"q{i}" for i in range(60)], 3),
                         "correct": np.repeat(fate, 3)})
    naive, robust = heterogeneity(rows, model="m"), heterogeneity(rows, model="m", cluster="prompt")
    # rows that copy their prompt's fate three times: design effect 3 in each subset, so chi2 is a third
    assert robust.settings["design_effects"] == pytest.approx({"A": 3 * 89 / 90 * 30 / 29, "B": 3 * 89 / 90 * 30 / 29}, rel=0.2)
    assert robust.statistic < naive.statistic and robust.pvalue > naive.pvalue and robust.settings["n_clusters"] == 60
    assert "Rao–Scott" in robust.summary()
    with pytest.raises(HeterogeneityError, match="no `row` column"):
        heterogeneity(rows, model="m", cluster="row")
    # an audit's result carries its clusters in its items: used without being named, as a saved folder's are
    run = SimpleNamespace(items=rows.assign(cluster=pd.factorize(rows["prompt"])[0]))
    from_run = heterogeneity(run, model="m")
    assert (from_run.statistic, from_run.pvalue, from_run.settings["n_clusters"]) == \
        (robust.statistic, robust.pvalue, 60)


def test_cli_cluster_flag_and_an_audit_folders_own_clusters(tmp_path, capsys):
    from reward_auditor.cli import main
    rng = np.random.default_rng(1)
    fate = rng.random(60) < np.repeat([0.8, 0.6], 30)
    rows = pd.DataFrame({"model": "m", "subset": np.repeat(["A", "B"], 90),
                         "prompt": np.repeat([f"q{i}" for i in range(60)], 3), "correct": np.repeat(fate, 3)})
    rows.to_json(tmp_path / "m.jsonl", orient="records", lines=True)
    robust = heterogeneity(rows, model="m", cluster="prompt")
    naive = heterogeneity(rows, model="m")
    assert main(["heterogeneity", str(tmp_path / "m.jsonl"), "--cluster", "prompt", "--out", str(tmp_path / "c"),
                 "--no-report", "-q"]) == 0
    assert "Rao–Scott" in capsys.readouterr().out
    back = HeterogeneityReport.load(tmp_path / "c").results["m"]
    assert (back.statistic, back.pvalue, back.settings["n_clusters"]) == (robust.statistic, robust.pvalue, 60)
    assert back.pvalue > naive.pvalue
    # a field the file lacks: one line, exit 2
    assert main(["heterogeneity", str(tmp_path / "m.jsonl"), "--cluster", "group_id"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "m.jsonl" in err and "no `group_id` field" in err
    # a saved audit folder: its items' cluster codes, no flag needed
    (tmp_path / "run").mkdir()
    rows.assign(id=[f"i{k}" for k in range(len(rows))], margin_before=np.where(rows["correct"], 0.5, -0.5),
                cluster=pd.factorize(rows["prompt"])[0]).drop(columns=["correct", "prompt"]).to_parquet(
        tmp_path / "run" / "items.parquet")
    run = heterogeneity_cli([tmp_path / "run"]).results["m"]
    assert (run.statistic, run.settings["n_clusters"]) == (robust.statistic, 60)
