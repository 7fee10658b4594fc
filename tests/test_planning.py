"""Planning (STATS.md §19): sample sizes and minimum detectable effects, checked against statsmodels, by simulation
through the package's own sign-flip engine, and through `ra.plan` and `reward-auditor plan`."""
import json
import math

import numpy as np
import pytest
from statsmodels.stats.power import NormalIndPower, TTestPower

import reward_auditor as ra
from reward_auditor import stats as S
from reward_auditor.cli import main
from reward_auditor.planning import mde, plan, power_dz, simulate_power


def test_worked_example_of_section_19():
    "d_z = 0.2, m = 10, q = 0.05: 333 pairs by the normal approximation; clusters of 4 with ICC 0.3: 633."
    assert plan(0.2, m=10, q=0.05).n_normal == 333
    assert plan(0.2, m=10, q=0.05, cluster_size=4, icc=0.3).n_normal == 633
    assert mde(333, m=10) == pytest.approx(0.2, abs=1e-3)


@pytest.mark.parametrize("d,m,q,power", [(0.2, 10, 0.05, 0.8), (0.5, 1, 0.05, 0.9), (0.1, 4, 0.1, 0.8),
                                         (0.35, 20, 0.05, 0.8)])
def test_unclustered_plans_agree_with_statsmodels(d, m, q, power):
    p = plan(d, m=m, q=q, power=power)
    t_n = TTestPower().solve_power(effect_size=d, alpha=q / m, power=power, alternative="two-sided")
    z_n = NormalIndPower().solve_power(effect_size=d, alpha=q / m, power=power, ratio=0, alternative="two-sided")
    assert p.n_pairs == math.ceil(t_n) and p.n_normal == math.ceil(z_n)
    assert p.planned_power == pytest.approx(TTestPower().power(effect_size=d, nobs=p.n_pairs, alpha=q / m), abs=1e-6)
    assert mde(p.n_normal, m=m, q=q, power=power) <= d    # the MDE inverts the normal plan


def _signflip_power(p, reps, seed):
    "Achieved power of plan `p` through the audit's own test: cluster sign-flip, two-sided at alpha_eff."
    rng = np.random.default_rng(seed)
    s, G = int(p.cluster_size), p.n_clusters
    u = np.repeat(rng.standard_normal((G, reps)) * math.sqrt(p.icc), s, axis=0)
    D = p.effect + u + rng.standard_normal((G * s, reps)) * math.sqrt(1 - p.icc)
    cl = np.repeat(np.arange(G), s)
    B = 4000
    kw = dict(B=B, seed=seed, cluster_ids=None if s == 1 else cl)
    pg = S.signflip_tests(D, alternative="greater", **kw).pvalue
    pl = S.signflip_tests(D, alternative="less", **kw).pvalue
    hit = np.minimum(1.0, 2 * np.minimum(pg, pl)) <= p.alpha_eff
    r = hit.mean()
    return r, math.sqrt(r * (1 - r) / reps)


@pytest.mark.parametrize("kw", [dict(effect=0.3, m=4), dict(effect=0.3, m=4, cluster_size=4, icc=0.3),
                                dict(effect=0.4, m=10, cluster_size=3, icc=0.5)])
def test_planned_power_is_achieved_by_the_sign_flip_test(kw):
    "Planned power within ±3 SE of the power the audit's sign-flip test achieves (flat and clustered)."
    p = plan(kw.pop("effect"), **kw)
    got, se = _signflip_power(p, 1500, seed=11)
    assert abs(got - p.planned_power) <= 3 * se, (p, got, se)


@pytest.mark.parametrize("p", [plan(0.2, m=10), plan(0.2, m=10, cluster_size=4, icc=0.3),
                               plan(0.05, design="accuracy", discordant=0.2, m=4)])
def test_planned_power_is_achieved_by_simulation(p):
    got, se = simulate_power(p, 3000, seed=5)
    assert abs(got - p.planned_power) <= 3 * se, (p, got, se)


def test_accuracy_plan_is_connors_formula():
    "One-point drop, 5% discordant pairs, one test at 0.05: (1.96·√.05 + 0.8416·√.0499)² / .0001 = 3923."
    from scipy.special import ndtri
    n = (ndtri(0.975) * math.sqrt(0.05) + ndtri(0.8) * math.sqrt(0.05 - 1e-4)) ** 2 / 1e-4
    assert plan(0.01, design="accuracy", discordant=0.05).n_pairs == math.ceil(n) == 3923


def test_two_models_widen_the_family():
    assert plan(0.2, m=10, models=3).tests == 30
    assert plan(0.2, m=10, models=3).n_pairs > plan(0.2, m=10).n_pairs


def test_power_dz_exact_matches_statsmodels_when_flat():
    assert power_dz(200, 0.25, m=5) == pytest.approx(TTestPower().power(0.25, 200, 0.01), abs=1e-9)


def test_ra_plan_and_cli_plan(capsys):
    assert ra.plan(0.2, m=10).n_pairs == 337
    assert main(["plan", "--effect", "0.2", "-m", "10", "--cluster-size", "4", "--icc", "0.3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_normal"], out["n_pairs"], out["n_clusters"]) == (633, 652, 163)
    assert main(["plan", "--effect", "0.01", "--design", "accuracy", "--discordant", "0.05"]) == 0
    assert capsys.readouterr().out.startswith("3923 pairs detect an accuracy drop of 0.01")
    assert main(["plan", "--mde", "333", "-m", "10"]) == 0
    assert "d_z >= 0.200" in capsys.readouterr().out
    assert main(["plan", "--effect", "0.2", "--icc", "1.5"]) == 2
    assert capsys.readouterr().err.strip() == "reward-auditor: error: icc must be between 0 and 1, got 1.5"
    assert main(["plan", "--effect", "0.3", "--design", "accuracy"]) == 2
    assert "discordant" in capsys.readouterr().err
