"""Certified metamorphic verifier audit: the real math-verify's known failures, certificates, worker processes."""
import json
import math
import os

import mpmath
import numpy as np
import pandas as pd
import pytest
import sympy

pytest.importorskip("math_verify")

from reward_auditor import verifiers as va
from reward_auditor.verifiers import (
    KNOWN_FINDINGS, MathVerify, VerifierAuditError, certify, generate_variants, load_golds, read_answer,
    run_verifiers, verifier_audit, verifier_audit_cli, wilson_ci,
)


@pytest.fixture(scope="module")
def full():
    "The default audit the CLI runs: built-in golds, all strata, the four built-in verifiers."
    return verifier_audit_cli(seed=0, workers=2)


# --- the real math-verify and its known failures -------------------------------------------------------------

@pytest.mark.parametrize("gold,answer,expected", [
    ("0", r"\boxed{1\,000\,000}", True),
    ("1000000", r"\boxed{1\,000\,000}", False),
    ("(1,2)", r"\boxed{\{1,2\}}", True),
    ("0.0000001", r"\boxed{0.0000004}", True),
    ("0", r"\boxed{x - 1 = 0}", True),
    ("42", r"\boxed{42.}", False),
    ("42", r"\boxed{42}", True),
])
def test_math_verify_latex_known_behaviour(gold, answer, expected):
    assert MathVerify("latex")(gold, answer) is expected


def test_math_verify_expr_reads_leading_number():
    mv = MathVerify("expr")
    assert mv(r"1-\frac1{\mathrm e}", r"$1+\frac1{\mathrm e}$") is True
    assert mv("42", "The answer is 43") is False


def test_full_audit_rediscovers_every_known_finding(full):
    f = full.findings
    assert len(f) == len(KNOWN_FINDINGS) >= 6
    assert f.rediscovered.all(), f[~f.rediscovered].to_string()
    # each finding is reached through a generic rule, and its variant carries a certificate of its stratum
    for row in f.itertuples():
        v = full.variants[(full.variants.gold == row.gold) & (full.variants.answer == row.answer)]
        assert len(v) == 1
        want = "proved different" if row.expected == "accept" else ("proved equal", "rule:")
        assert v.certificate.iloc[0].startswith(want)


def test_small_audit_of_findings_only():
    golds = [{"gold": "0", "kind": "integer"}, {"gold": "42", "kind": "integer"},
             {"gold": "(1,2)", "kind": "interval"}, {"gold": "0.0000001", "kind": "decimal"},
             {"gold": r"1-\frac1{\mathrm e}", "kind": "expression"}, {"gold": "1000000", "kind": "integer"}]
    rules = sorted({f["rule"] for f in KNOWN_FINDINGS} | {"identity"})
    res = verifier_audit(["math-verify-latex", "math-verify-expr"], golds=golds, rules=rules, workers=1)
    assert res.findings.rediscovered.all()
    ident = res.per_rule.query("rule == 'identity' and verifier == 'math-verify-latex'")
    assert ident.rate.item() == 0


def test_per_rule_table_shows_findings(full):
    pr = full.per_rule.set_index(["verifier", "rule"])
    assert pr.loc[("math-verify-latex", "thousands_thin_space"), "rate"] == 1.0
    assert pr.loc[("math-verify-latex", "interval_to_set"), "n_events"] >= 1
    assert pr.loc[("math-verify-latex", "period_inside_box"), "n_events"] >= 1
    # the string normaliser and the cascade take the last box, so hedging is rewarded there and not in math-verify
    assert pr.loc[("string", "hedge_two_boxes"), "rate"] == 1.0
    assert pr.loc[("math-verify-latex", "hedge_two_boxes"), "rate"] == 0.0


# --- certificates ----------------------------------------------------------------------------------------------

