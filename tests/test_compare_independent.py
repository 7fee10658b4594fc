"""The comparison's statistics recomputed by independent code on the same inputs: exact sign-flip p-values by
brute-force enumeration, d_z and its noncentral-t interval by scipy root finding, BH by statsmodels, and the
robustness table's mean difference and d_z (flat and with cluster means) from the items themselves."""
import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats as sps
from statsmodels.stats.multitest import multipletests

from reward_auditor import compare as C


def test_exact_pair_p_values_match_every_sign_pattern():
    rng = np.random.default_rng(1)
    signs = np.array(list(itertools.product([-1, 1], repeat=10)))           # all 1,024 patterns of 10 items
    pairs = C.model_pairs(range(3))
    for t in range(3):
        Dm = np.round(rng.normal(0, 1, (10, 3, 2)), 2)                         # items × models × perturbations
        r = C.pair_signflip(Dm, pairs, B=5000, seed=t)
        for k, (a, b) in enumerate(pairs):
            for l in range(2):
                v = Dm[:, a, l] - Dm[:, b, l]
                T, obs = signs @ v, v.sum()
                assert r["p_greater"][k, l] == pytest.approx(np.mean(T >= obs - 1e-9), abs=1e-12)
                assert r["p_less"][k, l] == pytest.approx(np.mean(T <= obs + 1e-9), abs=1e-12)


def test_dz_and_its_interval_match_scipy_noncentral_t_inversion():
    X = np.random.default_rng(2).normal(0.3, 1, (25, 4))
    dz, n = C.dz_columns(X)
    lo, hi = C.dz_interval(dz, n)
    for j in range(4):
        x = X[:, j]
        d = x.mean() / x.std(ddof=1)
        t = d * math.sqrt(25)
        inv = lambda q: optimize.brentq(lambda nc: sps.nct.cdf(t, 24, nc) - q, -50, 50) / math.sqrt(25)
        assert dz[j] == pytest.approx(d, rel=1e-12)
        assert lo[j] == pytest.approx(inv(0.975), abs=1e-7) and hi[j] == pytest.approx(inv(0.025), abs=1e-7)


@pytest.fixture(scope="module")
def run():
    return C.simulate_run(("A", "B", "C"), n=120, perturbations=("EF", "LE", "LC"), subsets=("chat", "math"),
                          planted={("B", "LC"): 0.6}, seed=3, B=2000)


def test_accuracy_adjustment_is_statsmodels_bh_per_subset(run):
    acc = C.compare(run, clusters=None).accuracy
    for _, g in acc.groupby("subset"):
        np.testing.assert_allclose(g["p_adjusted"], multipletests(g["p"], method="fdr_bh")[1], rtol=1e-12)


def _deltas(items, r):
    pick = lambda m: items[(items.model == m) & (items.subset == r.subset)
                           & (items.perturbation == r.perturbation)].set_index("id")["delta"]
    return pick(r.model_a) - pick(r.model_b)


def test_robustness_mean_and_dz_from_the_items(run):
    rob = C.compare(run, clusters=None).robustness
    assert (rob["verdict"] != "NO_DIFFERENCE").any()                   # B's planted LC drop is found
    for r in rob.itertuples():
        D = _deltas(run.items, r)
        assert r.mean_diff == pytest.approx(D.mean(), rel=1e-9)
        assert r.effect_size == pytest.approx(D.mean() / D.std(ddof=1), rel=1e-9)
        assert (r.p_adjusted <= 0.05) == (r.verdict != "NO_DIFFERENCE")


def test_robustness_dz_with_clusters_is_that_of_the_cluster_means(run):
    ids = run.items["id"].unique()
    clusters = {i: f"g{k // 4}" for k, i in enumerate(ids)}              # four items a cluster
    rob = C.compare(run, clusters=clusters).robustness
    for r in rob.itertuples():
        D = _deltas(run.items, r)
        means = D.groupby(pd.Series(clusters)[D.index].to_numpy()).mean()
        assert r.n_clusters == len(means)
        assert r.effect_size == pytest.approx(means.mean() / means.std(ddof=1), rel=1e-9)
        assert r.mean_diff == pytest.approx(D.mean(), rel=1e-9)
