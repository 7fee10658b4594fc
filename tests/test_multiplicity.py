"""Multiplicity procedures against statsmodels/scipy, the worked example, SABHA's optimum and FDR behaviour."""
import numpy as np
import pytest
import scipy.stats
from hypothesis import HealthCheck, given, settings, strategies as st
from statsmodels.stats.multitest import multipletests

from reward_auditor import multiplicity as M

P_EX = np.array([.0001, .0004, .0192, .0355, .2011, .0009, .0002, .0470, .0062, .6123])
G_EX = np.array(["prompt"] * 5 + ["response"] * 5)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
pvecs = st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=25).map(np.array)


@FAST
@given(pvecs, st.sampled_from([0.01, 0.05, 0.1, 0.2]))
def test_pooled_methods_match_statsmodels(p, alpha):
    for ours, theirs in [("bh", "fdr_bh"), ("by", "fdr_by"), ("tsbh", "fdr_tsbh")]:
        rej, adj = multipletests(p, alpha=alpha, method=theirs)[:2]
        got = M.adjust(p, ours, alpha=alpha)
        np.testing.assert_allclose(got.p_adjusted, adj, rtol=1e-13, atol=1e-15)
        assert np.array_equal(got.rejected, rej)
    np.testing.assert_allclose(M.adjust(p).p_adjusted, scipy.stats.false_discovery_control(p), rtol=1e-13)


@FAST
@given(st.lists(st.floats(1e-6, 1.0), min_size=10, max_size=10).map(np.array),
       st.sampled_from(["bh", "by", "tsbh", "sabha", "gbh", "weighted", "stratified"]))
def test_rejections_are_adjusted_below_alpha(p, method):
    r = M.adjust(p, method, groups=G_EX, weights={"prompt": 0.8, "response": 0.5} if method == "weighted" else None)
    assert np.all((r.p_adjusted >= 0) & (r.p_adjusted <= 1))
    if method != "tsbh":
        assert np.array_equal(r.rejected, r.p_adjusted <= 0.05)
    if method in ("bh", "by", "stratified"):
        assert np.all(r.p_adjusted >= p - 1e-15)
    # a smaller p never loses to a larger one within the same group and weight
    for g in ("prompt", "response"):
        idx = np.flatnonzero(G_EX == g)
        o = idx[np.argsort(p[idx], kind="stable")]
        assert np.all(np.diff(r.p_adjusted[o]) >= -1e-15)


def test_worked_example_all_methods():
    want = {"bh": [1, 2, 3, 6, 7, 9], "by": [1, 2, 6, 7, 9], "tsbh": [1, 2, 3, 4, 6, 7, 8, 9],
            "sabha": list(range(1, 10)), "gbh": [1, 2, 3, 4, 6, 7, 9]}
    for m, w in want.items():
        assert list(np.flatnonzero(M.adjust(P_EX, m, groups=G_EX).rejected) + 1) == w, m
    wt = M.adjust(P_EX, "weighted", groups=G_EX, weights={"prompt": 0.8, "response": 0.5})
    assert list(np.flatnonzero(wt.rejected) + 1) == [1, 2, 3, 4, 6, 7, 8, 9]
    tail = M.adjust(P_EX, "gbh", groups=G_EX, storey="tail")
    assert list(np.flatnonzero(tail.rejected) + 1) == list(range(1, 10)) and tail.pi0 == {"prompt": 0.0, "response": 0.4}
    np.testing.assert_allclose(M.adjust(P_EX).p_adjusted,
                               [.001, .00133333, .032, .0507143, .2234444, .00225, .001, .05875, .0124, .6123], atol=1e-6)
    s = M.adjust(P_EX, "sabha", groups=G_EX)
    assert s.q_hat == pytest.approx({"prompt": 0.1, "response": 0.4}) and s.warning == M.SABHA_WARNING


def _sabha_objective(q, B, eta):
    c = 1 - eta
    with np.errstate(divide="ignore"):
        return -np.sum(B * np.log(c * q) + (1 - B) * np.log(1 - c * q))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("eta", [0.2, 0.5])
def test_sabha_qhat_is_the_constrained_optimum(seed, eta):
    rng = np.random.default_rng(seed)
    p = np.where(rng.random(10) < 0.5, rng.random(10), rng.random(10) ** 3)
    codes = np.repeat([0, 1], 5)
    q, infeasible = M._sabha_qhat(p, codes, 2, eta, 0.1)
    B = (p > eta).astype(float)
    if infeasible:
        assert B.sum() > 10 * (1 - eta) and np.all(q == 1)
        return
    qi = q[codes]
    assert np.sum(B / ((1 - eta) * qi)) <= 10 + 1e-9 and np.all((q >= 0.1) & (q <= 1))
    best = _sabha_objective(qi, B, eta)
    grid = np.linspace(0.1, 1, 181)
    for a in grid:
        for b in grid:
            qq = np.where(codes == 0, a, b)
            if np.sum(B / ((1 - eta) * qq)) <= 10:
                assert _sabha_objective(qq, B, eta) >= best - 1e-9