def _numeric(obj, x0):
    "Evaluate an exact object numerically (50 digits) at x = x0, y = x0 + 1/7, component-wise for containers."
    if isinstance(obj, sympy.Interval):
        return ("I", obj.left_open, obj.right_open, _numeric(obj.start, x0), _numeric(obj.end, x0))
    if isinstance(obj, sympy.FiniteSet):
        return ("S",) + tuple(sorted(_numeric(e, x0) for e in obj))
    if isinstance(obj, sympy.Tuple):
        return ("T",) + tuple(_numeric(e, x0) for e in obj)
    val = obj.subs({s: x0 + sympy.Rational(ord(s.name[0]) - ord("x"), 7) for s in obj.free_symbols}).evalf(50)
    return round(float(val), 12)


@pytest.fixture(scope="module")
def variants():
    return generate_variants(seed=0)


def test_every_variant_is_certified_and_nothing_dropped(variants):
    assert variants.certified.all()
    assert len(variants.attrs["dropped"]) == 0
    assert set(variants.stratum) == {"equivalent", "contract", "adversarial"}
    eq = variants[variants.stratum == "equivalent"]
    adv = variants[variants.stratum == "adversarial"]
    assert eq.certificate.str.match(r"^(proved equal|rule:)").all()
    assert adv.certificate.str.match(r"^(proved different|rule:)").all()
    assert variants.groupby("gold_id").rule.nunique().min() >= 8


def test_certificates_hold_under_independent_numeric_evaluation(variants):
    "Re-read every content variant and compare with the gold by 50-digit evaluation (not by simplify)."
    golds = load_golds().set_index("gold_id")
    checked = 0
    for v in variants[(variants.shell == "boxed") & (variants.stratum != "contract")].itertuples():
        kind = va._variant_kind(v.kind, v.rule)
        if kind == "equation":
            continue
        g, a = golds.loc[v.gold_id, "value"], read_answer(v.core, kind)
        same_at = [_numeric(g, x0) == _numeric(a, x0) for x0 in (sympy.Rational(3, 7), sympy.Rational(-11, 5))]
        if v.stratum == "equivalent":
            assert all(same_at), (v.gold, v.core)
        else:
            assert not all(same_at), (v.gold, v.core)
        checked += 1
    assert checked >= 150


def test_equation_certificate_names_the_wrong_root():
    ok, proof = certify(sympy.Integer(0), read_answer("x - 1 = 0", "equation"))
    assert ok is False and "[1]" in proof
    ok, _ = certify(sympy.Integer(1), read_answer("x - 1 = 0", "equation"))
    assert ok is None


def test_variants_are_deterministic_per_seed(variants):
    again = generate_variants(seed=0)
    pd.testing.assert_frame_equal(again, variants)
    other = generate_variants(seed=1)
    assert (other.answer != variants.answer).any()
    assert len(other) == len(variants)


# --- metrics -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 5, 37, 610])
def test_wilson_matches_statsmodels(n):
    from statsmodels.stats.proportion import proportion_confint
    ks = np.unique(np.linspace(0, n, 7).round().astype(int))
    lo, hi = wilson_ci(ks, np.full(len(ks), n))
    for k, a, b in zip(ks, lo, hi):
        sa, sb = proportion_confint(int(k), n, alpha=0.05, method="wilson")
        assert math.isclose(a, sa, abs_tol=1e-12) and math.isclose(b, sb, abs_tol=1e-12)


def test_rates_recomputed_from_verdicts(full):
    w = full.verdicts.merge(full.variants[["item", "stratum"]], on="item")
    w = w[w["applicable"]]  # a gold a configuration cannot read (its identity fails) is not counted for it
    for r in full.table.itertuples():
        sub = w[(w.verifier == r.verifier) & (w.stratum == r.stratum)]
        got = sub[sub.outcome != "no verdict"]
        event = {"equivalent": "reject", "adversarial": "accept", "contract": "accept"}[r.stratum]
        assert r.n_items == len(sub) and r.n_verdict == len(got)
        assert r.rate == pytest.approx((got.outcome == event).mean())
        assert r.rate_low <= r.rate <= r.rate_high
    assert set(full.table.query("stratum == 'contract'").metric) == {"acceptance_rate"}
    assert set(full.table.query("stratum == 'equivalent'").metric) == {"false_negative_rate"}


