"""Security and crash safety: untrusted files never run code, and no kill or second run leaves a wrong or stuck
result. One test (or table) per hazard; each reproduces the attack or the crash. Kill points are deterministic:
`killer.py` runs the command in a subprocess and ends it with os._exit just before (or halfway through) the
write of a chosen file."""
import errno
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_helpers import run_main, sample_jsonl

from reward_auditor import cli as ra_cli
from reward_auditor.data import load_sample

REPO = Path(__file__).resolve().parents[1]
KILLER = Path(__file__).with_name("killer.py")


def ok(argv) -> int:
    "Exit code of the command run in this process."
    return ra_cli.main([*map(str, argv)])


def killed(*argv, kill_at: str, mode: str = "before", cwd=None) -> subprocess.CompletedProcess:
    "Run the command, ending the process at the first write whose file name contains `kill_at`."
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "RA_KILL_AT": kill_at,
           "RA_KILL_MODE": mode}
    r = subprocess.run([sys.executable, str(KILLER), *map(str, argv)], env=env, cwd=cwd or REPO,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 97, f"the process was not killed at {kill_at}: rc {r.returncode}\n{r.stderr[-2000:]}"
    return r


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    "Two disjoint 24-item datasets as JSON lines."
    return sample_jsonl(tmp_path_factory.mktemp("data"), a=slice(0, 24), b=slice(24, 48))


AUDIT = ["--scorer", "length", "--perturbations", "EF,IU", "-B", "200", "--no-report", "-q"]


# ---------------------------------------------------------------------------------------------------------------
# 1. verifier-audit --golds never evaluates a gold
HOSTILE = ["__import__('os').system('touch {m}')", "exec(\"open('{m}', 'w')\")",
           "sympify(\"__import__('os').system('touch {m}')\")", "(lambda: __import__('os').system('touch {m}'))()",
           "x.__class__", "getattr(x, 'y')"]


def test_golds_are_never_evaluated(tmp_path, capsys):
    from reward_auditor.verifiers import load_golds, read_expr
    marker = tmp_path / "pwned"
    for line in HOSTILE:
        with pytest.raises(ValueError):
            read_expr(line.format(m=marker))
        with pytest.raises(ValueError):
            load_golds([line.format(m=marker)])
    golds = tmp_path / "golds.txt"
    golds.write_text("".join(line.format(m=marker) + "\n" for line in HOSTILE))
    code, err = run_main(capsys, "verifier-audit", "--golds", golds, "--verifier", "string", "--workers", "1",
                         "--rules", "identity", "--no-report")
    assert code == 2 and "golds.txt" in err and len(err.strip().splitlines()) == 1, err
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------------------
# 2, 3. the report kernel: private cwd, private kernel spec, no planted template
@pytest.fixture(scope="module")
def run_folder(small_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    assert ok(["audit", "--data", str(small_data / "a.jsonl"), "--out", str(out), *AUDIT]) == 0
    return out


def test_report_kernel_imports_nothing_from_the_run_folder(run_folder, tmp_path):
    import hashlib
    from reward_auditor import report
    marker = tmp_path / "planted-ran"
    code = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for mod in ("pandas.py", "ipykernel_launcher.py", "numpy.py", "reward_auditor.py"):
        (run_folder / mod).write_text(code)
    # what the previous version used: a predictable folder in the system temp dir, reused by every user
    tag = hashlib.sha256(sys.executable.encode()).hexdigest()[:10]
    shared = Path(tempfile.gettempdir()) / f"reward-auditor-jupyter-{tag}"
    created = not shared.exists()
    try:
        tpl = shared / "nbconvert" / "templates" / "lab"
        tpl.mkdir(parents=True, exist_ok=True)
        (tpl / "index.html.j2").write_text("<script src='http://evil.example/x.js'></script>PLANTED-TEMPLATE")
        kdir = shared / "kernels" / report.KERNEL_NAME
        kdir.mkdir(parents=True, exist_ok=True)
        victim = tmp_path / "victim.txt"
        victim.write_text("precious")
        (kdir / "kernel.json").unlink(missing_ok=True)
        (kdir / "kernel.json").symlink_to(victim)
        report.kernel_name()
        assert victim.read_text() == "precious"  # the planted symlink was not written through
        rendered = report.render(run_folder)
        page = rendered.html.read_text()
        assert "PLANTED-TEMPLATE" not in page and "evil.example" not in page
        assert "Reward model audit" in page or "<table" in page
        assert not marker.exists(), marker.read_text()
    finally:
        for mod in ("pandas.py", "ipykernel_launcher.py", "numpy.py", "reward_auditor.py"):
            (run_folder / mod).unlink(missing_ok=True)
        if created:
            import shutil
            shutil.rmtree(shared, ignore_errors=True)
        else:
            (shared / "nbconvert" / "templates" / "lab" / "index.html.j2").unlink(missing_ok=True)
            (shared / "kernels" / report.KERNEL_NAME / "kernel.json").unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------------
# 4. --resume never takes --trust-remote-code (or the model, reference, cache) from run.json
def test_resume_never_trusts_the_run_file(tmp_path, capsys, monkeypatch):
    import reward_auditor.scorers as sc
    calls = []

    def spy(spec, kind=None, **kw):
        calls.append((spec, kw.get("trust_remote_code", False)))
        raise sc.ScorerError(f"stop after recording {spec}")

    monkeypatch.setattr(sc, "load_scorer", spy)
    out = tmp_path / "shared-run"
    out.mkdir()
    saved = {**ra_cli.AUDIT_DEFAULTS, "data": "sample", "model": ["attacker/model-with-code"],
             "trust_remote_code": True, "cache": str(tmp_path / "elsewhere.sqlite"), "out": str(out)}
    (out / ra_cli.RUN_FILE).write_text(json.dumps(saved))
    code, err = run_main(capsys, "audit", "--out", out, "--resume", "-q")
    assert code == 2 and "--trust-remote-code" in err and "--model attacker/model-with-code" in err, err
    assert "--cache" in err and calls == []
    code, err = run_main(capsys, "audit", "--out", out, "--resume", "--data", "sample", "--model",
                         "attacker/model-with-code", "--cache", tmp_path / "elsewhere.sqlite", "-q")
    assert code == 2 and "--trust-remote-code" in err and calls == []
    code, err = run_main(capsys, "audit", "--out", out, "--resume", "--data", "sample", "--model",
                         "attacker/model-with-code", "--cache", tmp_path / "elsewhere.sqlite", "--trust-remote-code",
                         "-q")
    assert calls == [("attacker/model-with-code", True)]  # only when this command says so


# ---------------------------------------------------------------------------------------------------------------
# 5. render_diagnostic accepts only the known kinds
def test_render_diagnostic_refuses_unknown_kinds(tmp_path):
    from reward_auditor import report
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "notebook-ran"
    nb = {"cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "execution_count": None,
                     "outputs": [], "source": "run_dir = ''"},
                    {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": f"open({str(marker)!r}, 'w').write('x')"}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (evil / "payload_report.ipynb").write_text(json.dumps(nb))
    templates = Path(report.template_path("model_report")).parent
    kind = os.path.relpath(evil / "payload", templates)  # ../../…/payload → …/payload_report.ipynb
    (evil / report.DIAGNOSTIC_FILE).write_text(json.dumps({"kind": kind}))
    with pytest.raises(report.ReportError, match="unknown diagnostic kind"):
        report.render_diagnostic(evil, timeout=60)
    with pytest.raises(report.ReportError, match="unknown diagnostic kind"):
        report.load_diagnostic(evil)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------------------
# 6. a kill between a condition's parquet and its key cannot hand another seed's texts to the next run
def test_condition_store_survives_a_kill_between_its_two_files(small_data, tmp_path, capsys):
    out = tmp_path / "run"
    data = small_data / "a.jsonl"
    assert ok(["audit", "--data", data, "--out", out, "--seed", "0", *AUDIT]) == 0
    first = pd.read_parquet(out / "results.parquet")
    before = pd.read_parquet(out / "conditions" / "IU.parquet")
    # a seed-1 run into the same folder dies after writing IU's texts and before writing IU's key
    killed("audit", "--data", data, "--out", out, "--seed", "1", *AUDIT, kill_at="IU.json")
    assert not pd.read_parquet(out / "conditions" / "IU.parquet").equals(before)  # seed 1's texts are on disk
    assert ok(["audit", "--data", data, "--out", out, "--seed", "0", *AUDIT]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), first)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "conditions" / "IU.parquet"), before)


