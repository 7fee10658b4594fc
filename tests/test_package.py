"The package's top level: fast to import, main entry points reachable as `ra.audit(...)`."
import subprocess
import sys
from pathlib import Path


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_import_is_light():
    out = _run("import sys, reward_auditor; print(sorted(m for m in ('pandas', 'scipy', 'torch', 'matplotlib') "
               "if m in sys.modules))")
    assert out == "[]"


def test_entry_points_and_modules():
    out = _run(
        "import reward_auditor as ra\n"
        "res = ra.audit(ra.load_preferences('sample'), [ra.load_scorer('noise')], ['EF'], seed=0, "
        "permutations=100, progress=False)\n"
        "import reward_auditor.audit as A\n"
        "from reward_auditor import audit\n"
        "print(type(res).__name__, A is ra.audit is audit, A.AuditResult is ra.AuditResult, "
        "'<table' in res._repr_html_(), callable(ra.heterogeneity))")
    assert out == "AuditResult True True True True"


def test_submodule_first_then_call():
    out = _run("import reward_auditor.audit, reward_auditor as ra; print(callable(ra.audit), ra.__version__ != '')")
    assert out == "True True"


def test_notebook_extra_renders_progress_bars_in_jupyter():
    "tqdm draws its bars in Jupyter only with ipywidgets; `pip install reward-auditor[notebook]` brings it."
    import tomllib
    extras = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(d.startswith("ipywidgets") for d in extras["notebook"])