def test_sabha_infeasible_falls_back_to_q_one():
    r = M.adjust(np.r_[np.full(6, 0.9), np.full(4, 0.001)], "sabha", groups=G_EX)
    assert r.infeasible and set(r.q_hat.values()) == {1.0}
    np.testing.assert_array_equal(r.rejected, np.r_[np.zeros(6, bool), np.ones(4, bool)])


def test_weighted_and_stratified_definitions():
    wt = M.adjust(P_EX, "weighted", groups=G_EX, weights={"prompt": 0.8, "response": 0.5})
    np.testing.assert_allclose(wt.p_adjusted, M.bh_adjust(np.where(G_EX == "prompt", 0.8, 0.5) * P_EX))
    st_ = M.adjust(P_EX, "stratified", groups=G_EX)
    np.testing.assert_allclose(st_.p_adjusted[5:], M.bh_adjust(P_EX[5:]))
    np.testing.assert_allclose(M.adjust(P_EX, "weighted", weights=np.ones(10)).p_adjusted, M.bh_adjust(P_EX))


def test_edge_cases():
    assert M.adjust([0.2]).p_adjusted[0] == 0.2 and M.adjust([0.2], "tsbh").p_adjusted[0] == 0.2
    r = M.adjust([0.01, np.nan, 0.02], "by")
    assert np.isnan(r.p_adjusted[1]) and not r.rejected[1]
    assert M.adjust([np.nan, np.nan]).rejected.sum() == 0
    with pytest.raises(M.MultiplicityError, match="unknown multiplicity method"):
        M.adjust(P_EX, "holm")
    with pytest.raises(M.MultiplicityError, match="needs `groups`"):
        M.adjust(P_EX, "gbh")
    with pytest.raises(M.MultiplicityError, match="one per p-value"):
        M.adjust(P_EX, "sabha", groups=G_EX[:3])
    with pytest.raises(M.MultiplicityError, match="no entry"):
        M.adjust(P_EX, "weighted", groups=G_EX, weights={"prompt": 0.8})
    f = M.adjust(P_EX).to_frame(P_EX)
    assert list(f.columns) == ["p", "p_adjusted", "rejected"]


def test_global_null_fdr_small_simulation():
    sim = M.simulate_fdr(methods=("bh", "by", "sabha", "gbh"), reps=1500, seed=3)
    se = np.sqrt(0.05 * 0.95 / 1500)
    assert sim.loc["bh", "fdr"] <= 0.05 + 4 * se
    assert sim.loc["by", "fdr"] <= 0.02 + 4 * se
    assert sim.loc["sabha", "fdr"] > 0.05 + 2 * se          # the documented finite-L excess


@FAST
@given(st.lists(st.floats(1e-6, 1.0), min_size=10, max_size=10).map(np.array),
       st.sampled_from(["bh", "by", "tsbh", "sabha", "gbh", "weighted", "stratified"]),
       st.sampled_from([0.01, 0.05, 0.1]))
def test_two_tailed_family_is_each_tail_at_half_alpha(p, method, alpha):
    """Both tails at alpha/2; the doubled adjusted p compared with alpha gives exactly the same rejections."""
    kw = dict(weights={"prompt": 0.8, "response": 0.5}) if method == "weighted" else {}
    q = np.clip(1 - p + 1e-3, 0, 1)
    a, b = M.adjust_tails(p, q, method, G_EX, alpha, **kw)
    for res, pp in ((a, p), (b, q)):
        half = M.adjust(pp, method, G_EX, alpha / 2, **kw)
        assert np.array_equal(res.rejected, half.rejected)
        assert np.array_equal(res.rejected, res.p_adjusted <= alpha)
        np.testing.assert_allclose(res.p_adjusted, np.minimum(2 * half.p_adjusted, 1), rtol=1e-15)


def test_two_sided_bh_controls_any_verdict_and_fdr():
    """z-test families: the alpha/2-per-tail construction stays at alpha; the old alpha-per-tail one near 2 alpha."""
    se = np.sqrt(0.05 * 0.95 / 3000)
    new = M.simulate_family("bh", (5, 5), reps=3000, seed=7)
    old = M.simulate_family("bh", (5, 5), reps=3000, seed=7, split=False)
    assert new["any_verdict"] <= 0.05 + 3 * se < old["any_verdict"]
    planted = M.simulate_family("bh", (5, 5), reps=3000, seed=8, rho=0.5, shift=[3] * 4 + [0] * 6)
    assert planted["fdr"] <= 0.05 + 3 * planted["fdr_se"] and planted["power"] > 0.5


def test_measured_fdr_flags_unproven_procedures():
    m = M.measured_fdr("stratified", G_EX, two_sided=True, reps=1500)
    assert not m["proven"] and m["exceeds"] and m["L"] == 10 and m["groups"] == {"prompt": 5, "response": 5}
    assert "no FDR proof" in M.fdr_warning(m) and f"{m['max_fdr']:.3f}" in M.fdr_warning(m)
    assert M.measured_fdr("bh", G_EX, reps=1500)["proven"]
    assert M.is_proven("weighted", G_EX, {"prompt": 1.0, "response": 1.0})
    assert not M.is_proven("weighted", G_EX, {"prompt": 0.8, "response": 0.5})