# ---------------------------------------------------------------------------------------------------------------
# 7. truncated or empty stored pieces are recomputed, or named
def test_truncated_pieces_are_recomputed_or_named(small_data, tmp_path, capsys):
    out = tmp_path / "run"
    data = small_data / "a.jsonl"
    assert ok(["audit", "--data", data, "--out", out, *AUDIT]) == 0
    first = pd.read_parquet(out / "results.parquet")
    # a writer killed halfway through a condition file (the previous version wrote it in place)
    killed("audit", "--data", data, "--out", out, "--seed", "1", *AUDIT, kill_at="EF.parquet", mode="half")
    raw = (out / "conditions" / "IU.parquet").read_bytes()
    (out / "conditions" / "IU.parquet").write_bytes(raw[: len(raw) // 2])
    (out / "conditions" / "EF.json").write_text("")
    assert ok(["audit", "--data", data, "--out", out, *AUDIT]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), first)
    # a truncated run.json: --resume says which file, instead of an internal error
    (out / ra_cli.RUN_FILE).write_text('{"data": "sam')
    code, err = run_main(capsys, "audit", "--out", out, "--resume", "-q")
    assert code == 2 and "run.json" in err and "internal error" not in err, err
    # a truncated result: the report names the file
    raw = (out / "items.parquet").read_bytes()
    (out / "items.parquet").write_bytes(raw[:100])
    code, err = run_main(capsys, "report", out, "-q")
    assert code == 2 and "items.parquet" in err and "internal error" not in err, err


# ---------------------------------------------------------------------------------------------------------------
# 8. a run is published atomically: no new results under an old run's manifest
def test_kill_before_the_manifest_leaves_no_mixed_run(small_data, tmp_path, capsys):
    from reward_auditor.audit import AuditError, AuditResult
    out = tmp_path / "run"
    data = small_data / "a.jsonl"
    assert ok(["audit", "--data", data, "--out", out, *AUDIT]) == 0
    (out / "report.html").write_text("<p>report of the seed-0 run</p>")
    from reward_auditor.audit import record_reports
    record_reports(out, "report.html")  # as `render` records the reports it writes beside a run
    killed("audit", "--data", data, "--out", out, "--seed", "5", "-B", "300", *AUDIT, kill_at="manifest.json")
    with pytest.raises(AuditError, match="manifest|sha256"):
        AuditResult.load(out)
    code, err = run_main(capsys, "report", out, "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert not (out / "report.html").exists()  # no report of the old run beside the new results
    # a folder whose frames come from two runs is refused too (each file's sha256 is in the manifest)
    assert ok(["audit", "--data", data, "--out", out, *AUDIT]) == 0
    other = tmp_path / "other"
    assert ok(["audit", "--data", data, "--out", other, "--scorer", "length", "--perturbations", "EF", "-B", "200",
               "--no-report", "-q"]) == 0
    (out / "results.parquet").write_bytes((other / "results.parquet").read_bytes())
    with pytest.raises(AuditError, match="mixes two runs"):
        AuditResult.load(out)


# ---------------------------------------------------------------------------------------------------------------
# 9. one run per folder
def test_second_audit_into_a_busy_folder_fails(small_data, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    # another audit holding the folder: an exclusive flock on <out>/.lock, as safety.RunLock takes it
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, time\n"
                               f"fd = os.open({str(out / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, err = run_main(capsys, "audit", "--data", small_data / "a.jsonl", "--out", out, *AUDIT)
        assert code == 2 and "in use by another run" in err and len(err.strip().splitlines()) == 1, err
        assert not (out / "results.parquet").exists()
    finally:
        holder.kill()
        holder.wait()
    assert ok(["audit", "--data", str(small_data / "a.jsonl"), "--out", str(out), *AUDIT]) == 0


# ---------------------------------------------------------------------------------------------------------------
# 10. --resume reads the same files from anywhere, and a folder never mixes two datasets
def test_resume_uses_absolute_paths_and_the_data_fingerprint(small_data, tmp_path, capsys, monkeypatch):
    import shutil
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir(), there.mkdir()
    shutil.copy(small_data / "a.jsonl", here / "data.jsonl")
    shutil.copy(small_data / "b.jsonl", there / "data.jsonl")
    out = tmp_path / "run"
    monkeypatch.chdir(here)
    assert ok(["audit", "--data", "data.jsonl", "--out", str(out), *AUDIT]) == 0
    first = pd.read_parquet(out / "results.parquet")
    saved = json.loads((out / ra_cli.RUN_FILE).read_text())
    assert saved["data"] == str((here / "data.jsonl").resolve())
    monkeypatch.chdir(there)  # another directory holds another data.jsonl: the saved path is absolute
    code, err = run_main(capsys, "audit", "--out", out, "--resume", "--data", "data.jsonl", "--scorer", "length",
                         "--perturbations", "EF,IU", "-q")
    assert code == 2 and "differs from the saved run" in err, err
    resume = ["audit", "--out", str(out), "--resume", "--data", str(here / "data.jsonl"), "--scorer", "length",
              "--perturbations", "EF,IU", "-q"]  # data, scorers and perturbations are never taken from run.json
    assert ok(resume) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), first)
    # the saved file changed since the run: refused
    shutil.copy(small_data / "b.jsonl", here / "data.jsonl")
    code, err = run_main(capsys, *resume)
    assert code == 2 and "other data" in err and "--overwrite" in err, err
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), first)
    # another dataset into the same folder: refused unless --overwrite, which leaves no stale report
    (out / "report.html").write_text("<p>old report</p>")
    from reward_auditor.audit import record_reports
    record_reports(out, "report.html")  # as `render` records it
    code, err = run_main(capsys, "audit", "--data", small_data / "b.jsonl", "--out", out, *AUDIT)
    assert code == 2 and "other data" in err, err
    assert (out / "report.html").exists()
    assert ok(["audit", "--data", str(small_data / "b.jsonl"), "--out", str(out), "--overwrite", *AUDIT]) == 0
    assert not (out / "report.html").exists()
    m = json.loads((out / "manifest.json").read_text())
    assert m["data"]["n_items"] == 24 and not pd.read_parquet(out / "results.parquet").equals(first)


