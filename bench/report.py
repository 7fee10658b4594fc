"""The fixed cost of rendering reports: renderer imports, and several reports from one kernel start.

    OMP_NUM_THREADS=1 python bench/report.py [--run RUN_DIR] [--reports 3]

Without --run it first audits the shipped sample with two control scorers (small on purpose: the cost measured
is the part that does not grow with the run). Prints, each against the previous way on this machine:
1. `import papermill, nbconvert` in a fresh interpreter, with jsonschema's IRI grammar compiled (as before) and
   skipped (as `report._import_renderers` does now): CPU seconds, best of 3;
2. N renders (model, subset, model, ...) each in its own kernel (as before) and inside one `report_session()`:
   wall seconds and CPU seconds of this process plus its kernels, and whether the outputs are identical.
Timings only; nothing is asserted.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cpu_all() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def import_cost(block: bool, repeat: int = 3) -> float:
    "Best CPU seconds of a fresh interpreter importing papermill and nbconvert."
    code = ("import sys, resource\n"
            + ("sys.modules['rfc3987_syntax'] = None\n" if block else "")
            + "import papermill, nbconvert\n"
            "r = resource.getrusage(resource.RUSAGE_SELF); print(r.ru_utime + r.ru_stime)")
    base = "import resource; r = resource.getrusage(resource.RUSAGE_SELF); print(r.ru_utime + r.ru_stime)"
    best = float("inf")
    for _ in range(repeat):
        t = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        t0 = float(subprocess.run([sys.executable, "-c", base], capture_output=True, text=True, check=True).stdout)
        best = min(best, t - t0)
    return best


def outputs(nb_path: Path) -> list:
    "The outputs of an executed notebook without execution counts, timing metadata and pandas' random table ids."
    import json
    import re
    import nbformat
    nb = nbformat.read(str(nb_path), as_version=4)
    outs = [[{k: v for k, v in o.items() if k not in ("execution_count", "metadata")} for o in c.get("outputs", [])]
            for c in nb.cells if c.cell_type == "code"]
    return json.loads(re.sub(r"T_[0-9a-f]{5}", "T_id", json.dumps(outs)))


def make_run(d: Path) -> Path:
    from reward_auditor.audit import audit
    run = d / "run"
    audit("sample", ["length", "noise"], ["EF", "IU"], permutations=200, progress=False, out=run)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default=None)
    ap.add_argument("--reports", type=int, default=3)
    a = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    old, new = import_cost(False), import_cost(True)
    print(f"import papermill + nbconvert: {old:.2f} s CPU with the IRI grammar (before), {new:.2f} s without "
          f"(now): saves {old - new:.2f} s per process, ratio x{old / new:.2f}")
    from reward_auditor import report as R
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        run = Path(a.run) if a.run else make_run(d)
        R._import_renderers()
        R.render(run, out=d / "warm", name="warm")          # parent imports paid before either timing
        kinds = [("model", "subset")[k % 2] for k in range(a.reports)]
        res = {}
        for label in ("own kernel each", "one session"):
            w, c = time.perf_counter(), cpu_all()
            paths = []
            if label == "one session":
                with R.report_session():
                    for k, by in enumerate(kinds):
                        paths.append(R.render(run, by=by, out=d / "s", name=f"r{k}").notebook)
            else:
                for k, by in enumerate(kinds):
                    paths.append(R.render(run, by=by, out=d / "o", name=f"r{k}").notebook)
            res[label] = (time.perf_counter() - w, cpu_all() - c, [outputs(p) for p in paths])
            print(f"{a.reports} reports ({', '.join(kinds)}), {label:16s}: {res[label][0]:6.1f} s wall, "
                  f"{res[label][1]:6.1f} s CPU (this process + kernels), {res[label][0] / a.reports:5.2f} s wall per report")
        same = res["own kernel each"][2] == res["one session"][2]
        ow, oc = res["own kernel each"][:2]
        nw, nc = res["one session"][:2]
        print(f"ratio own kernels / one session: wall x{ow / nw:.2f}, CPU x{oc / nc:.2f}; outputs identical: {same}")


if __name__ == "__main__":
    main()
