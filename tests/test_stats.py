"""Properties and cross-checks of the sign-flip engine, effect sizes and diagnostics (reward_auditor.stats)."""
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from hypothesis import HealthCheck, given, settings, strategies as st

from reward_auditor import stats as S

D10 = np.array([.078, -.008, .139, .051, .043, .091, -.021, .114, .006, .071])
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# differences on a coarse grid: many ties and zeros, the hard case for tolerances
grid_d = st.lists(st.integers(-20, 20), min_size=2, max_size=12).map(lambda v: np.array(v, float) / 16)


def exact_lattice_p(kk: np.ndarray) -> float:
    "P(Σ s_i k_i ≥ Σ k_i) for integer k, all 2^N0 sign vectors equally likely."
    kk = kk[kk != 0].astype(np.int64)
    total = int(np.abs(kk).sum())
    prob = np.zeros(2 * total + 1)
    prob[total] = 1.0
    for v in np.abs(kk):
        prob = 0.5 * (np.roll(prob, int(v)) + np.roll(prob, -int(v)))
    return float(prob[total + int(kk.sum()):].sum())


# ---------------------------------------------------------------- confidence
@given(st.floats(-1e7, 1e7, allow_nan=False))
def test_confidence_stable_everywhere(x):
    p, lp, nll = S.confidence(x), S.confidence(x, "logprob"), S.confidence(x, "nll")
    assert 0.0 <= p <= 1.0 and np.isfinite(lp) and lp <= 0.0 and nll == -lp
    if abs(x) < 30:
        assert math.isclose(p, 1 / (1 + math.exp(-x)), rel_tol=1e-13)


def test_confidence_beyond_exp_range():
    assert S.confidence(-1000.0, "logprob") == -1000.0
    assert S.confidence(1000.0, "prob") == 1.0
    np.testing.assert_allclose(S.judge_confidence(-2000.0, -1000.0, scale="logprob"), -1000.0 - math.log(2), rtol=1e-12)
    assert np.isfinite(S.judge_confidence(5000.0, 4000.0, scale="logit"))


# ---------------------------------------------------------------- permp
def test_permp_oracles():
    assert math.isclose(S.permp(0, 9999, 2**16, "exact"), 9.2565e-5, rel_tol=1e-4)
    assert math.isclose(S.permp(0, 999, 2**10), 5.90e-4, rel_tol=1e-3)
    assert math.isclose(S.permp(0, 999, 2**9), 3.23e-4, rel_tol=2e-3)
    assert S.permp(0, 9999, 1024, "exact") < 1 / 1024
    assert S.permp(5, 999, math.inf) == 6 / 1000


def _binom_cdf(b: int, m: int, p: float) -> float:
    "P(X <= b), X ~ Binomial(m, p), through the regularized incomplete beta (not scipy.stats.binom)."
    import scipy.special
    return 1.0 if b >= m else float(scipy.special.betainc(m - b, b + 1, 1 - p))


