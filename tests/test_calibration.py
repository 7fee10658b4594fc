"""Calibration of σ(margin) and length confounds: cross-checks against scikit-learn and brute force, simulated
calibration, determinism across processes, score files, run folders, results.json and the CLI."""
import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import special

from reward_auditor import calibration as ca


def _calibrated(n, scale=1.0, seed=0):
    "Margins of pairs whose winner is drawn from σ(m) (a calibrated RM), times `scale`."
    r = np.random.default_rng(seed)
    m = r.normal(0.5, 1.5, n)
    return scale * np.where(r.random(n) < special.expit(m), m, -m)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_brier_and_log_loss_equal_sklearn_on_symmetrized_pairs(seed):
    from sklearn.metrics import brier_score_loss, log_loss
    m = np.random.default_rng(seed).normal(0.3, 3.0, 400)
    prob, y = ca.symmetrize(m)
    assert ca.brier(m) == pytest.approx(brier_score_loss(y, prob), abs=1e-12)
    assert ca.log_loss(m) == pytest.approx(log_loss(y, prob), abs=1e-12)


def _ece_brute(m, n_bins=10):
    "ECE by visiting every symmetrized prediction and every bin."
    prob, y = ca.symmetrize(m)
    edges = [0.5 + k * 0.5 / n_bins for k in range(n_bins + 1)]
    total = 0.0
    for k in range(n_bins):
        hits, confs = [], []
        for p, t in zip(prob, y):
            conf = max(p, 1 - p)
            pred = 1.0 if p > 0.5 else 0.0 if p < 0.5 else 0.5
            if edges[k] <= conf < edges[k + 1] or (k == n_bins - 1 and conf == 1.0):
                hits.append(pred * t + (1 - pred) * (1 - t))
                confs.append(conf)
        if hits:
            total += len(hits) / len(prob) * abs(np.mean(hits) - np.mean(confs))
    return total


@pytest.mark.parametrize("seed", range(4))
def test_ece_equals_brute_force(seed):
    r = np.random.default_rng(seed)
    m = np.r_[r.normal(0, 2.5, 150), 0.0, 0.0, 50.0, -50.0, special.logit([0.55, 0.7, 0.95])]
    assert ca.ece(m) == pytest.approx(_ece_brute(m), abs=1e-12)
    assert ca.ece(m, 5) == pytest.approx(_ece_brute(m, 5), abs=1e-12)


def test_stats_worked_example():
    m = [2, 1, 0.5, -0.5, 3, -1.5]
    assert ca.brier(m) == pytest.approx(0.214535, abs=1e-6)
    assert ca.log_loss(m) == pytest.approx(0.606391, abs=1e-6)
    assert ca.ece(m) == pytest.approx(0.249677, abs=1e-6)


def test_simulated_calibration_band_and_temperature():
    m = _calibrated(3000, seed=11)
    assert ca.ece(m) <= ca.ece_band(m, seed=11)
    fit = ca.fit_temperature(m)
    assert fit.low < 1 < fit.high and abs(fit.temperature - 1) < 0.12
    fit3 = ca.fit_temperature(3 * m)
    assert fit3.temperature == pytest.approx(3 * fit.temperature, rel=1e-8)
    assert fit3.low > 2 and abs(fit3.temperature - 3) < 0.35
    assert ca.ece(3 * m) > ca.ece_band(3 * m, seed=11)          # three times too confident: outside the band


def test_bootstrap_is_seeded_and_bitwise_repeatable_across_processes():
    code = ("import numpy as np; from reward_auditor import calibration as ca;"
            "m = np.random.default_rng(5).normal(0.4, 2, 300); g = np.arange(300) // 3;"
            "print(repr(ca.ece_interval(m, seed=9, groups=g)), ca.resample_weights(300, 50, 9, g).tobytes().hex()[:64])")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "1", "PATH": "", **_pythonpath()}).stdout
    m = np.random.default_rng(5).normal(0.4, 2, 300)
    g = np.arange(300) // 3
    here = f"{ca.ece_interval(m, seed=9, groups=g)!r} {ca.resample_weights(300, 50, 9, g).tobytes().hex()[:64]}\n"
    assert other == here
    assert ca.ece_interval(m, seed=9) != ca.ece_interval(m, seed=10)


def _pythonpath():
    import os
    return {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "OMP_NUM_THREADS", "HOME")}


