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
