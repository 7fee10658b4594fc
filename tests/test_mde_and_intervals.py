"""Issue #38, items 7, 8 and 16: the default d_z interval holds its level on skewed and clustered differences, a
degenerate d_z is undefined (with its reason, shaded as untestable), and every cell without a verdict states its
minimum detectable effect, reading "underpowered" when that is above the margin."""
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from reward_auditor import plots, planning
from reward_auditor import stats as S
from reward_auditor.audit import AuditSettings, audit, decide, family_table
from reward_auditor.report import mde_html, risk_display, risk_table_html


# ---------------------------------------------------------------- 7. the default interval
def _coverage(draw, n, reps, cluster=1, seed=0):
    rng = np.random.default_rng(seed)
    cl = np.arange(n) // cluster if cluster > 1 else None
    hits = 0
    for r in range(reps):
        e = S.effect_sizes(draw(rng, n), n_boot=1000, seed=r, cluster_ids=cl)
        hits += e.ci_low <= 0.3 <= e.ci_high
    return hits / reps


def test_default_interval_holds_its_level_on_skewed_differences():
    "1.3 − Exp(1), d_z 0.3, N = 100: the noncentral t covers about 0.85 of the time; the default must cover ~0.95."
    reps = 400
    cov = _coverage(lambda rng, n: 1.3 - rng.exponential(1.0, n), 100, reps)
    assert abs(cov - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / reps), cov
    assert S.effect_sizes(np.r_[0.1, 0.3, -0.2, 0.4]).ci_method == "bca"
    assert AuditSettings().effect_ci == "bca"