def test_disagreement_matrix(full):
    d = full.disagreement
    assert list(d.index) == list(d.columns) == full.verifiers
    assert np.allclose(np.diag(d), 0) and np.allclose(d, d.T)
    wide = full.verdicts.pivot(index="item", columns="verifier", values="outcome")
    assert d.loc["string", "numeric-sympy"] == pytest.approx((wide["string"] != wide["numeric-sympy"]).mean())
    assert d.loc["math-verify-latex", "math-verify-expr"] > 0.1


# --- worker processes ----------------------------------------------------------------------------------------

def _flaky(gold, answer):
    import time
    if answer == "hang":
        time.sleep(60)
    if answer == "deaf":
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                time.sleep(60)
            except BaseException:
                pass
    if answer == "die":
        os._exit(3)
    if answer == "raise":
        raise ValueError("no parse")
    return gold == answer


def test_timeouts_crashes_and_errors_are_no_verdict():
    items = pd.DataFrame({"item": [f"i{k}" for k in range(7)], "gold": ["1"] * 7,
                          "answer": ["1", "hang", "2", "die", "raise", "deaf", "1"]})
    out = run_verifiers(items, {"flaky": _flaky}, timeout=0.5, workers=2, batch_size=3, grace=1.0)
    assert out.outcome.tolist() == ["accept", "no verdict", "reject", "no verdict", "no verdict", "no verdict", "accept"]
    detail = dict(zip(out.item, out.detail))
    assert detail["i1"].startswith("timeout")
    assert "crashed" in detail["i3"]
    assert detail["i4"].startswith("error: ValueError")
    assert detail["i5"].startswith("killed")


def test_spawned_workers_run_builtin_verifiers():
    items = pd.DataFrame({"item": ["a", "b"], "gold": ["42", "42"], "answer": [r"\boxed{42}", r"\boxed{43}"]})
    out = run_verifiers(items, ["math-verify-latex", "string"], workers=1, start_method="spawn")
    assert out.outcome.tolist() == ["accept", "reject", "accept", "reject"]


# --- inputs, outputs, errors ---------------------------------------------------------------------------------

def test_user_golds_from_files(tmp_path):
    p = tmp_path / "golds.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [{"id": "a", "gold": "12"}, {"id": "b", "gold": "(1,3)", "kind": "interval"},
                                                    {"id": "c", "gold": r"\frac{2}{5}"}]) + "\n")
    g = load_golds(p)
    assert g.gold_id.tolist() == ["a", "b", "c"] and g.kind.tolist() == ["integer", "interval", "fraction"]
    (tmp_path / "g.csv").write_text("gold,kind\n7,integer\n")
    assert load_golds(tmp_path / "g.csv").value.tolist() == [7]
    (tmp_path / "g.txt").write_text("x^2+1\n\n5\n")
    assert load_golds(tmp_path / "g.txt").kind.tolist() == ["expression", "integer"]
    res = verifier_audit_cli(["string"], golds_path=str(p), strata=["adversarial"], workers=1)
    assert set(res.variants.gold_id) == {"a", "b", "c"} and set(res.table.stratum) == {"adversarial"}


@pytest.mark.parametrize("call,msg", [
    (lambda: verifier_audit(["no-such-verifier"]), "unknown verifier"),
    (lambda: generate_variants(strata="bogus"), "unknown stratum"),
    (lambda: generate_variants(rules=["nope"]), "unknown rule"),
    (lambda: load_golds([{"gold": r"\log 2", "kind": "expression"}]), "cannot be read exactly"),
    (lambda: load_golds([{"id": "a", "gold": "1"}, {"id": "a", "gold": "2"}]), "duplicate gold id"),
    (lambda: load_golds("/nonexistent/golds.jsonl"), "does not exist"),
    (lambda: MathVerify("plain"), "unknown"),
    (lambda: run_verifiers(pd.DataFrame({"item": ["a"], "gold": ["1"], "answer": ["1"]}),
                           {"anon": lambda g, a: True}, start_method="spawn"), "cannot be sent"),
    (lambda: run_verifiers(pd.DataFrame({"item": ["a"], "gold": ["1"], "answer": ["1"]}), ["string"], timeout=0),
     "timeout must be > 0"),
])
def test_errors_are_named_and_explain(call, msg):
    with pytest.raises(VerifierAuditError, match=msg):
        call()


