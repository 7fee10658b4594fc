"""Anytime-valid sequential statistics: validity with a peek after every round (null families flat and clustered,
cells at the margin), the confidence sequence against a grid inversion and a closed form, e-BH against its
definition, Ville's inequality, deterministic rounds and a state that round-trips bit for bit."""
import json
import math

import numpy as np
import pytest

from reward_auditor import sequential as S

ALPHA = 0.05


def se(n: int) -> float:
    return math.sqrt(ALPHA * (1 - ALPHA) / n)


@pytest.mark.parametrize("clustered", [False, True])
def test_null_families_are_flagged_at_most_alpha_with_a_peek_every_round(clustered):
    F = 500
    x = S.null_families(F, 10, 240, clusters=clustered, seed=41 + clustered)
    assert np.all(np.abs(x) <= 1)
    sim = S.simulate_sequential(x, ALPHA, margin=0.2, round_size=20)
    assert sim["flagged"].any(axis=1).mean() <= ALPHA + 3 * se(F)
    # the same families with a per-round fixed-N z-test (not anytime-valid) flag far more: the simulation can see it
    z = np.cumsum(x[:, 0], axis=1)[:, 19::20] / np.sqrt(np.cumsum(x[:, 0] ** 2, axis=1)[:, 19::20])
    assert np.mean((np.abs(z) > 1.96).any(axis=1)) > ALPHA + 3 * se(F)


def test_null_families_at_a_loose_level_stay_within_it():
    """At alpha 0.3 the e-values do get rejected sometimes: the FDR (every cell null) stays within 0.3 + 3 SE."""
    F, a = 500, 0.3
    x = S.null_families(F, 4, 120, seed=7)
    sim = S.simulate_sequential(x, a, margin=0.2, round_size=10)
    rate = sim["flagged"].any(axis=1).mean()
    assert rate <= a + 3 * math.sqrt(a * (1 - a) / F)


@pytest.mark.parametrize("dz", [0.5, 0.6])
def test_cells_at_or_beyond_the_margin_are_called_clean_at_most_alpha(dz):
    F = 600
    signs = np.where(np.random.default_rng(int(dz * 100)).random((F, 1, 800)) < 0.5, -1.0, 1.0)
    sim = S.simulate_sequential(0.2 * dz + 0.2 * signs, ALPHA, margin=0.5, round_size=40)
    assert np.mean(sim["status"] == 2) <= ALPHA + 3 * se(F)


def test_cells_well_inside_the_margin_are_called_clean_early():
    signs = np.where(np.random.default_rng(2).random((300, 1, 800)) < 0.5, -1.0, 1.0)
    sim = S.simulate_sequential(0.2 * signs, ALPHA, margin=0.5, round_size=40)
    assert np.mean(sim["status"] == 2) > 0.95 and np.median(sim["used"]) < 400


def test_the_sequence_is_the_grid_inversion_of_the_capital():
    rng = np.random.default_rng(4)
    x = np.clip(rng.normal(-0.2, 0.5, 150), -1, 1)
    lam = S.plugin_lambdas(x)
    lo, hi = S.confidence_sequence(x, lam=lam)
    grid = np.linspace(-1, 1, 40_001)
    X, Lm = np.broadcast_to(x, (grid.size, x.size)), np.broadcast_to(lam, (grid.size, x.size))
    inside = (S.log_capital(X, Lm, grid, +1) < math.log(2 / ALPHA)) & (S.log_capital(X, Lm, grid, -1) < math.log(2 / ALPHA))
    assert abs(grid[inside].min() - lo) <= 5e-5 and abs(grid[inside].max() - hi) <= 5e-5
    assert lo < x.mean() < hi


def test_fixed_bets_give_the_closed_form():
    lam = np.full(17, 0.2)
    assert math.isclose(math.exp(S.log_capital(np.ones(17), lam)), 1.2 ** 17, rel_tol=1e-12)
    e, direction = S.e_values(-np.ones(17), lam=lam)
    assert math.isclose(float(e), (0.8 ** 17 + 1.2 ** 17) / 2, rel_tol=1e-12) and int(direction) == -1


def test_plugin_bets_are_predictable():
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, 50)
    full = S.plugin_lambdas(x)
    for t in (1, 7, 30):
        y = x.copy()
        y[t:] = rng.uniform(-1, 1, 50 - t)      # change the future: the bets up to t stay
        np.testing.assert_array_equal(S.plugin_lambdas(y)[:t + 1], full[:t + 1])
    assert full.max() <= S.TRUNCATION


def test_ebh_matches_its_definition():
    rng = np.random.default_rng(6)
    for _ in range(300):
        e = np.exp(rng.normal(2, 2.5, 8))
        order = np.argsort(-e)
        k_hat = max([k for k in range(1, 9) if e[order[k - 1]] >= 8 / (ALPHA * k)], default=0)
        want = np.zeros(8, bool)
        want[order[:k_hat]] = True
        np.testing.assert_array_equal(S.ebh(e, ALPHA), want)
        np.testing.assert_array_equal(S._ebh_rows(e[None], ALPHA)[0], want)


