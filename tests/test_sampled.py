"""Sampled verdicts of a generative judge: judges with known rules are flagged where their rule acts and nowhere else,
the null judge at the nominal rate, parse failures counted exactly, the swap-McNemar test equal to the binomial test
on its discordant counts, and every result the same on a re-run."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special
from scipy import stats as sps

from reward_auditor.sampled import (ORDERS, SampledError, check_verdicts, clopper_pearson, false_positive_rate,
                                    item_counts, mde_share, sampled_tests, simulate_verdicts, swap_mcnemar)
from reward_auditor.stats import signflip_test

ROOT = Path(__file__).resolve().parents[1]
CONDS = ["original", "LE", "PH", "CN"]
ALPHA = 0.05


def length_judge(n=80, K=4, seed=0):
    "A judge that prefers the longer answer (logit += 1.5·log(len_c/len_r)); LE makes the rejected answer 3× longer."
    rng = np.random.default_rng(seed)
    quality = rng.normal(1.0, 0.8, n)
    lc, lr = rng.integers(50, 400, n), rng.integers(50, 400, n)
    ratio = np.stack([lc / lr, lc / (3 * lr), lc / lr, lc / lr])       # original, LE, PH, CN
    p = special.expit(quality + 1.5 * np.log(ratio))[..., None].repeat(2, axis=2)
    return simulate_verdicts(p, K, failure=0.03, tie=0.05, conditions=CONDS, seed=seed + 1)


def test_a_length_judge_is_flagged_under_LE_only_and_as_a_degradation():
    res = sampled_tests(length_judge(), B=4000).set_index("condition")
    assert res["rejected"].tolist() == [False, True, False]             # CN, LE, PH (sorted)
    assert res.loc["LE", "mean_difference"] > 0.15 and res.loc["LE", "p_adjusted"] < 1e-3
    assert not res["failure_rejected"].any()
    assert not swap_mcnemar(length_judge())["rejected"].any()
    # the improvement tail does not see it: the sign convention is "positive = degradation"
    less = sampled_tests(length_judge(), B=4000, alternative="less").set_index("condition")
    assert not less.loc["LE", "rejected"]


def position_judge(n=80, K=4, seed=3, bias=0.3, where="PH"):
    "A judge whose verdict favours the first slot by `bias`, only in condition `where`."
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.35, 0.65, n)
    p = np.repeat(base[None, :, None], 4, axis=0).repeat(2, axis=2)
    j = CONDS.index(where)
    p[j, :, 0] = np.clip(base + bias, 0, 1)     # AB: the chosen answer sits in the first slot
    p[j, :, 1] = np.clip(base - bias, 0, 1)     # BA: the rejected answer does
    return simulate_verdicts(p, K, failure=0.03, conditions=CONDS, seed=seed + 1)


def test_a_position_biased_judge_is_flagged_by_the_swap_test_in_its_condition_and_direction():
    v = position_judge()
    sm = swap_mcnemar(v).set_index("condition")
    assert sm["rejected"].to_dict() == {"CN": False, "LE": False, "PH": True, "original": False}
    assert sm.loc["PH", "first_slot_wins"] > 3 * sm.loc["PH", "second_slot_wins"]
    assert sm.loc["PH", "position_bias"] > 0.3
    # pooling both orders cancels a slot preference: the shares do not move
    res = sampled_tests(v, B=4000)
    assert not res["rejected"].any() and not res["failure_rejected"].any()


def failing_judge(n=80, K=4, seed=5, rates=(0.02, 0.02, 0.02, 0.30)):
    "A judge whose verdicts fail to parse at a set rate per condition (CN: 30 %), at random otherwise."
    rng = np.random.default_rng(seed)
    p = np.repeat(rng.uniform(0.5, 0.9, n)[None, :, None], 4, axis=0).repeat(2, axis=2)
    f = np.asarray(rates)[:, None, None]
    return simulate_verdicts(p, K, failure=f, conditions=CONDS, seed=seed + 1)


def test_a_judge_that_stops_parsing_is_flagged_by_the_failure_test_under_CN_only():
    v = failing_judge()
    res = sampled_tests(v, B=4000).set_index("condition")
    assert res["failure_rejected"].to_dict() == {"CN": True, "LE": False, "PH": False}
    assert res.loc["CN", "failure_difference"] > 0.2
    assert not res["rejected"].any()                         # failures at random leave the shares alone


def test_parse_failure_counts_are_exact():
    v = failing_judge()
    res = sampled_tests(v, B=200).set_index("condition")
    bad = v[v.verdict == "invalid"].groupby("condition").size()
    alls = v.groupby("condition").size()
    for c in ["LE", "PH", "CN"]:
        assert res.loc[c, "invalid_condition"] == bad[c] and res.loc[c, "invalid_original"] == bad["original"]
        assert res.loc[c, "samples_condition"] == alls[c] == 80 * 2 * 4
    # per item and order, every count equals a plain group count
    ic = item_counts(v).set_index(["condition", "id"])
    naive = v.groupby(["condition", "id", "order", "verdict"]).size().unstack(["order", "verdict"], fill_value=0)
    for o, w in naive.columns:
        assert (ic[f"{w}_{o}"] == naive[(o, w)].reindex(ic.index)).all(), (o, w)
    assert (ic["n"] == 8).all() and (ic["valid"] + ic["invalid"] == ic["n"]).all()


def test_the_null_judge_is_flagged_at_most_alpha_plus_three_standard_errors_over_200_families():
    F, n, K = 200, 30, 2
    frames = []
    for fam in range(F):                      # a judge that ignores the perturbations: one p per item throughout
        rng = np.random.default_rng([11, fam])
        p = np.repeat(rng.uniform(0.2, 0.9, n)[None, :, None], 4, axis=0).repeat(2, axis=2)
        v = simulate_verdicts(p, K, failure=0.1, tie=0.1, conditions=CONDS, seed=[12, fam])
        frames.append(v.assign(family=fam, id=f"{fam}-" + v["id"]))
    v = pd.concat(frames, ignore_index=True)
    res = sampled_tests(v, B=500, by="family")          # one family (BH over LE, PH, CN) per simulated audit
    sm = swap_mcnemar(v, by="family")
    assert len(res) == 3 * F and res["n_items"].eq(n).all() and res["n_tested"].ge(n - 3).all()
    flagged = {"share": res.groupby("family")["rejected"].any().mean(),
               "failure": res.groupby("family")["failure_rejected"].any().mean(),
               "position": sm.groupby("family")["rejected"].any().mean()}
    bound = ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / F)
    assert all(rate <= bound for rate in flagged.values()), (flagged, bound)
    # the families side by side give the p-values each family gets alone
    one = sampled_tests(v[v["family"] == 7], B=500)
    np.testing.assert_array_equal(one["pvalue"], res.loc[res["family"] == 7, "pvalue"])


def _discordant(v: pd.DataFrame) -> dict:
    "b, c per condition from majority verdicts per order, computed independently with plain pandas."
    x = v[v.verdict != "invalid"].assign(w=lambda d: d.verdict.map({"chosen": 1.0, "tie": 0.5, "rejected": 0.0}))
    m = x.groupby(["condition", "id", "order"]).w.mean().unstack("order")
    out = {}
    for cond, g in m.groupby(level="condition"):
        g = g.dropna()
        g = g[(g.AB != 0.5) & (g.BA != 0.5)]
        out[cond] = (int(((g.AB > 0.5) & (g.BA < 0.5)).sum()), int(((g.AB < 0.5) & (g.BA > 0.5)).sum()))
    return out


@pytest.mark.parametrize("K", [1, 3])
def test_swap_mcnemar_equals_the_binomial_test_on_the_discordant_counts(K):
    v = position_judge(n=50, K=K, bias=0.15, seed=21)
    v = pd.concat([v, failing_judge(n=50, K=K)])  # same ids twice: make the conditions distinct
    v["condition"] = v["condition"] + np.where(np.arange(len(v)) < len(v) // 2, "", "-f")
    sm = swap_mcnemar(v).set_index("condition")
    for cond, (b, c) in _discordant(v).items():
        assert (sm.loc[cond, "first_slot_wins"], sm.loc[cond, "second_slot_wins"]) == (b, c)
        assert sm.loc[cond, "pvalue"] == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue if b + c else 1.0,
                                                       rel=1e-12, abs=1e-15)


def test_the_share_test_is_the_engine_on_per_item_differences_and_clusters_flip_whole():
    v = length_judge(n=24, K=2, seed=9)
    v["prompt"] = v["id"].str[-5:].astype(int).floordiv(3).astype(str)   # 8 prompts of 3 pairs each
    ic = item_counts(v).pivot(index="id", columns="condition", values="share")
    d = (ic["original"] - ic["LE"]).to_numpy()
    res = sampled_tests(v, B=4000).set_index("condition")
    assert res.loc["LE", "pvalue"] == signflip_test(d, B=4000).pvalue
    cl = sampled_tests(v, B=4000, cluster="prompt").set_index("condition")
    sums = pd.Series(d, index=ic.index).groupby(ic.index.str[-5:].astype(int) // 3).sum().to_numpy()
    assert cl.loc["LE", "n_clusters"] == 8 and cl.loc["LE", "pvalue"] == signflip_test(sums, B=4000).pvalue
    assert cl.loc["LE", "exact"]                           # 8 clusters: all 256 patterns enumerated


def test_the_false_positive_rate_counts_items_with_an_exact_interval():
    rng = np.random.default_rng(4)
    n = 120
    fooled = rng.uniform(size=n) < 0.2                           # a judge fooled by the master key on ~20 % of items
    pm = np.where(fooled, 0.1, 0.95)
    p = np.stack([np.full(n, 0.8), pm])[..., None].repeat(2, axis=2)
    v = simulate_verdicts(p, 3, conditions=["original", "MK"], seed=5)
    r = false_positive_rate(v, "MK").iloc[0]
    share = item_counts(v).query("condition == 'MK'").share
    k = int((share < 0.5).sum())
    assert r.false_positives == k and r.n_items == n and abs(r.rate - 0.2) < 0.08
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert (r.low, r.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    for kk, nn in [(0, 1), (1, 1), (0, 50), (50, 50), (7, 13)]:
        ci = sps.binomtest(kk, nn).proportion_ci(confidence_level=0.9, method="exact")
        assert clopper_pearson(kk, nn, 0.9) == pytest.approx((ci.low, ci.high), rel=1e-12, abs=1e-15)


def test_mde_matches_the_simulated_power_of_a_judge_without_item_spread():
    # every item has true share 1/2 before and 1/2 - delta after: only the sampling noise of K = 4 per order
    K, n, delta = 4, 200, mde_share(4, 200)
    assert delta == pytest.approx(0.0495, abs=5e-5)
    rng = np.random.default_rng(0)
    reps = 400
    x = rng.binomial(2 * K, 0.5, (reps, n)) / (2 * K) - rng.binomial(2 * K, 0.5 - delta, (reps, n)) / (2 * K)
    z = x.mean(axis=1) / (x.std(axis=1, ddof=1) / np.sqrt(n))
    power = np.mean(np.abs(z) > 1.959964)
    assert abs(power - 0.8) < 3 * np.sqrt(0.16 / reps) + 0.02


def test_reruns_are_bitwise_equal_in_this_process_and_another():
    a = sampled_tests(length_judge(), B=3000)
    b = sampled_tests(length_judge(), B=3000)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    code = ("import sys, hashlib; sys.path.insert(0, 'tests'); from test_sampled import length_judge;"
            "from reward_auditor.sampled import sampled_tests, swap_mcnemar;"
            "v = length_judge(); f = sampled_tests(v, B=3000); s = swap_mcnemar(v);"
            "print(hashlib.sha256(f.to_csv().encode() + s.to_csv().encode()).hexdigest())")
    import hashlib
    here = hashlib.sha256(a.to_csv().encode() + swap_mcnemar(length_judge()).to_csv().encode()).hexdigest()
    env = {"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "123", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == here


@pytest.mark.parametrize("change, message", [
    (lambda f: f.assign(verdict=["chosen", "B"]), "row 1: field 'verdict' is 'B'"),
    (lambda f: f.assign(order=["AB", "ab"]), "row 1: field 'order' is 'ab'"),
    (lambda f: f.assign(sample=[0, -1]), "row 1: field 'sample' is -1"),
    (lambda f: f.assign(id=["x", None]), "row 1: field 'id' is"),
    (lambda f: f.assign(order="BA"), "row 1: a second verdict for condition 'original', id 'x', order 'BA'"),
    (lambda f: f.drop(columns="verdict"), "lack column(s) ['verdict']"),
])
def test_bad_verdicts_name_the_row_and_field(change, message):
    ok = pd.DataFrame(dict(condition="original", id="x", order=list(ORDERS), sample=0, verdict=["chosen", "tie"]))
    check_verdicts(ok)
    with pytest.raises(SampledError) as e:
        check_verdicts(change(ok))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_an_item_without_a_parsable_verdict_leaves_the_share_test_and_stays_in_the_failure_test():
    rows = []
    for cond in ["original", "EF"]:
        for i in range(6):
            for o in ORDERS:
                for k in range(2):
                    dead = cond == "EF" and i == 0
                    rows.append(dict(condition=cond, id=f"q{i}", order=o, sample=k,
                                     verdict="invalid" if dead else ("chosen" if (i + k) % 3 else "rejected")))
    r = sampled_tests(pd.DataFrame(rows), B=100).iloc[0]
    assert (r.n_items, r.n_tested, r.n_undefined, r.invalid_condition, r.invalid_original) == (6, 5, 1, 4, 0)
    assert r.failure_difference == pytest.approx(1 / 6) and r.failure_pvalue == 0.5   # one non-zero item: 1 of 2


def test_a_condition_where_nothing_parses_has_no_share_test_and_a_failure_finding():
    rng = np.random.default_rng(2)
    p = np.repeat(rng.uniform(0.5, 0.9, 30)[None, :, None], 3, axis=0).repeat(2, axis=2)
    f = np.zeros(p.shape)
    f[2] = 1.0                                                     # PH: no verdict parses
    v = simulate_verdicts(p, 3, conditions=["original", "LE", "PH"], failure=f, seed=3)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = sampled_tests(v, B=1000).set_index("condition")
    assert r.loc["PH", "n_tested"] == 0 and np.isnan(r.loc["PH", "pvalue"]) and not r.loc["PH", "rejected"]
    assert r.loc["PH", "failure_rejected"] and r.loc["PH", "invalid_condition"] == 30 * 6
    assert r.loc["LE", "p_adjusted"] == r.loc["LE", "pvalue"]      # NaN stays out of the family's adjustment
    fp = false_positive_rate(v, "PH").iloc[0]
    assert fp.n_undefined == 30 and np.isnan(fp.rate)


def test_the_detectable_change_with_clusters_is_that_of_the_cluster_sums():
    """With clusters the sign flips move whole clusters, so the standard error of the mean change comes from the
    cluster sums: MDE = z·sd(sums)·√G/n (hand computation); without clusters it is z·sd/√n, and items that move
    together (a prompt's three pairs) make the clustered MDE the larger."""
    v = length_judge(n=24, K=2, seed=9)
    v["prompt"] = v["id"].str[-5:].astype(int).floordiv(3).astype(str)   # 8 prompts of 3 pairs each
    ic = item_counts(v).pivot(index="id", columns="condition", values="share")
    d = pd.Series((ic["original"] - ic["LE"]).to_numpy(), index=ic.index)
    flat = sampled_tests(v, B=500).set_index("condition").loc["LE"]
    cl = sampled_tests(v, B=500, cluster="prompt").set_index("condition").loc["LE"]
    assert len(sampled_tests(v, B=50)) == 3                                 # CN, LE, PH: alpha_eff = 0.05/3
    z = sps.norm.ppf(1 - 0.05 / 3 / 2) + sps.norm.ppf(0.8)
    sums = d.groupby(d.index.str[-5:].astype(int) // 3).sum()
    assert flat["mde"] == pytest.approx(z * d.std(ddof=1) / np.sqrt(24), rel=1e-12)
    assert cl["mde"] == pytest.approx(z * sums.std(ddof=1) * np.sqrt(8) / 24, rel=1e-12)
    assert cl["mde"] != pytest.approx(flat["mde"], rel=1e-3)               # before: the items' formula either way