def test_reports_and_plot(full, tmp_path):
    text = full.summary()
    assert "math-verify-latex" in text and "rediscovered: 7/7" in text
    md = full.to_markdown()
    assert md.startswith("## Verifier audit") and "Disagreement" in md and "Known math-verify findings" in md
    assert "<table" in full._repr_html_()
    assert list(full.to_frame().columns[:3]) == ["verifier", "stratum", "metric"]
    out = full.save(tmp_path / "va")
    assert {p.name for p in out.iterdir()} >= {"variants.csv", "verdicts.csv", "rates.csv", "summary.txt", "report.md"}
    back = va.VerifierAuditResult.load(out)
    assert back.summary() == text
    pd.testing.assert_frame_equal(back.findings, full.findings)
    import matplotlib
    matplotlib.use("Agg")
    for t in (full.table, full.per_rule):                                    # error bars never negative
        assert ((t.rate_low <= t.rate) & (t.rate <= t.rate_high)).all()
    pr = full.per_rule[full.per_rule.n_verdict > 0]
    assert (pr.n_events == 0).any() and (pr.loc[pr.n_events == 0, "rate_low"] == 0).all()
    assert (pr.loc[pr.n_events == pr.n_verdict, "rate_high"] == 1).all()
    fig = va.plot_verifier_audit(full)
    assert len(fig.axes) == 3


def test_cli_entry_takes_rules_as_list_or_string():
    a = verifier_audit_cli("string", strata="adversarial", rules="hedge_two_boxes, sign_flip", workers=1)
    b = verifier_audit_cli(["string"], strata=["adversarial"], rules=["hedge_two_boxes", "sign_flip"], workers=1)
    assert set(a.variants.rule) == {"hedge_two_boxes", "sign_flip"} and a.params["rules"] == ["hedge_two_boxes", "sign_flip"]
    pd.testing.assert_frame_equal(a.verdicts, b.verdicts)
    with pytest.raises(VerifierAuditError, match="unknown rule"):
        verifier_audit_cli("string", rules="no_such_rule", workers=1)


def test_plot_with_rates_of_zero():
    "A run whose rates are exactly 0 plots (a Wilson bound a rounding error above 0 once made xerr negative)."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res = verifier_audit_cli("string", strata="equivalent,adversarial", rules="identity,sign_flip", workers=1)
    t = res.table
    assert (t.n_events == 0).all() and (t.rate_low == 0).all() and (t.rate == 0).all()
    fig = va.plot_verifier_audit(res)
    assert len(fig.axes) == 2 and "no rule with a defect" in [x.get_text() for x in fig.axes[1].texts]
    plt.close(fig)


# --- intervals clustered by gold answer ------------------------------------------------------------------------

def _wilson(k, n) -> tuple[float, float]:
    return tuple(float(x) for x in wilson_ci(k, n))


def _agreeing_verdicts(failing_golds: int = 6, golds: int = 36, per_gold: int = 17) -> pd.DataFrame:
    "Verdicts in which every variant of a gold goes the same way: all variants of the first golds rejected."
    g = np.repeat(np.arange(golds), per_gold)
    return pd.DataFrame({"item": np.arange(len(g)), "verifier": "v", "stratum": "equivalent", "rule": "r",
                         "gold_id": g, "outcome": np.where(g < failing_golds, "reject", "accept")})