def test_ville_coverage():
    rng = np.random.default_rng(8)
    raw = rng.beta(5, 2, (400, 200)) * 2 - 1
    mu = 2 * 5 / 7 - 1
    lam = S.plugin_lambdas(raw)
    miss = np.zeros(400, bool)
    for t in range(10, 201, 10):
        lo, hi = S.confidence_sequence(raw[:, :t], lam=lam[:, :t])
        miss |= (lo > mu) | (hi < mu)
    assert miss.mean() <= ALPHA + 3 * se(400)


def test_rounds_are_seeded_and_whole():
    labels = [f"c{k}" for k in range(57)]
    a = S.rounds(labels, seed=3, round_size=10)
    assert a == S.rounds(list(reversed(labels)) + labels[:5], seed=3, round_size=10)
    assert a != S.rounds(labels, seed=4, round_size=10)
    assert sorted(sum(a, [])) == sorted(labels) and [len(r) for r in a] == [10] * 5 + [7]


def test_a_run_stops_cells_and_round_trips():
    rng = np.random.default_rng(9)
    obs = {("m", "s", "big"): np.clip(rng.normal(0.4, 0.3, 300), -1, 1),
           ("m", "s", "none"): np.clip(rng.normal(0.0, 0.3, 300), -1, 1)}
    run = S.SequentialRun({"m/s": list(obs)}, alpha=ALPHA, margin=0.5)
    for r in range(10):
        for c, v in obs.items():
            if run.is_open(c):
                run.add(c, v[r * 30:(r + 1) * 30])
        run.step(last=r == 9)
    t = run.table()
    assert t["status"].tolist() == ["flagged", "clean"] and t["flagged"].tolist() == [True, False]
    assert t["n_units"].max() < 300 and t["direction"].iloc[0] == 1
    assert [d["round"] for d in run.decisions] == list(range(1, 11))
    back = S.SequentialRun.from_dict(json.loads(json.dumps(run.to_dict())))
    assert back.table().equals(t) and back.to_dict() == run.to_dict()
    with pytest.raises(S.SequentialError, match="stopped"):
        run.add(("m", "s", "big"), [0.1])


def test_bad_input_is_named():
    with pytest.raises(S.SequentialError, match="logprob or nll"):
        S.bounded([0.1], None)
    with pytest.raises(S.SequentialError, match="exceeds the bound"):
        S.bounded([3.0], 2.0)
    np.testing.assert_array_equal(S.bounded([3.0, -1.0], 2.0, clip=True), [1.0, -0.5])
    with pytest.raises(S.SequentialError, match="alpha"):
        S.ebh([1.0], 1.5)


def test_fdr_with_real_effects_in_the_family_stays_within_alpha():
    """Five null and five degrading cells per family (the nulls sharing the original with each other): the false
    discovery proportion averaged over 500 families, peeking after every round, stays within alpha + 3 SE."""
    F = 500
    x = S.null_families(F, 10, 200, seed=17)
    x[:, 5:, :] = np.clip(x[:, 5:, :] + 0.08, -1, 1)
    sim = S.simulate_sequential(x, ALPHA, margin=0.2, round_size=20)
    flagged = sim["flagged"]
    fdp = flagged[:, :5].sum(axis=1) / np.maximum(flagged.sum(axis=1), 1)
    assert fdp.mean() <= ALPHA + 3 * fdp.std(ddof=1) / math.sqrt(F)
    assert flagged[:, 5:].mean() > 0.5                                      # and it finds the effects


@pytest.mark.parametrize("clustered", [False, True])
def test_futility_keeps_null_families_within_alpha_and_stops_most_null_cells(clustered):
    """The deployed rule (futility 0.1 from a quarter of the units): stopping never raises the flag rate above
    alpha + 3 SE, and most null cells stop as futile well before the end."""
    F = 300
    x = S.null_families(F, 10, 240, clusters=clustered, seed=61 + clustered)
    sim = S.simulate_sequential(x, ALPHA, margin=0.2, round_size=20, futility=S.FUTILITY, draws=50)
    assert sim["flagged"].any(axis=1).mean() <= ALPHA + 3 * se(F)
    assert np.mean(sim["status"] == 4) > 0.8 and sim["used"].mean() < 0.5 * 240
    assert sim["used"][sim["status"] == 4].min() >= S.FUTILITY_AFTER * 240


def test_futility_rarely_stops_a_cell_with_a_moderate_effect():
    """d_z 0.5 over 130 units (the size of RM-Bench chat): the full audit flags it nearly always, and futility
    gives it up in under 5 % of the cells."""
    F = 300
    rng = np.random.default_rng(8)
    x = np.clip(rng.normal(0.075, 0.15, (F, 1, 130)), -1, 1)
    sim = S.simulate_sequential(x, ALPHA, margin=0.2, round_size=8, futility=S.FUTILITY, draws=100)
    assert np.mean(sim["status"] == 4) < 0.05 and np.mean(sim["status"] == 1) > 0.8


