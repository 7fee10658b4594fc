"The walkthrough runs top to bottom without the shared data and without a model, as 'Run All' would."
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_walkthrough_runs_without_shared_data(tmp_path):
    import papermill as pm
    from reward_auditor.report import kernel_name
    nb = REPO / "nbs" / "tutorials" / "walkthrough.ipynb"
    out = tmp_path / "walkthrough.ipynb"
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env_path) if p)
    try:
        # no shared data and no meaning check (nbdev-test runs the notebook with it): the fallbacks, not the embedder
        params = {"shared_dir": str(tmp_path / "absent"), "permutations": 200, "semantic_check": False}
        pm.execute_notebook(str(nb), str(out), parameters=params,
                            kernel_name=kernel_name(), language="python", cwd=str(nb.parent), progress_bar=False)
    finally:
        os.environ["PYTHONPATH"] = env_path
    cells = json.loads(out.read_text())["cells"]
    text = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/markdown", ""))
                   for c in cells for o in c.get("outputs", []))
    assert "80 pairs from the bundled sample" in text
    assert "This is the bundled sample" in text and "RM-Bench" not in text      # the prose follows the data
    assert "real-model audit is skipped" in text
    assert not any(o.get("output_type") == "error" for c in cells for o in c.get("outputs", []))