def _hand_cluster_interval(events, sizes, z: float = 1.959963984540054) -> tuple[float, float, float]:
    "The clustered interval written out term by term, with statsmodels' Wilson interval: (lo, hi, n_eff)."
    from statsmodels.stats.proportion import proportion_confint
    a = z * z / 2                                                  # Wilson's pseudo-successes, and as many failures
    n, k = sum(sizes), sum(events)
    p_a = (k + a) / (n + 2 * a)
    ss = sum((y - p_a * m) ** 2 for y, m in zip(events, sizes)) + (a - p_a * a) ** 2 + (0 - p_a * a) ** 2
    deff = min(max(1.0, ss / ((n + 2 * a) * p_a * (1 - p_a))), sum(m * m for m in sizes) / n)
    n_eff = n / deff
    lo, hi = proportion_confint(k / n * n_eff, n_eff, alpha=0.05, method="wilson")
    return (0.0 if k == 0 else float(lo)), (1.0 if k == n else float(hi)), n_eff


def test_rate_intervals_treat_the_variants_of_one_gold_as_one_cluster():
    t = va._rate_table(_agreeing_verdicts(), ["verifier", "stratum"]).iloc[0]
    assert (t.n_verdict, t.n_events) == (612, 102)
    # 612 variants of 36 golds that each go one way carry about the information of 36 independent trials: 6 of 36
    # (36.5 with Wilson's two agreeing pseudo-clusters in the design effect; exactly 36 before they were added)
    lo, hi, n_eff = _hand_cluster_interval([17] * 6 + [0] * 30, [17] * 36)
    assert t.n_golds == 36 and t.rate_n_eff == pytest.approx(n_eff, rel=1e-12) and 36 < n_eff < 37
    assert (t.rate_low, t.rate_high) == pytest.approx((lo, hi), abs=1e-12)
    assert (t.rate_low, t.rate_high) == pytest.approx(_wilson(6, 36), abs=2e-3)
    plain = _wilson(102, 612)
    assert t.rate_high - t.rate_low > 3 * (plain[1] - plain[0])  # measured: 0.240 against 0.059
    # variants that disagree within every gold as often as chance: the design effect floors at 1, plain Wilson
    mixed = _agreeing_verdicts().assign(outcome=lambda d: np.where(d.item % 6 == 0, "reject", "accept"))
    m = va._rate_table(mixed, ["verifier", "stratum"]).iloc[0]
    assert m.rate_n_eff == m.n_verdict and (m.rate_low, m.rate_high) == pytest.approx(_wilson(m.n_events, 612))


def test_cluster_wilson_upper_bound_rises_with_each_defect():
    "36 golds × 17 variants: no defect once gave [0, 9.6%] and one defect [0.03%, 0.92%]; the bound now only rises."
    sizes = np.full(36, 17)
    for layout in (lambda k: np.r_[k, np.zeros(35)],           # k defects in one gold
                   lambda k: np.r_[np.ones(k), np.zeros(36 - k)]):  # one defect in each of k golds
        upper = [va.cluster_wilson_ci(layout(k), sizes)[1] for k in range(7)]
        assert all(a < b for a, b in zip(upper, upper[1:])), upper
    lo0, hi0, n0 = va.cluster_wilson_ci(np.zeros(36), sizes)
    lo1, hi1, n1 = va.cluster_wilson_ci(np.r_[1, np.zeros(35)], sizes)
    assert (lo0, hi0, n0) == pytest.approx(_hand_cluster_interval([0] * 36, [17] * 36), rel=1e-9)
    assert (lo1, hi1, n1) == pytest.approx(_hand_cluster_interval([1] + [0] * 35, [17] * 36), rel=1e-9)
    assert hi0 == pytest.approx(0.0122, abs=1e-4) and hi1 == pytest.approx(0.0131, abs=1e-4)  # measured
    # one trial per cluster: the design effect is 1 and the interval is plain Wilson, at every count
    for k in range(6):
        assert va.cluster_wilson_ci(np.r_[np.ones(k), np.zeros(20 - k)], np.ones(20)) == pytest.approx(
            (*_wilson(k, 20), 20.0), abs=1e-12)


