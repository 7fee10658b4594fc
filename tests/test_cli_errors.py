"""Errors a command-line user can act on: flags instead of Python advice, the subcommand and its closest option named."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from cli_helpers import run_cli as _run


@pytest.fixture
def qa_csv(tmp_path):
    f = tmp_path / "qa.csv"
    pd.DataFrame({"question": ["2+2?", "3+3?"], "good": ["4", "6"], "bad": ["5", "7"]}).to_csv(f, index=False)
    return f


def test_missing_column_lists_the_files_columns_and_suggests_columns_flag(capsys, qa_csv, tmp_path):
    rc, out = _run(capsys, "perturb", "--data", qa_csv, "--perturbations", "EF", "--out", tmp_path / "c.jsonl")
    assert rc == 2
    assert "columns found: question, good, bad)" in out.err and "--columns prompt=" in out.err
    assert "columns={" not in out.err


def test_columns_flag_renames_the_files_columns(capsys, qa_csv, tmp_path):
    rc, out = _run(capsys, "perturb", "--data", qa_csv, "--columns", "prompt=question,chosen=good,rejected=bad",
                   "--perturbations", "EF", "--out", tmp_path / "c.jsonl", "-q")
    assert rc == 0, out.err
    conds = pd.read_json(tmp_path / "c.jsonl", lines=True, dtype=False)
    assert set(conds["chosen"]) == {"4", "6"} and set(conds["prompt"].str.strip("*")) == {"2+2?", "3+3?"}
    rc, out = _run(capsys, "perturb", "--data", qa_csv, "--columns", "prompt", "--out", tmp_path / "d.jsonl")
    assert rc == 2 and "FIELD=COLUMN" in out.err


@pytest.mark.parametrize("argv, want", [
    (["audit", "--dataset", "sample"], "`audit` has no option --dataset: did you mean --data?"),
    (["audit", "--batch_size", "3"], "`audit` has no option --batch_size: did you mean --batch-size?"),
    (["demo", "--bogus"], "`demo` has no option --bogus: see `reward-auditor demo --help`"),
])
def test_unknown_flag_names_the_subcommand_and_the_closest_option(capsys, argv, want):
    rc, out = _run(capsys, *argv)
    assert rc == 2 and want in out.err, out.err


def test_report_of_a_data_file_suggests_auditing_it(capsys, qa_csv):
    rc, out = _run(capsys, "report", qa_csv)
    assert rc == 2 and f"audit --data {qa_csv}" in out.err and "results.parquet" not in out.err


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_heterogeneity_reads_tables_like_the_other_subcommands(capsys, tmp_path, suffix):
    f = tmp_path / f"rm-a{suffix}"
    t = pd.DataFrame({"subset": ["a"] * 20 + ["b"] * 20, "correct": [True] * 30 + [False] * 10})
    t.to_csv(f, index=False) if suffix == ".csv" else t.to_parquet(f)
    rc, out = _run(capsys, "heterogeneity", f, "--n-resamples", "99")
    assert rc == 0, out.err
    # the row of rm-a against scipy on the 2 x 2 table subset x correct: [[20, 0], [10, 10]]
    row = next(line.split() for line in out.out.splitlines() if line.split()[:1] == ["rm-a"])
    table = np.array([[20, 0], [10, 10]])
    chi2, p, dof, _ = sps.chi2_contingency(table)                          # Yates-corrected, as for any 2 x 2
    v = sps.contingency.association(table, method="cramer")
    assert (row[1], row[3]) == ("40", str(dof))
    assert math.isclose(float(row[2]), chi2, rel_tol=5e-3) and math.isclose(float(row[4]), p, rel_tol=5e-3)
    assert math.isclose(float(row[5]), v, rel_tol=5e-3) and row[-3:] == ["b", "a", "0.5"]
