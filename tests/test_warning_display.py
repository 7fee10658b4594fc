"Warnings the package raises are shown as `Category: message`, without a file, line number or source line."
import os
import subprocess
import sys
import warnings
from pathlib import Path

import reward_auditor

PKG = Path(reward_auditor.__file__).resolve().parent
REPO = PKG.parent


def test_own_warnings_show_the_message_only():
    "By file (data.py:787), by category (DataWarning raised for a user's frame) and foreign warnings untouched."
    from reward_auditor.data import DataWarning
    fmt = warnings.formatwarning
    assert fmt("3 rows dropped", UserWarning, str(PKG / "data.py"), 787, "warnings.warn(...)") == "UserWarning: 3 rows dropped\n"
    assert fmt("dropped", DataWarning, "/tmp/ipykernel_1/cell.py", 3, "x = 1") == "DataWarning: dropped\n"
    other = fmt("deprecated", FutureWarning, "/site-packages/pandas/core/frame.py", 12, "df.append(x)")
    assert other == warnings._formatwarning_orig("deprecated", FutureWarning, "/site-packages/pandas/core/frame.py",
                                                 12, "df.append(x)")
    assert "frame.py:12" in other and "df.append(x)" in other


def test_stacklevel_warning_from_package_code(tmp_path):
    "A package function warning with stacklevel=2 points at the user's cell; the display still drops the source."
    code = (
        "import warnings, reward_auditor\n"
        f"src = 'def f():\\n    import warnings\\n    warnings.warn(\"too few items\", UserWarning, stacklevel=2)\\n'\n"
        f"ns = {{}}; exec(compile(src, {str(PKG / 'made_up.py')!r}, 'exec'), ns)\n"
        "ns['f']()\n"
        "warnings.warn('a user warning', UserWarning)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "always"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    lines = r.stderr.splitlines()
    assert lines[0] == "UserWarning: too few items", r.stderr
    assert lines[1].endswith("UserWarning: a user warning") and lines[1].startswith("<string>:5"), r.stderr


def test_command_line_warnings_fold_at_100_columns_and_say_each_thing_once(tmp_path):
    "Warnings ran to ~450 characters and the note on N0 repeated on every subset's line; now folded, the note once."
    from reward_auditor.cli_common import unfold_warnings, warning_text
    long = "subset chat (overlap): " + ", ".join(f"X{i} (N0 = {i}, p >= 0.5, flagged only at p <= 0.0125)" for i in range(8))
    folded = warning_text(long)
    assert all(len(line) <= 100 for line in folded.splitlines()) and len(folded.splitlines()) > 3
    assert all(line.startswith("reward-auditor: ") for line in folded.splitlines())      # grep still finds them
    assert unfold_warnings(folded) == f"reward-auditor: warning: {long}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "reward_auditor.cli", "audit", "--data", "sample", "--model", "overlap",
                        "--perturbations", "EF,PH,IU,IW", "--no-report", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("too few changed items to detect anything") >= 2, r.stderr   # several families lack them
    assert unfold_warnings(r.stderr).count("N0 = pairs whose score margin changed") == 1, r.stderr
    assert max(len(line) for line in r.stderr.splitlines()) <= 100, r.stderr


def test_the_audits_own_warnings_carry_their_category_so_the_command_line_can_hold_them_back():
    "The command line held the audit's warnings back by matching their text, which missed a new one; now by category."
    import pytest
    from reward_auditor.audit import RunWarning, audit
    from reward_auditor.data import load_sample
    with pytest.warns(RunWarning) as seen:
        res = audit(load_sample().head(20), "overlap", ["IW"], permutations=100, progress=False)
    said = [str(w.message) for w in seen if issubclass(w.category, RunWarning)]
    assert said and set(said) <= set(res.manifest["warnings"])          # each also in the manifest, said after the run