def test_cluster_wilson_design_effect_equals_statsmodels_cluster_robust_variance():
    "The design effect is statsmodels' cluster-robust variance of the mean of the trials plus Wilson's two pseudo-trials."
    sm = pytest.importorskip("statsmodels.api")
    a = 1.959963984540054 ** 2 / 2
    rng = np.random.default_rng(7)
    inside = 0
    for _ in range(5):
        sizes = rng.integers(1, 30, 40)
        events = rng.binomial(sizes, rng.beta(0.5, 3, 40))
        # the pseudo-trials: a success and a failure of weight z²/2, each a cluster of its own
        unit = np.concatenate([np.r_[np.ones(k), np.zeros(s - k)] for k, s in zip(events, sizes)] + [[1.0, 0.0]])
        weight = np.r_[np.ones(len(unit) - 2), a, a]
        groups = np.r_[np.repeat(np.arange(40), sizes), 40, 41]
        fit = sm.WLS(unit, np.ones(len(unit)), weights=weight).fit(
            cov_type="cluster", cov_kwds={"groups": groups, "use_correction": False})
        p_a = fit.params[0]
        assert p_a == pytest.approx((events.sum() + a) / (sizes.sum() + 2 * a), rel=1e-12)  # the Wilson centre
        deff = fit.bse[0] ** 2 / (p_a * (1 - p_a) / weight.sum())
        clamped = min(max(1.0, deff), float(np.sum(sizes ** 2)) / sizes.sum())
        inside += clamped == deff
        lo, hi, n_eff = va.cluster_wilson_ci(events, sizes)
        assert n_eff == pytest.approx(sizes.sum() / clamped, rel=1e-9)
        p = events.sum() / sizes.sum()
        assert (lo, hi) == pytest.approx(_wilson(p * n_eff, n_eff), abs=1e-12)
    assert inside == 5  # every draw compared the estimator itself, not a clamp


def test_default_audit_intervals_are_clustered_by_gold(full):
    w = full.verdicts[full.verdicts["applicable"]].merge(full.variants[["item", "gold_id", "stratum"]], on="item")
    wider = checked = 0
    for r in full.table.itertuples():
        sub = w[(w.verifier == r.verifier) & (w.stratum == r.stratum)]
        event = {"equivalent": "reject", "adversarial": "accept", "contract": "accept"}[r.stratum]
        got = sub[sub.outcome != "no verdict"]
        per = got.groupby("gold_id").outcome.agg(events=lambda o: int((o == event).sum()), n="size")
        assert r.n_golds == sub.gold_id.nunique() and r.n_verdict == per["n"].sum()
        if not checked and 0 < r.n_events < r.n_verdict and (per["n"] > 1).any():
            # one row by hand: its design effect and interval from the per-gold counts, independently of the module
            lo, hi, n_eff = _hand_cluster_interval(per["events"].tolist(), per["n"].tolist())
            assert r.rate_n_eff == pytest.approx(n_eff, rel=1e-9) and r.rate_n_eff < r.n_verdict
            assert (r.rate_low, r.rate_high) == pytest.approx((lo, hi), abs=1e-9)
            checked += 1
        plain = _wilson(r.n_events, r.n_verdict)
        assert r.rate_low <= plain[0] + 1e-12 and plain[1] - 1e-12 <= r.rate_high  # never narrower
        wider += r.rate_high - r.rate_low > plain[1] - plain[0] + 1e-6
    assert full.table.n_golds.max() <= full.params["n_golds"] and wider > 0 and checked == 1

def test_plot_is_as_tall_as_its_rows():
    "Two verifiers and a few rules make a short figure (it was 6 inches whatever it held); many rules a taller one."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    few = verifier_audit_cli("string,numeric-sympy", strata="adversarial", rules="hedge_two_boxes,sign_flip", workers=1)
    many = verifier_audit_cli("string,numeric-sympy", workers=1)
    small, tall = va.plot_verifier_audit(few), va.plot_verifier_audit(many)
    assert small.get_size_inches()[1] < 3.5 < tall.get_size_inches()[1] <= 9
    assert tuple(va.plot_verifier_audit(few, figsize=(8, 5)).get_size_inches()) == (8, 5)
    plt.close("all")
