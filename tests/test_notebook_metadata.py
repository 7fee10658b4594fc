"""Every notebook names its kernel, so papermill runs it without `-k` and infers its parameters.

Before: 36 of 39 chapter notebooks (index included) had no kernelspec, and papermill said "Passed unknown
parameter: data_path" for a parameter it had applied (a `=` inside the parameter's comment hid it)."""
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(REPO.glob("nbs/**/*.ipynb")) + sorted((REPO / "reward_auditor" / "templates").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_notebook_names_a_python_kernel(path):
    spec = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("kernelspec") or {}
    assert spec.get("name") == "python3" and spec.get("language") == "python", f"{path}: kernelspec {spec}"


def test_papermill_infers_every_parameter_of_every_parameters_cell():
    papermill = pytest.importorskip("papermill")
    checked = 0
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            if "parameters" in cell.get("metadata", {}).get("tags", []):
                names = re.findall(r"^([A-Za-z_]\w*)\s*=", "".join(cell["source"]), re.M)
                inferred = papermill.inspect_notebook(str(path))
                assert set(names) <= set(inferred), f"{path}: papermill misses {set(names) - set(inferred)}"
                checked += 1
    assert checked >= 9          # the eight report templates and the walkthrough