def test_a_run_stops_futile_cells_reproducibly_and_records_the_chance():
    rng = np.random.default_rng(12)
    obs = {("rm", "chat", "ST"): np.clip(rng.normal(0.15, 0.15, 200), -1, 1),
           ("rm", "chat", "EF"): np.clip(rng.normal(0.0, 0.15, 200), -1, 1)}

    def play(futility, seed=0):
        run = S.SequentialRun({"rm/chat": list(obs)}, margin=0.2, futility=futility, seed=seed)
        for r in range(10):
            for c, v in obs.items():
                if run.is_open(c):
                    run.add(c, v[r * 20:(r + 1) * 20])
            run.step(last=r == 9, left=200 - 20 * (r + 1))
        return run

    a, b = play(S.FUTILITY), play(S.FUTILITY)
    assert a.status == {("rm", "chat", "ST"): "flagged", ("rm", "chat", "EF"): "futile"}
    assert a.to_dict() == b.to_dict()                                          # same seed, same decisions
    rec = [s for r in a.decisions for s in r["stopped"] if s["status"] == "futile"][0]
    assert rec["decision_chance"] < S.FUTILITY and rec["n_units"] >= 50
    again = S.SequentialRun.from_dict(json.loads(json.dumps(a.to_dict())))
    assert again.to_dict() == a.to_dict() and again.futility == S.FUTILITY
    assert play(None).status[("rm", "chat", "EF")] == "exhausted"
    with pytest.raises(S.SequentialError, match="futility"):
        S.SequentialRun({"f": [("a",)]}, futility=1.0)


def test_futility_costs_a_little_power_and_keeps_the_fdr_with_real_effects():
    """Five null cells and five at d_z 0.3 per family (240 units, rounds of 20), futility off and on: the share of
    real effects flagged falls by at most five points (about two measured), the FDR stays within alpha + 3 SE,
    and the run uses far fewer units."""
    F = 200
    x = S.null_families(F, 10, 240, seed=23)
    x[:, 5:] = np.clip(x[:, 5:] + 0.3 * x.std(), -1, 1)
    off = S.simulate_sequential(x, ALPHA, margin=0.2, round_size=20)
    on = S.simulate_sequential(x, ALPHA, margin=0.2, round_size=20, futility=S.FUTILITY, draws=50)
    power = lambda s: s["flagged"][:, 5:].mean()
    assert power(on) >= power(off) - 0.05 and power(off) > 0.7
    fdp = on["flagged"][:, :5].sum(axis=1) / np.maximum(on["flagged"].sum(axis=1), 1)
    assert fdp.mean() <= ALPHA + 3 * fdp.std(ddof=1) / math.sqrt(F) + 1e-12
    assert on["used"].mean() < 0.7 * off["used"].mean()


def test_decision_chance_of_a_row_does_not_depend_on_its_neighbours():
    rng = np.random.default_rng(5)
    x = np.clip(rng.normal(0.02, 0.15, (4, 60)), -1, 1)
    together = S.decision_chance(x, 60, draws=64, seed=[11, 12, 13, 14])
    alone = [S.decision_chance(x[i], 60, draws=64, seed=11 + i)[0] for i in range(4)]
    np.testing.assert_array_equal(together, alone)
    with pytest.raises(S.SequentialError, match="finite"):
        S.decision_chance([[0.1, np.nan, 0.2]], 10)
    with pytest.raises(S.SequentialError, match="one per row"):
        S.decision_chance(x, 10, seed=[1, 2])


def test_a_resumed_run_continues_as_if_never_stopped():
    rng = np.random.default_rng(31)
    obs = {("rm", "s", n): np.clip(rng.normal(mu, 0.15, 160), -1, 1) for n, mu in (("A", 0.1), ("B", 0.0), ("C", 0.01))}

    def play(run, rounds):
        for r in rounds:
            for c, v in obs.items():
                if run.is_open(c):
                    run.add(c, v[r * 16:(r + 1) * 16])
            run.step(last=r == 9, left=160 - 16 * (r + 1))
        return run

    whole = play(S.SequentialRun({"rm/s": list(obs)}, seed=7), range(10))
    half = play(S.SequentialRun({"rm/s": list(obs)}, seed=7), range(4))
    resumed = play(S.SequentialRun.from_dict(json.loads(json.dumps(half.to_dict()))), range(4, 10))
    assert resumed.seed == 7 and resumed.to_dict() == whole.to_dict()
    assert "futile" in whole.status.values()                       # the seed mattered: draws were made


def test_a_cell_with_nothing_left_is_exhausted_before_the_last_round():
    run = S.SequentialRun({"f": [("m", "a", "EF"), ("m", "b", "EF")]}, futility=None)
    run.add(("m", "a", "EF"), [0.1, -0.1, 0.05])
    run.add(("m", "b", "EF"), [0.1, -0.1, 0.05])
    run.step(left={("m", "a", "EF"): 0})                     # b is not named: left alone
    assert run.status == {("m", "a", "EF"): "exhausted", ("m", "b", "EF"): "open"}