def test_default_interval_holds_its_level_in_clusters():
    "Clusters of 4 pairs, ICC 0.3, skewed, 30 clusters: the default resamples clusters and holds its level."
    def draw(rng, n):
        u = np.repeat(1.0 - rng.exponential(1.0, n // 4), 4) * math.sqrt(0.3)
        return 0.3 + u + (1.0 - rng.exponential(1.0, n)) * math.sqrt(0.7)
    reps = 300
    cov = _coverage(draw, 120, reps, cluster=4, seed=1)
    assert cov >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / reps), cov


def test_bca_agrees_with_scipy_within_monte_carlo_error():
    "Same data, independent resamples: our BCa and scipy.stats.bootstrap(method='BCa') within Monte Carlo error."
    x = 1.3 - np.random.default_rng(4).exponential(1.0, 150)
    ours = S.effect_sizes(x, n_boot=20_000, seed=3)
    dz = lambda v, axis=-1: np.mean(v, axis=axis) / np.std(v, axis=axis, ddof=1)
    sp = scipy.stats.bootstrap((x,), dz, method="BCa", n_resamples=20_000, rng=np.random.default_rng(77),
                               vectorized=True).confidence_interval
    assert ours.ci_low == pytest.approx(sp.low, abs=0.015) and ours.ci_high == pytest.approx(sp.high, abs=0.015)
    # and with scipy's own generator the two are the same interval
    same = scipy.stats.bootstrap((x,), dz, method="BCa", n_resamples=2000, rng=np.random.default_rng(3),
                                 vectorized=True).confidence_interval
    assert S.bca_ci(x, 0.95, 2000, 3) == pytest.approx((same.low, same.high), abs=1e-12)


def test_bca_is_deterministic_and_linear_in_n():
    "Seeded: the same interval twice; the jackknife is closed-form, so a 20,000-pair interval needs no n² matrix."
    x = np.random.default_rng(0).normal(0.2, 1, 20_000)
    assert S.bca_ci(x, n_boot=200, seed=5) == S.bca_ci(x, n_boot=200, seed=5)
    d = x[:50]                                               # the closed-form jackknife equals the explicit one
    explicit = S.bca_interval(S._dz_rows(d), S._dz_rows(d[np.random.default_rng(1).integers(0, 50, (500, 50))]),
                              S._dz_rows(np.stack([np.delete(d, i) for i in range(50)])))
    assert S.bca_ci(d, 0.95, 500, 1) == pytest.approx(explicit, abs=1e-12)


# ---------------------------------------------------------------- 8. degenerate effect sizes
@pytest.mark.parametrize("change", [0.001, 0.7, -3.0])
def test_one_changed_pair_is_undefined_whatever_the_change(change):
    "One changed pair of 25 gave d_z = ±1/√25 = ±0.2 for any size of change; now undefined, with the reason."
    d = np.r_[np.zeros(24), change]
    e = S.effect_sizes(d)
    assert math.isnan(e.d_z) and math.isnan(e.ci_low) and math.isnan(e.ci_high)
    assert "one changed pair of 25" in e.undefined and "±0.200" in e.undefined


def test_all_zero_differences_are_undefined_not_zero():
    "An all-zero difference showed 0.000 with an interval; now NaN, its reason, and still NO_EVIDENCE."
    e = S.effect_sizes(np.zeros(16), ci_method="nct")
    assert math.isnan(e.d_z) and math.isnan(e.ci_low) and e.undefined.startswith("undefined: no pair changed")
    assert S.risk_report([e.d_z], [1.0]).verdict[0] == "NO_EVIDENCE"
    assert S.effect_sizes(np.r_[np.zeros(14), 0.2, -0.1]).undefined == ""       # two changed pairs: defined


def _toy(n=30, moved=1):
    ids = [f"i{k}" for k in range(n)]
    mb = np.linspace(-1, 2, n)
    one = mb.copy()
    one[:moved] -= 0.8
    return pd.DataFrame({"id": ids * 2, "subset": "toy", "perturbation": ["one"] * n + ["many"] * n,
                         "changed": [True] * (2 * n), "margin_before": np.r_[mb, mb],
                         "margin_after": np.r_[one, mb - 0.3 + 0.2 * np.sin(np.arange(n))]})


def test_audit_table_marks_undefined_cells_and_the_risk_table_shades_them():
    t, _ = decide(family_table(_toy(), groups={}, settings=AuditSettings(), seed=0), AuditSettings())
    t = t.assign(model="m", subset="toy", accuracy_before=0.7, n_truncated=0).set_index("perturbation", drop=False)
    assert math.isnan(t.loc["one", "effect_size"]) and "one changed pair of 30" in t.loc["one", "effect_undefined"]
    assert t.loc["many", "effect_undefined"] == "" and np.isfinite(t.loc["many", "effect_size"])
    html = risk_table_html(t.reset_index(drop=True))
    assert html.count(">undefined") == 1 and html.count(plots.UNTESTABLE_CSS.split(";")[0]) == 1


# ---------------------------------------------------------------- 16. minimum detectable effects
def test_cells_without_a_verdict_state_their_mde():
    s = AuditSettings()
    t, margin = decide(family_table(_toy(40, moved=3), groups={}, settings=s, seed=0), s)
    t = t.set_index("perturbation")
    for name in t.index:        # n = 40 pairs in a family of 2 tests at FDR 0.05, 80% power, two-sided
        assert t.loc[name, "mde"] == pytest.approx(planning.mde(40, m=2, q=0.05), abs=1e-12)
        assert t.loc[name, "mde"] == pytest.approx((scipy.stats.norm.isf(0.0125) + scipy.stats.norm.ppf(0.8))
                                                   / math.sqrt(40), abs=1e-12)
    quiet = t["verdict"] == "NO_EVIDENCE"
    assert quiet.any()
    assert (t.loc[quiet, "underpowered"] == (t.loc[quiet, "mde"] > margin)).all()
    assert not t.loc[~quiet, "underpowered"].any()
    wide, _ = decide(family_table(_toy(40, moved=3), groups={}, settings=s, seed=0), AuditSettings(margin=0.6))
    assert not wide["underpowered"].any()                                    # MDE 0.50 < margin 0.6: powered


def test_clustered_mde_uses_the_icc_of_the_cells_differences():
    n, size = 60, 3
    toy = _toy(n, moved=0)
    g = {f"i{k}": f"c{k // size}" for k in range(n)}
    rng = np.random.default_rng(2)
    bump = np.repeat(rng.normal(0, 0.5, n // size), size)
    toy.loc[toy["perturbation"] == "many", "margin_after"] -= bump
    t = family_table(toy, groups={}, settings=AuditSettings(), seed=0, clusters=g).set_index("perturbation")
    d = S.paired_differences(S.confidence(toy["margin_before"][n:].to_numpy()),
                             S.confidence(toy["margin_after"][n:].to_numpy()))[0]
    icc = planning.icc_anova(d, [g[f"i{k}"] for k in range(n)])
    assert 0 < icc < 1 and t.loc["many", "icc"] == pytest.approx(icc, abs=1e-12)
    assert t.loc["many", "mde"] == pytest.approx(planning.mde(n, m=2, cluster_size=size, icc=icc), abs=1e-12)
    assert t.loc["many", "mde"] > planning.mde(n, m=2)                       # clusters: fewer effective pairs


def test_report_reads_underpowered_not_robust():
    r = audit("sample", ["length"], ["EF", "LE"], permutations=500, progress=False)
    t = r.table
    assert {"mde", "underpowered", "effect_undefined"} <= set(t.columns)
    page = mde_html(t, r.manifest["settings"]["margin_used"])
    n_under = int(t.loc[t["verdict"] == "NO_EVIDENCE", "underpowered"].sum())
    assert n_under > 0 and f"{n_under} of {int((t['verdict'] == 'NO_EVIDENCE').sum())} cells" in page
    assert "underpowered: MDE above the margin 0.2" in page
    shown = risk_display(t)
    assert shown.loc[t["underpowered"].to_numpy(bool), "stars"].str.endswith("u").all()     # the mark beside the stars
    assert not shown.loc[~t["underpowered"].to_numpy(bool), "stars"].str.endswith("u").any()


def test_model_comparison_d_z_of_no_or_one_changed_item_is_undefined():
    "compare's d_z of D = d(A) − d(B): all zeros read 0.000 [−0.49, 0.49] at n = 16, one change ±1/√16; now NaN, no interval."
    from reward_auditor.compare import dz_columns, dz_interval
    X = np.c_[np.zeros(16), np.r_[np.zeros(15), 0.3], np.linspace(-1, 2, 16)]
    dz, n = dz_columns(X)
    lo, hi = dz_interval(dz, n)
    assert np.isnan(dz[:2]).all() and np.isnan(lo[:2]).all() and np.isnan(hi[:2]).all()
    assert np.isfinite([dz[2], lo[2], hi[2]]).all()