def test_paired_loss_test_flips_clusters():
    before = np.array([2.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    after = before - np.array([.2, .18, .22, -.05, -.02, .1, .12, .0])
    g = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    flat = ca.loss_change_tests(before, after[:, None])
    clustered = ca.loss_change_tests(before, after[:, None], groups=g)
    assert clustered.n[0] == 3 and flat.n[0] == 8
    assert clustered.pvalue[0] >= 0.5 > flat.pvalue[0]       # three signs cannot make a small p


def _score_file(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_score_file_pairs_clusters_and_lengths(tmp_path):
    f = _score_file(tmp_path / "rm.jsonl", [
        {"id": "a", "subset": "chat", "scores_chosen": [1.0], "scores_rejected": [0.0, 2.0, -1.0],
         "chosen": ["xxxx"], "rejected": ["yy", "yyyyyy", "y"]},
        {"id": "b", "subset": "chat", "scores_chosen": 0.5, "scores_rejected": 0.2, "length_chosen": 10,
         "length_rejected": 12}])
    p = ca.score_file_pairs(f)
    assert len(p) == 4 and p["cluster"].tolist() == ["a", "a", "a", "b"]
    np.testing.assert_allclose(p["margin"], [1.0, -1.0, 2.0, 0.3])
    np.testing.assert_allclose(p["len_rejected"], [2, 6, 1, 12])
    res = ca.calibration(f, n_boot=50)
    row = res.table.iloc[0]
    assert row["n"] == 4 and row["n_clusters"] == 2 and row["condition"] == "orig"


@pytest.mark.parametrize("row,field", [({"scores_chosen": "x", "scores_rejected": 1}, "scores_chosen"),
                                       ({"scores_chosen": 1, "scores_rejected": [1, None]}, "scores_rejected"),
                                       ({"scores_chosen": 1, "scores_rejected": 0, "chosen": 5}, "chosen")])
def test_bad_score_file_is_one_line_exit_2(tmp_path, capsys, row, field):
    from reward_auditor.cli import main
    f = _score_file(tmp_path / "bad.jsonl", [{"scores_chosen": 1, "scores_rejected": 0}, row])
    assert main(["calibration", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.jsonl" in err and "row 2" in err and f"`{field}`" in err


def test_cli_example_writes_a_diagnostic_folder(tmp_path, capsys):
    from reward_auditor.cli import main
    from reward_auditor.report import load_diagnostic
    out = tmp_path / "cal"
    assert main(["calibration", "--example", "--n-boot", "100", "--out", str(out), "--no-report"]) == 0
    text = capsys.readouterr().out
    assert "rm-a is overconfident" in text and "picking the longer answer" in text
    back = load_diagnostic(out)
    assert isinstance(back, ca.CalibrationResult)
    pd.testing.assert_frame_equal(back.table, pd.read_parquet(out / "table.parquet"))
    assert set(pd.read_csv(out / "table.csv")["model"]) == {"rm-a", "rm-b"}
    assert back.findings == ca.calibration(
        [str(p) for p in sorted((ca.Path(ca.__file__).parent / "examples" / "calibration").glob("*.jsonl"))],
        n_boot=100).findings


def test_audit_run_results_json_and_folder(tmp_path):
    import reward_auditor as ra
    res = ra.audit("sample", ["length", "overlap"], ["EF", "LE"], seed=0, permutations=500, progress=False,
                   out=tmp_path / "run")
    js = json.loads((tmp_path / "run" / "results.json").read_text())["calibration"]
    cal = ra.calibration(res)
    assert js["table"] == json.loads(json.dumps(cal.to_json()["table"]))
    assert {r["condition"] for r in js["table"]} == {"orig", "EF", "LE"}
    again = ra.calibration(str(tmp_path / "run"))
    pd.testing.assert_frame_equal(again.table, cal.table)
    pd.testing.assert_frame_equal(again.length, cal.length)
    t = cal.table
    n_items = res.items["id"].nunique()
    assert (t.loc[(t["subset"] == "all") & (t["condition"] == "orig"), "n"] == n_items).all()
    # the length control scorer rewards length: its margin follows the length difference
    L = cal.length.set_index(["model", "subset"])
    assert L.loc[("length", "all"), "rho_margin_length"] > 0.5
    assert L.loc[("length", "all"), "rho_reward_length"] > 0.5


def test_run_folder_with_a_foreign_items_file_is_refused(tmp_path):
    import reward_auditor as ra
    ra.audit("sample", ["length"], ["EF"], seed=0, permutations=200, progress=False, out=tmp_path / "a")
    items = pd.read_parquet(tmp_path / "a" / "items.parquet")
    items.assign(margin_before=items["margin_before"] + 1).to_parquet(tmp_path / "a" / "items.parquet")
    with pytest.raises(ca.CalibrationError, match="mixes two runs"):
        ca.calibration(tmp_path / "a")


def test_family_numbers_equal_the_per_condition_functions_bit_for_bit():
    """`calibration` computes each condition's numbers from bins, confidences and weights made once per family; they
    must equal, bit for bit, the public one-condition functions called on their own (the path it took before)."""
    rng = np.random.default_rng(3)
    n = 60
    m = _calibrated(n, 2.0, seed=4)
    pairs = pd.DataFrame({"id": [f"p{i}" for i in range(n)], "margin": m, "group_id": [f"g{i // 3}" for i in range(n)]})
    after = {"A": m + rng.normal(0, 0.5, n), "B": 0.5 * m, "C": np.where(np.arange(n) < 5, np.nan, m - 0.3)}
    items = pd.concat([pd.DataFrame({"model": "rm", "subset": "s", "id": pairs["id"], "perturbation": k,
                                     "margin_before": m, "margin_after": v, "changed": True,
                                     "group_id": pairs["group_id"]}) for k, v in after.items()], ignore_index=True)
    res = ca.calibration(type("Run", (), {"items": items, "texts": None, "manifest": {}})(), seed=7, n_boot=200,
                         permutations=200)
    t = res.table.set_index("condition")
    ok = np.isfinite(after["C"])                       # a pair missing under one condition leaves the family
    M = {"orig": m[ok], **{k: v[ok] for k, v in after.items()}}
    groups = pairs["group_id"].to_numpy()[ok]
    fseed = ca._family_seed(7, "rm", "s")
    W = ca.resample_weights(int(ok.sum()), 200, fseed, groups)
    boot0 = ca._weighted_ece(W, M["orig"])
    for k, (name, mk) in enumerate(M.items()):
        row, fit = t.loc[name], ca.fit_temperature(mk, groups)
        boot = ca._weighted_ece(W, mk)
        want = {"ece": ca.ece(mk), "ece_band": ca.ece_band(mk, 0.95, 200, fseed + 1 + k),
                "ece_adaptive": ca.ece(mk, method="adaptive"), "brier": ca.brier(mk), "log_loss": ca.log_loss(mk),
                "temperature": fit.temperature, "temperature_low": fit.low, "temperature_high": fit.high,
                "ece_scaled": ca.ece(mk / fit.temperature),
                **dict(zip(("ece_low", "ece_high"), ca.basic_interval(ca.ece(mk), boot, floor=0.0)))}
        if name != "orig":
            want.update(zip(("d_ece_low", "d_ece_high"), ca.basic_interval(ca.ece(mk) - ca.ece(M["orig"]), boot - boot0)))
        for col, v in want.items():
            assert np.float64(row[col]).tobytes() == np.float64(v).tobytes(), (name, col, row[col], v)
        rel = res.reliability[res.reliability["condition"] == name].drop(columns=["model", "subset", "condition"])
        pd.testing.assert_frame_equal(rel.reset_index(drop=True), ca.reliability_bins(mk), check_exact=True)
    assert (t["n"] == ok.sum()).all() and (t["n_dropped"] == (~ok).sum()).all() and (t["n_clusters"] == 19).all()  # g0 gone


def test_a_margin_that_overflows_is_refused_naming_its_row(tmp_path, capsys):
    # 59 ordinary pairs and one whose finite scores differ by more than the largest float: it was dropped unsaid
    rows = [{"scores_chosen": float(i % 7), "scores_rejected": float(i % 5)} for i in range(59)]
    f = _score_file(tmp_path / "big.jsonl", rows + [{"scores_chosen": 1e308, "scores_rejected": -1e308}])
    with pytest.raises(ca.CalibrationError, match="row 60: the margin .* overflows"):
        ca.calibration(str(f), n_boot=10)
    from reward_auditor.cli import main
    assert main(["calibration", str(f), "--n-boot", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "big.jsonl" in err and "row 60" in err


def test_a_run_folders_settings_are_checked_unless_given(tmp_path):
    import reward_auditor as ra
    ra.audit("sample", ["length"], ["EF"], seed=0, permutations=200, progress=False, out=tmp_path / "a")
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    m["settings"].update(permutations=1e9, seed="abc")
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ca.CalibrationError, match=r"manifest.json: field settings\.(seed|permutations)"):
        ca.calibration(tmp_path / "a", n_boot=10)
    with pytest.raises(ca.CalibrationError, match=r"settings\.permutations must be a whole number"):
        ca.calibration(tmp_path / "a", n_boot=10, seed=0)
    res = ca.calibration(tmp_path / "a", n_boot=10, seed=3, permutations=50)   # given: the recorded ones are unused
    assert res.settings["permutations"] == 50 and res.settings["seed"] == 3