@pytest.mark.parametrize("T", [2.0 ** 14, 2.0 ** 30, 2.0 ** 60])
@pytest.mark.parametrize("m", [99, 999, 9999])
def test_permp_approximate_is_phipson_smyth_by_adaptive_quadrature(m, T):
    "(b + 1)/(m + 1) minus the integral of the binomial cdf over [0, 1/(2T)], by scipy's adaptive quadrature."
    from scipy import integrate
    for b in sorted({0, 1, 5, m // 10, m // 2, m - 1, m}):
        integral = integrate.quad(lambda p: _binom_cdf(b, m, p), 0, 0.5 / T, epsabs=0, epsrel=1e-13)[0]
        assert math.isclose(S.permp(b, m, T, "approximate"), (b + 1) / (m + 1) - integral, rel_tol=1e-10), b


@pytest.mark.parametrize("m,T", [(99, 64), (999, 4096), (9999, 10_000)])
def test_permp_exact_is_the_mean_over_every_draw_probability(m, T):
    "Phipson and Smyth's exact sum: the binomial cdf at p = k/T, k = 1..T, averaged (math.fsum)."
    for b in (0, 1, 5, m // 10, m):
        want = math.fsum(_binom_cdf(b, m, k / T) for k in range(1, T + 1)) / T
        assert math.isclose(S.permp(b, m, T, "exact"), want, rel_tol=1e-10), b


@pytest.mark.parametrize("T", [16, 32, 1024, 2**20, 2**30])
@pytest.mark.parametrize("nperm", [99, 999, 9999])
def test_permp_bounds_and_monotone(T, nperm):
    b = np.array([0, 1, 5, nperm // 10, nperm])
    p = S.permp(b, nperm, T)
    assert np.all(np.diff(p) > 0)
    assert np.all(p <= (b + 1) / (nperm + 1) + 1e-15) and np.all(p > 0)


@pytest.mark.parametrize("nperm,T", [(99, 4096), (999, 8192), (99, 10_000)])
def test_permp_approximation_tracks_exact_when_draws_are_few(nperm, T):
    b = np.array([0, 1, 5, 20])
    np.testing.assert_allclose(S.permp(b, nperm, T, "approximate"), S.permp(b, nperm, T, "exact"), rtol=0.02)


# ---------------------------------------------------------------- exact enumeration
@FAST
@given(grid_d, st.sampled_from(["greater", "less", "two-sided"]))
def test_exact_matches_scipy(d, alternative):
    r = S.signflip_test(d, alternative=alternative)
    assert r.exact
    sp = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf,
                                      alternative=alternative, vectorized=True)
    n0 = np.count_nonzero(d)
    if n0 == 0:
        assert r.pvalue == 1.0
    else:
        assert math.isclose(r.pvalue, min(1.0, sp.pvalue), rel_tol=1e-12)


@FAST
@given(grid_d)
def test_pvalue_range_floor_order_and_zeros(d):
    r = S.signflip_test(d)
    n0 = np.count_nonzero(d)
    assert 0 < r.pvalue <= 1 and r.pvalue >= 2.0 ** -n0
    perm = np.random.default_rng(0).permutation(d.size)
    assert S.signflip_test(d[perm]).pvalue == r.pvalue
    padded = np.insert(d, [0, d.size // 2, d.size], 0.0)
    assert S.signflip_test(padded).pvalue == r.pvalue


@FAST
@given(st.lists(st.integers(-40, 40), min_size=20, max_size=60).map(lambda v: np.array(v, float) / 8),
       st.integers(0, 2**32 - 1))
def test_mc_pvalue_floor_and_range(d, seed):
    r = S.signflip_test(d, B=500, seed=seed, exact=False)
    n0 = np.count_nonzero(d)
    assert 0 < r.pvalue <= 1
    assert r.pvalue >= 2.0 ** -n0
    assert r.exact is False or n0 == 0


def test_meet_in_the_middle_matches_lattice():
    rng = np.random.default_rng(1)
    k = rng.integers(-50, 60, 28)
    p = S.signflip_test(k / 100.0, exact=True)
    assert p.exact and p.total_nperm == 2.0 ** np.count_nonzero(k)
    assert math.isclose(p.pvalue, exact_lattice_p(k), rel_tol=1e-12)


# ---------------------------------------------------------------- Monte Carlo
def test_mc_within_error_of_exact_lattice_n200():
    rng = np.random.default_rng(2024)
    k = np.round(rng.normal(0.012, 0.1, 200) * 1e4).astype(np.int64)     # d on a 1e-4 grid
    p_exact = exact_lattice_p(k)
    B = 100_000
    r = S.signflip_test(k / 1e4, B=B, seed=7)
    assert not r.exact and r.total_nperm == 2.0 ** np.count_nonzero(k)
    assert abs(r.pvalue - p_exact) <= 4 * math.sqrt(p_exact * (1 - p_exact) / B) + 1 / (B + 1)
    # the t-test and the Monte Carlo agree roughly too (a sanity check of the oracle itself)
    assert abs(scipy.stats.ttest_1samp(k, 0, alternative="greater").pvalue - p_exact) < 0.01


@pytest.mark.parametrize("statistic", ["mean", "signed_rank", "median"])
def test_chunk_invariance(statistic):
    d = np.random.default_rng(3).normal(0.05, 1, 150)
    ps = {S.signflip_test(d, B=3000, seed=11, chunk=c, statistic=statistic).n_exceed for c in (1, 37, 500, 4096)}
    assert len(ps) == 1


def test_mean_and_t_identical_and_t_brute_force():
    d = np.random.default_rng(4).standard_t(2, 90) * 0.1 + 0.02
    rm = S.signflip_test(d, B=4000, seed=5)
    rt = S.signflip_test(d, B=4000, seed=5, statistic="t")
    assert rm.pvalue == rt.pvalue and rm.n_exceed == rt.n_exceed
    X = S.sign_matrix(5, 4000, 90) * d
    t = X.mean(1) / (X.std(1, ddof=1) / math.sqrt(90))
    t_obs = d.mean() / (d.std(ddof=1) / math.sqrt(90))
    assert rt.n_exceed == int(np.sum(t >= t_obs - 1e-9))
    assert math.isclose(rt.statistic, t_obs, rel_tol=1e-12)


@pytest.mark.parametrize("n", [300, 1500])          # one float32 block, and several blocks of 512
def test_float32_recheck_near_ties(n):
    # large common offset: float32 alone cannot separate the near-tied sums; the float64 recheck must
    rng = np.random.default_rng(6)
    d = 1000.0 + rng.integers(-3, 4, n) * 1e-3
    d[::2] *= -1
    for alt in ("greater", "less", "two-sided"):
        r = S.signflip_test(d, B=3000, seed=8, alternative=alt, exact=False)
        T = S.sign_matrix(8, 3000, n).astype(float) @ d
        obs = d.sum()
        stat, o = {"greater": (T, obs), "less": (-T, -obs), "two-sided": (np.abs(T), abs(obs))}[alt]
        assert r.n_exceed == int(np.sum(stat >= o - 1e-12 * np.abs(d).sum()))


def test_mc_agrees_with_scipy_monte_carlo():
    d = np.random.default_rng(9).laplace(0.01, 0.1, 400)
    B = 20_000
    ours = S.signflip_test(d, B=B, seed=1).pvalue
    theirs = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=B,
                                          alternative="greater", vectorized=True, rng=2).pvalue
    assert abs(ours - theirs) <= 2 * (4 * math.sqrt(ours * (1 - ours) / B) + 1 / (B + 1))


def test_trailing_zeros_keep_mc_stream():
    d = np.random.default_rng(10).normal(0.1, 1, 70)          # 70 items: 2 words per sign vector up to 128
    a = S.signflip_test(d, B=2000, seed=3)
    b = S.signflip_test(np.r_[d, np.zeros(40)], B=2000, seed=3)
    assert a.pvalue == b.pvalue and b.n == 110 and b.n_nonzero == a.n_nonzero


# ---------------------------------------------------------------- the batched family
def test_family_equals_single_tests_and_mixed_regimes():
    rng = np.random.default_rng(11)
    D = rng.normal(0.05, 1, (80, 4))
    D[:70, 1] = 0.0                                   # column 1 has N0 = 10 -> exact; others Monte Carlo
    D[5, 2] = np.nan
    res = S.signflip_tests(pd.DataFrame(D, columns=list("abcd")), B=3000, seed=2)
    assert list(res.exact) == [False, True, False, False]
    f = res.to_frame()
    assert list(f.index) == list("abcd") and {"statistic", "pvalue", "exact", "n_exceed", "B", "total_nperm"} <= set(f)
    for k in (0, 3):
        assert res[k].n_exceed == S.signflip_test(D[:, k], B=3000, seed=2).n_exceed
    assert res[1].pvalue == S.signflip_test(D[70:, 1]).pvalue
    assert res.n[2] == 79 and len(list(res)) == 4


def test_nonlinear_statistics_exact_vs_scipy():
    d = np.array([0.3, -0.1, 0.25, 0.4, 0.05, -0.2, 0.15, 0.35, 0.0, -0.05, 0.12])
    for stat, fn in [("median", np.median),
                     ("trimmed_mean", lambda x, axis=-1: scipy.stats.trim_mean(x, 0.1, axis=axis))]:
        r = S.signflip_test(d, statistic=stat)
        sp = scipy.stats.permutation_test((d,), fn, permutation_type="samples", n_resamples=np.inf,
                                          alternative="greater", vectorized=True)
        assert r.exact and math.isclose(r.pvalue, sp.pvalue, rel_tol=1e-12)


# ---------------------------------------------------------------- edge cases (STATS §10)
def test_edge_all_zero():
    r = S.signflip_test(np.zeros(12))
    e = S.effect_sizes(np.zeros(12))
    # d_z of all-zero differences is undefined (it was reported as 0.000), and the verdict stays NO_EVIDENCE
    assert r.pvalue == 1.0 and math.isnan(e.d_z) and e.undefined.startswith("undefined: no pair changed")
    assert S.risk_report([e.d_z], [r.pvalue]).verdict[0] == "NO_EVIDENCE"


def test_edge_constant_nonzero():
    e = S.effect_sizes(np.full(6, 0.25))
    assert e.d_z == math.inf and e.t == math.inf and e.mean == 0.25
    assert S.signflip_test(np.full(6, 0.25)).pvalue == 1 / 64


def test_edge_too_few_items():
    with pytest.raises(S.StatsError, match="at least 2"):
        S.signflip_test([0.1])
    with pytest.raises(S.StatsError, match="at least 2"):
        S.effect_sizes([np.nan, 0.2])


def test_edge_exact_when_small():
    r = S.signflip_test(np.arange(1, 14) / 10, B=10_000)        # 2^13 = 8192 <= B
    assert r.exact and r.total_nperm == 8192 and r.pvalue == 1 / 8192
    # STATS §4.3: also exact whenever N0 <= 20, even with 2^N0 > B; Monte Carlo from N0 = 21
    r14 = S.signflip_test(np.arange(1, 15) / 10, B=10_000)
    assert r14.exact and r14.pvalue == 2.0 ** -14
    r20 = S.signflip_test(np.arange(1, 21) / 10, B=1000)
    assert r20.exact and r20.pvalue == 2.0 ** -20
    assert not S.signflip_test(np.arange(1, 22) / 10, B=10_000).exact


def test_exact_rule_removes_seed_dependence():
    """A p-value near alpha with 16 changed items: exact, so the same for every seed, and equal to brute force."""
    rng = np.random.default_rng(3)
    d = rng.normal(0.25, 1.0, 16).round(3)
    signs = 1 - 2 * ((np.arange(2 ** 16)[:, None] >> np.arange(16)) & 1)
    brute = np.mean(signs @ d >= d.sum() - 1e-12)
    ps = {S.signflip_test(d, seed=s).pvalue for s in range(5)}
    assert ps == {brute}
    # the Wilcoxon test rides on the same engine: exact too, equal to scipy's exact distribution
    from scipy import stats as sps
    w = S.wilcoxon_signed_rank(d)
    assert w.exact and w.pvalue == pytest.approx(sps.wilcoxon(d, alternative="greater", method="exact").pvalue,
                                                 abs=1e-12)


def test_min_pvalue_is_reached_by_all_positive_samples():
    for n0 in (3, 7, 16, 24):
        d = np.r_[np.arange(1, n0 + 1) / 3.0, np.zeros(5)]
        for alt in ("greater", "two-sided"):
            assert S.min_pvalue(n0, 5000, alternative=alt, n=n0 + 5) == pytest.approx(
                S.signflip_test(d, B=5000, alternative=alt).pvalue, rel=1e-12)


def test_edge_low_precision_ties():
    x = np.float16(np.round(np.random.default_rng(12).normal(0.1, 0.3, 14) * 32) / 32).astype(np.float64)
    k = np.round(x * 32).astype(np.int64)
    assert S.signflip_test(x, exact=True).pvalue == pytest.approx(exact_lattice_p(k), rel=1e-12)


def test_edge_huge_margins():
    m0, m1 = S.confidence(np.array([-800.0, 900, -750, 20]), "logprob"), S.confidence(np.array([-900.0, 800, -740, 10]), "logprob")
    assert np.all(np.isfinite(m0 - m1))


def test_edge_nan_pairs_dropped_and_counted():
    d, dropped = S.paired_differences([0.5, np.nan, 0.7, 0.9], [0.4, 0.3, np.inf, 0.8])
    assert dropped == 2 and d.size == 2
    assert S.effect_sizes([0.5, np.nan, 0.7, 0.9], [0.4, 0.3, 0.5, 0.8]).n_dropped == 1
    r = S.signflip_test([0.1, np.nan, 0.2, 0.3])
    assert r.n == 3 and r.pvalue == 1 / 8


# ---------------------------------------------------------------- effect sizes
def test_effect_sizes_worked_example():
    e = S.effect_sizes(D10)
    for name, want in dict(d_z=1.0721667, d_z0=1.1301629, g_z=0.9798262, t=3.3904888, sd=0.0526038).items():
        assert getattr(e, name) == pytest.approx(want, abs=1e-7)
    assert e.ci_low < e.d_z < e.ci_high


def test_nct_ci_coverage():
    rng = np.random.default_rng(13)
    delta, n, hits = 0.4, 15, 0
    for _ in range(300):
        e = S.effect_sizes(rng.normal(delta, 1, n), ci_method="nct")
        hits += e.ci_low <= delta <= e.ci_high
    assert abs(hits / 300 - 0.95) < 0.05


# ---------------------------------------------------------------- diagnostics
@FAST
@given(st.lists(st.integers(-6, 6), min_size=3, max_size=11).map(lambda v: np.array(v, float) / 4),
       st.sampled_from(["wilcox", "pratt", "zsplit"]), st.sampled_from(["greater", "less", "two-sided"]))
def test_wilcoxon_matches_scipy_permutation(d, zero_method, alternative):
    if np.count_nonzero(d) == 0 or (zero_method == "wilcox" and np.count_nonzero(d) < 1):
        return
    sp = scipy.stats.wilcoxon(d, zero_method=zero_method, alternative=alternative,
                              method=scipy.stats.PermutationMethod())
    ours = S.wilcoxon_signed_rank(d, zero_method, alternative)
    assert ours.pvalue == pytest.approx(sp.pvalue, rel=1e-12)


def test_wilcoxon_without_ties():
    w = S.wilcoxon_signed_rank(D10)
    assert (w.statistic, w.pvalue, w.exact) == (50.0, 10 / 1024, True)


def test_paired_t_and_normality_against_scipy():
    rng = np.random.default_rng(14)
    for n in (8, 19, 50, 2000):
        a, b = rng.gamma(2, size=(2, n))
        for alt in ("greater", "less", "two-sided"):
            assert S.paired_t(a, b, alt).pvalue == pytest.approx(scipy.stats.ttest_rel(a, b, alternative=alt).pvalue, rel=1e-10)
        if n >= 20:
            ref = scipy.stats.normaltest(a - b)
            got = S.normality(a - b)
            assert got.statistic == pytest.approx(ref.statistic, rel=1e-9)
            assert got.pvalue == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-300)
    assert math.isnan(S.normality(np.ones(30)).pvalue)


# ---------------------------------------------------------------- risk report and presets
def test_risk_report_worked_example():
    p_adj = [0.001, 0.00133, 0.032, 0.0507, 0.2234, 0.00225, 0.001, 0.05875, 0.0124, 0.6123]
    eff = [.45, .31, .12, .25, .05, .38, .52, .15, .21, -.02]
    rr = S.risk_report(eff, p_adj)
    assert list(rr.columns[:6]) == ["effect", "p_adjusted", "significant", "stars", "r_S", "verdict"]
    assert list(rr.verdict) == ["UNSUITABLE", "UNSUITABLE", "DEGRADES_NEGLIGIBLY", "NO_EVIDENCE", "NO_EVIDENCE",
                                "UNSUITABLE", "UNSUITABLE", "NO_EVIDENCE", "UNSUITABLE", "NO_EVIDENCE"]
    assert list(rr.stars) == ["***", "**", "*", "ns", "ns", "**", "***", "ns", "*", "ns"]
    strict = S.risk_report(eff, p_adj, t=np.array(eff) * math.sqrt(500), n=[500] * 10, strict=True)
    assert {"p_margin", "p_margin_adjusted"} <= set(strict.columns)
    assert (strict.verdict == "UNSUITABLE_STRICT").sum() >= 1
    with pytest.raises(S.StatsError, match="strict=True needs"):
        S.risk_report(eff, p_adj, strict=True)



def test_strict_margin_test_counts_clusters_not_pairs():
    "With clusters: t over cluster sums (the cluster-means t for equal sizes), df = clusters − 1 (scipy's nct)."
    rng = np.random.default_rng(4)
    d = (0.35 + rng.normal(0, 0.9, (30, 1)) + rng.normal(0, 0.5, (30, 4))).ravel()   # 30 clusters of 4 pairs
    ids = np.repeat(np.arange(30), 4)
    t, n_eff, df = S.margin_statistic(d, ids)
    cm = d.reshape(30, 4).mean(axis=1)
    t_cm = scipy.stats.ttest_1samp(cm, 0.0).statistic
    assert df == 29 and t == pytest.approx(t_cm, rel=1e-10) and n_eff < 60
    ref = scipy.stats.nct.sf(t_cm, 29, 0.2 * math.sqrt(30) * d.std(ddof=1) / cm.std(ddof=1))
    assert S.margin_test(t, n_eff, 0.2, df) == pytest.approx(ref, rel=1e-9)
    pair = S.margin_statistic(d)                       # the pairs counted as independent: a far smaller p
    assert pair == (S.effect_sizes(d).t, 120.0, 119.0)
    assert S.margin_test(*pair[:2], 0.2) < S.margin_test(t, n_eff, 0.2, df)
    rr = S.risk_report([0.5], [1e-4], t=[t], n=[n_eff], df=[df], strict=True)
    assert rr["p_margin"].iloc[0] == S.margin_test(t, n_eff, 0.2, df)
    assert S.margin_statistic(d, np.arange(120)) == pair                # clusters of one: today's test

def test_presets_and_paper_code_stars():
    assert set(S.PRESETS) == {"default", "paper-code"}
    pc = S.PRESETS["paper-code"]
    assert (pc["scale"], pc["effect_ddof"], pc["multiplicity"], pc["stars"]) == ("nll", 0, "bh", "paper-code")
    assert list(S.stars([5e-5, 5e-4, 5e-3, 0.04, 0.3], "paper-code")) == ["***", "***", "**", "*", "ns"]
    assert list(S.stars([5e-5, 5e-4, 5e-3, 0.04, 0.3], "paper-code-4")) == ["****", "***", "**", "*", "ns"]


def test_paper_code_reproduction():
    "Our oriented nll test equals the published t-statistic count (t_perm <= t_obs on loss differences)."
    rng = np.random.default_rng(15)
    m0 = rng.normal(0.5, 2, 120)
    loss0, loss1 = S.confidence(m0, "nll"), S.confidence(m0 - rng.normal(0.1, 0.4, 120), "nll")
    d, _ = S.paired_differences(loss0, loss1, "nll")
    official = loss0 - loss1
    X = S.sign_matrix(3, 5000, 120) * official
    tt = lambda x: x.mean(-1) / (x.std(-1, ddof=1) / math.sqrt(x.shape[-1]))
    c = int(np.sum(tt(X) <= tt(official)))
    r = S.signflip_test(d, B=5000, seed=3, statistic="t", p_method="plus_one")
    assert r.n_exceed == c and r.pvalue == (c + 1) / 5001


def test_no_heavy_imports():
    code = ("import sys, reward_auditor.stats, reward_auditor.multiplicity; "
            "bad = [m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_errors_are_named():
    for bad in (dict(statistic="mode"), dict(alternative="up"), dict(B=0), dict(exact="yes"), dict(p_method="x")):
        with pytest.raises(S.StatsError):
            S.signflip_test(D10, **bad)
    with pytest.raises(S.StatsError, match="too large"):
        S.signflip_test(np.arange(1, 50) / 7, exact=True)


def test_bca_interval_between_infinite_replicates_says_nothing_on_stderr():
    "Constant bootstrap resamples give ±inf replicates (d_z of a constant row); the interval stays as it was, silently."
    import warnings
    from reward_auditor.effects import bca_interval
    tb = [np.inf, np.inf, 1.0, 0.5, -np.inf] * 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a genjudge audit's discrete shares printed 'invalid value encountered in add'
        lo, hi = bca_interval(1.0, tb, [0.1, 0.2, 0.3, 0.1])
    # the same interval by hand (scipy's normal): bias correction z0, acceleration from the jackknife, BCa levels
    t = np.asarray(tb)
    z0 = scipy.stats.norm.ppf((np.sum(t < 1.0) + np.sum(t <= 1.0)) / (2 * t.size))
    dev = np.mean([0.1, 0.2, 0.3, 0.1]) - np.array([0.1, 0.2, 0.3, 0.1])
    acc = np.sum(dev ** 3) / (6 * np.sum(dev ** 2) ** 1.5)
    zq = scipy.stats.norm.ppf([0.025, 0.975])
    q = scipy.stats.norm.cdf(z0 + (z0 + zq) / (1 - acc * (z0 + zq)))
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        want = np.percentile(t, 100 * q)  # NaN where numpy interpolates between two equal infinities
    assert np.array_equal([lo, hi], want, equal_nan=True) and not np.isfinite([lo, hi]).all()


def test_a_columns_pvalue_does_not_depend_on_the_columns_beside_it():
    """Monte Carlo p-values just above B distinct patterns (2^14 = 16,384 > B = 10,000: Phipson–Smyth's integral):
    each column tested alone gets the p-value it gets among 40. The integral once ran as one product over all
    counts, whose sum order depended on how many there were (1-ulp differences)."""
    rng = np.random.default_rng(0)
    for seed in range(6):
        D = rng.normal(1.5, 1, size=(14, 40))
        together = S.signflip_tests(D, B=10_000, exact=False, seed=seed).pvalue
        alone = [S.signflip_tests(D[:, [k]], B=10_000, exact=False, seed=seed).pvalue[0] for k in range(40)]
        assert together.tolist() == alone
        assert S.mc_pvalues([7, 7, 7], 10_000, 2.0 ** 14).tolist() == [S.permp(7, 10_000, 2.0 ** 14)] * 3