# ---------------------------------------------------------------------------------------------------------------
# 11. score files: refuse what cannot score the perturbed texts; name non-finite rewards by row
def test_score_files_that_cannot_score_the_audit(small_data, tmp_path, capsys):
    from reward_auditor.scorers import PrecomputedScorer, ScorerError
    data = pd.read_json(small_data / "a.jsonl", lines=True)
    by_id = tmp_path / "by-id.csv"
    pd.DataFrame({"id": data["id"], "reward_chosen": np.linspace(1, 2, len(data)),
                  "reward_rejected": np.linspace(0, 1, len(data))}).to_csv(by_id, index=False)
    code, err = run_main(capsys, "audit", "--data", small_data / "a.jsonl", "--scorer", by_id,
                         "--perturbations", "EF,IU", "-B", "200", "--out", tmp_path / "r1", "--no-report", "-q")
    assert code == 2 and "perturbed pairs" in err and "(prompt, response, reward)" in err, err
    assert "nothing significant" not in err and not (tmp_path / "r1" / "results.parquet").exists()
    rows = [{"prompt": p, "response": r, "reward": 1.0} for p, c, r in zip(data["prompt"], data["chosen"],
                                                                            data["rejected"])]
    for bad, label in ((float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")):
        f = tmp_path / f"{label}.jsonl"
        rows[5]["reward"] = bad
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(ScorerError, match="row 6: reward = .* is not a finite number"):
            PrecomputedScorer(f)


# ---------------------------------------------------------------------------------------------------------------
# 12. protected spans: long tokens still give the spans of the previous finder (its speed is in bench/)
def test_long_tokens_keep_their_spans():
    import re
    from reward_auditor import perturbations as pt
    old_email = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    old = re.compile("|".join(f"(?:{old_email if p.endswith(old_email) else p})" for p in pt._PROTECTED_PATTERNS))

    def old_spans(text):
        spans = sorted([m.span() for m in old.finditer(text) if m.end() > m.start()] + pt._boxed_spans(text))
        merged = []
        for s, e in spans:
            if merged and s < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        return [tuple(x) for x in merged]

    rng = np.random.default_rng(0)
    dna = "".join(rng.choice(list("ACGT"), 6000))
    texts = [f"Here is the sequence: {dna}. Contact me at a.b+c@mail.example.org.",
             "x" * 5000 + "@host.org and then " + "y-" * 2000 + " end",
             "see \\[" + "a" * 3000 + "\\] and \\(" + "b" * 100 + "\\) and " + "\\boxed{" * 50 + "}",
             "\\begin{align}" + "z" * 4000 + "\\end{align} then `code_" + "q" * 3000 + "` and $x_1$ ok",
             "mail-" * 800 + "me@x.io " + "snake_case_" * 300 + " camelCaseVar H2O 3.14%"]
    for t in texts:
        assert pt.protected_spans(t) == old_spans(t)


# ---------------------------------------------------------------------------------------------------------------
# 13. bad input to every subcommand: exit 2 and one line naming the file
@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    rng = np.random.default_rng(1)
    binary = bytes(rng.integers(0, 256, 4096, dtype=np.uint8)) + b"\x00\xff\xfe"
    rec = {"id": "a", "subset": "s", "prompt": "p", "chosen": "c", "rejected": "r"}
    for suf in (".jsonl", ".json", ".csv", ".parquet", ".txt"):
        (d / f"binary{suf}").write_bytes(binary)
        (d / f"empty{suf}").write_bytes(b"")
    utf16_rows = "prompt_id,k,gold,domain,reward\n1,0,1.0,math,0.5\n"
    for suf in (".jsonl", ".json", ".csv", ".txt"):
        (d / f"utf16{suf}").write_bytes((json.dumps(rec) + "\n" if "json" in suf else utf16_rows).encode("utf-16"))
    (d / "malformed.csv").write_text('prompt_id,k,gold\n1,0,"unclosed\n2,1\n"x",,,,,,\n\x00,"a"b,c\n')
    (d / "corrupt.parquet").write_bytes(b"PAR1" + bytes(200) + b"PAR1")
    (d / "hugeint.jsonl").write_text(json.dumps({**rec, "id": 0}).replace("0", "9" * 5000, 1) + "\n")
    (d / "hugeint.json").write_text('[{"subset": "s", "results": ' + "9" * 5000 + '}]')
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (d / "surrogate.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "id": "b", "chosen": "\ud800x"}) + "\n")
    audit_dir = d / "corrupt-audit"
    audit_dir.mkdir()
    (audit_dir / "items.parquet").write_bytes(b"PAR1" + bytes(100) + b"PAR1")
    (audit_dir / "results.parquet").write_bytes(b"PAR1" + bytes(100) + b"PAR1")
    (d / "samples.csv").write_text("prompt_id,k,gold,domain,rm\n" + "".join(
        f"{i},{k},{(i + k) % 3},d{i % 2},{(i * k) % 5}\n" for i in range(6) for k in range(4)))
    return d


AUDIT_BAD = ["--scorer", "length", "--perturbations", "EF", "-B", "100", "--no-report"]
BAD_TABLE = {
    # audit --data
    "audit binary": (["audit", "--data", "{d}/binary.jsonl", *AUDIT_BAD], "binary.jsonl"),
    "audit utf16": (["audit", "--data", "{d}/utf16.jsonl", *AUDIT_BAD], "utf16.jsonl"),
    "audit empty": (["audit", "--data", "{d}/empty.jsonl", *AUDIT_BAD], "empty.jsonl"),
    "audit malformed csv": (["audit", "--data", "{d}/malformed.csv", *AUDIT_BAD], "malformed.csv"),
    "audit corrupt parquet": (["audit", "--data", "{d}/corrupt.parquet", *AUDIT_BAD], "corrupt.parquet"),
    "audit 5000-digit id": (["audit", "--data", "{d}/hugeint.jsonl", *AUDIT_BAD], "hugeint.jsonl"),
    "audit deep json": (["audit", "--data", "{d}/deep.json", *AUDIT_BAD], "deep.json"),
    "audit lone surrogate": (["audit", "--data", "{d}/surrogate.jsonl", *AUDIT_BAD], "surrogate.jsonl"),
    "audit --format xml": (["audit", "--data", "sample", "--format", "xml", *AUDIT_BAD], "xml"),
    "audit --device tpu": (["audit", "--data", "sample", "--model", "{d}", "--device", "tpu", *AUDIT_BAD], "tpu"),
    "audit --device cuda:99": (["audit", "--data", "sample", "--model", "{d}", "--device", "cuda:99", *AUDIT_BAD],
                               "cuda:99"),
    # a run already in --out: other data, or a resume that changes what is computed
    "audit other data": (["audit", "--data", "{d}/other.jsonl", *AUDIT_BAD], "other data"),
    "audit --resume other seed": (["audit", "--resume", "--data", "{d}/run-data.jsonl", *AUDIT_BAD, "--seed", "7"],
                                  "differs from the saved run"),
    "audit --resume without data": (["audit", "--resume", "--scorer", "length"], "--data"),
    # heterogeneity
    "heterogeneity binary": (["heterogeneity", "{d}/binary.json"], "binary.json"),
    "heterogeneity utf16": (["heterogeneity", "{d}/utf16.json"], "utf16.json"),
    "heterogeneity empty": (["heterogeneity", "{d}/empty.json"], "empty.json"),
    "heterogeneity deep": (["heterogeneity", "{d}/deep.json"], "deep.json"),
    "heterogeneity huge int": (["heterogeneity", "{d}/hugeint.json"], "hugeint.json"),
    "heterogeneity corrupt audit": (["heterogeneity", "{d}/corrupt-audit"], "items.parquet"),
    # protocol
    "protocol binary": (["protocol", "{d}/binary.csv"], "binary.csv"),
    "protocol utf16": (["protocol", "{d}/utf16.csv"], "utf16.csv"),
    "protocol empty": (["protocol", "{d}/empty.csv"], "empty.csv"),
    "protocol malformed csv": (["protocol", "{d}/malformed.csv"], "malformed.csv"),
    "protocol corrupt parquet": (["protocol", "{d}/corrupt.parquet"], "corrupt.parquet"),
    "protocol deep json": (["protocol", "{d}/deep.json"], "deep.json"),
    "protocol bad rewards": (["protocol", "{d}/samples.csv", "--rewards", "{d}/binary.csv"], "binary.csv"),
    # meta
    "meta binary": (["meta", "{d}/binary.csv"], "binary.csv"),
    "meta utf16": (["meta", "{d}/utf16.csv"], "utf16.csv"),
    "meta empty": (["meta", "{d}/empty.csv"], "empty.csv"),
    "meta malformed csv": (["meta", "{d}/malformed.csv"], "malformed"),
    "meta corrupt parquet": (["meta", "{d}/corrupt.parquet"], "corrupt.parquet"),
    "meta corrupt audit": (["meta", "{d}/corrupt-audit"], "results.parquet"),
    "meta deep json": (["meta", "{d}/deep.jsonl"], "deep.jsonl"),
    # verifier-audit --golds
    "golds binary": (["verifier-audit", "--golds", "{d}/binary.txt", "--no-report"], "binary.txt"),
    "golds utf16": (["verifier-audit", "--golds", "{d}/utf16.txt", "--no-report"], "utf16.txt"),
    "golds empty": (["verifier-audit", "--golds", "{d}/empty.txt", "--no-report"], "empty.txt"),
    "golds malformed csv": (["verifier-audit", "--golds", "{d}/malformed.csv", "--no-report"], "malformed.csv"),
    "golds deep jsonl": (["verifier-audit", "--golds", "{d}/deep.jsonl", "--no-report"], "deep.jsonl"),
    "golds binary jsonl": (["verifier-audit", "--golds", "{d}/binary.jsonl", "--no-report"], "binary.jsonl"),
}


@pytest.fixture(scope="module")
def finished_run(bad_files, tmp_path_factory):
    "A finished audit (beside a report of the user's) to refuse commands into."
    load_sample().iloc[:16].to_json(bad_files / "run-data.jsonl", orient="records", lines=True)
    load_sample().iloc[40:56].to_json(bad_files / "other.jsonl", orient="records", lines=True)
    out = tmp_path_factory.mktemp("finished") / "run"
    assert ok(["audit", "--data", str(bad_files / "run-data.jsonl"), *AUDIT_BAD, "--out", str(out), "-q"]) == 0
    (out / "report-mine.html").write_text("<p>the user's own notes</p>")
    return out


def _hashes(folder: Path) -> dict:
    import hashlib
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case", list(BAD_TABLE))
def test_bad_input_every_subcommand(case, bad_files, finished_run, tmp_path, capsys):
    "Exit 2 with one line naming the file, and the folder given to --out is byte-identical afterwards."
    import shutil
    argv, fragment = BAD_TABLE[case]
    argv = [a.format(d=bad_files) for a in argv]
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    before = _hashes(out)
    code, err = run_main(capsys, *argv, "--out", out, "-q")
    lines = err.strip().splitlines()
    assert code == 2, (case, code, err[-1500:])
    assert len(lines) == 1 and lines[0].startswith("reward-auditor: error: "), err[-1500:]
    assert fragment in lines[0], lines[0]
    assert _hashes(out) == before, case  # a refused command changes no file of the folder and adds none


def test_cuda_without_cuda_is_a_user_error(tmp_path, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, err = run_main(capsys, "audit", "--data", "sample", "--model", tmp_path, "--device", "cuda",
                         *AUDIT_BAD, "--out", tmp_path / "run", "-q")
    assert code == 2 and "cuda" in err and "not available" in err, err


def test_disk_full_and_read_only_are_user_errors(small_data, run_folder, tmp_path, capsys, monkeypatch):
    import pathlib
    real = pd.DataFrame.to_parquet

    def full(self, path, *a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    code, err = run_main(capsys, "audit", "--data", small_data / "a.jsonl", "--out", tmp_path / "full", *AUDIT)
    assert code == 2 and "No space left on device" in err and len(err.strip().splitlines()) == 1, err
    monkeypatch.setattr(pd.DataFrame, "to_parquet", real)

    # SQLite reports a full disk on COMMIT; the cache must say so instead of "cannot rollback"
    from reward_auditor.cache import CacheError, ScoreCache
    c = ScoreCache(tmp_path / "s.sqlite")
    c._connect().execute("PRAGMA max_page_count=8")
    with pytest.raises(CacheError, match="full"):
        c.put_many("fp", [(f"text {i}" * 50,) for i in range(2000)], np.arange(2000.0))

    def read_only(self, *a, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(pathlib.Path, "unlink", read_only)
    code, err = run_main(capsys, "report", run_folder, "-q")
    assert code == 2 and "Read-only file system" in err and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------------------------------------------------------
# 14. data-derived labels are plain text in every figure
def test_labels_are_plain_text():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.text import Text
    from reward_auditor import meta, plots
    rng = np.random.default_rng(0)
    names = ["cost $\\frac$ bad", "price $5 or $"]
    rows = [{"model": m, "subset": s, "perturbation": p, "group": g, "side": "response", "effect_size": e,
             "significant": e > 0.3, "stars": "", "accuracy_change": -e / 10, "p_adjusted": 0.01}
            for m in names for s in names for p, g in (("EF", "controlled"), ("LE", "stylized"), ("my $x$", "stylized"))
            for e in [float(rng.normal(0.3, 0.2))]]
    table = pd.DataFrame(rows)
    items = pd.DataFrame({"model": names[0], "subset": names[1], "perturbation": ["EF", "my $x$"] * 10,
                          "delta": rng.normal(size=20), "changed": True})
    figs = [plots.radar(table), plots.delta_distributions(items, model=names[0], subset=names[1]),
            plots.meta_evaluation(meta.runs_meta({names[0]: table, names[1]: table})),
            plots.correlation_heatmap(meta.perturbation_correlation(table, rows=("model", "subset"), min_rows=2))]
    import io
    for fig in figs:
        if fig is None:
            continue
        fig.savefig(io.BytesIO(), format="png")  # `cost $\frac$ bad` made the previous version fail here
        for t in fig.findobj(Text):
            if "$" in t.get_text():
                shown, is_math = t._preprocess_math(t.get_text())
                assert not is_math, t.get_text()


# ---------------------------------------------------------------------------------------------------------------
# 15. report.md and summary.txt show data as text; table.csv cannot start a formula
def test_diagnostic_files_escape_the_data(tmp_path, capsys):
    rng = np.random.default_rng(0)
    evil_model = "=HYPERLINK(\"http://evil.example\",\"x\") <img src=x onerror=alert(1)> \x1b[31m"
    evil_subset = "![p](http://evil.example/p.png) <script>alert(1)</script> | *x*"
    rows = []
    for i in range(240):
        sub = [evil_subset, "plain", "other"][i % 3]
        rows.append({"subset": sub, "scores_chosen": [float(rng.normal(1 if sub == "plain" else 0.2))],
                     "scores_rejected": [0.0], "model": evil_model})
    f = tmp_path / "results.json"
    f.write_text(json.dumps(rows))
    out = tmp_path / "het"
    code, err = run_main(capsys, "heterogeneity", f, "--n-resamples", "200", "--out", out, "--no-report")
    assert code == 0, err
    md = (out / "report.md").read_text()
    assert "<script>" not in md and "<img" not in md and "![p](" not in md and "&lt;script&gt;" in md
    txt = (out / "summary.txt").read_text()
    assert "\x1b" not in txt
    table = pd.read_csv(out / "table.csv")
    assert table["model"].str.startswith("'=").all()
    assert pd.api.types.is_numeric_dtype(table["n"])
