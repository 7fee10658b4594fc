"""A run folder is untrusted: what `--resume` may take from it, links planted in it, files of the user's beside a
run, refused commands that must change nothing, data files that share a name, and what `--drop-invalid` left out.
One test per rule; each reproduces the attack or the fault on the code before its fix."""
import hashlib
import json
import os
import sqlite3
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cli_helpers import run_main, sample_jsonl

from reward_auditor import cli as ra_cli
from reward_auditor.data import load_sample

AUDIT = ["--scorer", "length", "--perturbations", "EF", "-B", "100", "--no-report", "-q"]


def folder_hashes(folder: Path) -> dict[str, str]:
    "sha256 of every file under `folder` (hidden ones and links included), by relative path."
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder))] = "link -> " + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    "Two disjoint 12-item datasets as JSON lines."
    return sample_jsonl(tmp_path_factory.mktemp("data"), a=slice(0, 12), b=slice(40, 52))


class _Counting(BaseHTTPRequestHandler):
    "An OpenAI-compatible chat endpoint that counts the requests it gets and echoes the text."
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        text = (body.get("messages") or [{}])[-1].get("content", "")
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": text + " More detail."}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(reply.encode())

    def do_GET(self):
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(404)
        self.end_headers()

    def log_message(self, *a):
        pass


# ---------------------------------------------------------------------------------------------------------------
# 1. --resume takes nothing that decides where data or keys go; every audit option has a decision
def test_resume_of_a_foreign_folder_contacts_no_host_named_in_it(data, tmp_path, capsys, monkeypatch):
    _Counting.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user-secret-key")
    monkeypatch.setenv("REWARD_AUDITOR_API_KEY", "sk-user-secret-key")
    monkeypatch.setenv("REWARD_AUDITOR_CACHE", str(tmp_path / "user-cache"))
    url = f"http://127.0.0.1:{srv.server_port}/v1"
    foreign = tmp_path / "foreign-run"
    foreign.mkdir()
    saved = {**ra_cli.AUDIT_DEFAULTS, "data": str(data / "a.jsonl"), "scorer": ["length"],
             "perturbations": "LE-model", "rewriter_url": url, "rewriter_name": "collector", "permutations": 100,
             "report": False, "out": str(foreign)}
    (foreign / ra_cli.RUN_FILE).write_text(json.dumps(saved))
    try:
        code, err = run_main(capsys, "audit", "--out", foreign, "--resume", "-q")
        assert code == 2 and "--rewriter-url" in err and "--data" in err and "--perturbations" in err, err
        # the user gives their own data and scorer: the folder still may not pick the rewriter or perturbations
        code, err = run_main(capsys, "audit", "--out", foreign, "--resume", "--data", data / "a.jsonl",
                             "--scorer", "length", "-q")
        assert code == 2 and "--rewriter-url" in err, err
        # an endpoint named only in the folder is never contacted either
        (foreign / ra_cli.RUN_FILE).write_text(json.dumps({**saved, "perturbations": "EF", "rewriter_url": None,
                                                           "endpoint": url.removesuffix("/v1")}))
        code, err = run_main(capsys, "audit", "--out", foreign, "--resume", "--data", data / "a.jsonl",
                             "--scorer", "length", "--perturbations", "EF", "-q")
        assert code == 2 and "--endpoint" in err, err
    finally:
        srv.shutdown()
        srv.server_close()
    assert _Counting.seen == []


def _audit_destinations() -> set[str]:
    parser = ra_cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return {a.dest for a in sub.choices["audit"]._actions if a.dest != "help"}


def test_every_audit_option_has_a_resume_decision():
    "A new audit option fails this test until it is put on one list: taken, given again, or this command only."
    dests = _audit_destinations()
    undecided = sorted(dests - set(ra_cli.RESUME_DECISIONS))
    assert not undecided, f"decide what --resume does with {undecided} (cli.RESUME_TAKES / RESUME_NEEDS_AGAIN / " \
                          "RESUME_THIS_COMMAND)"
    assert not sorted(set(ra_cli.RESUME_DECISIONS) - dests)  # no decision about an option that is gone
    lists = [ra_cli.RESUME_TAKES, ra_cli.RESUME_NEEDS_AGAIN, ra_cli.RESUME_THIS_COMMAND]
    assert sum(map(len, lists)) == len(set().union(*lists))  # one decision each
    # nothing that names a host, a file, a model, code or a key is ever taken
    for name in ("data", "conditions", "perturbations", "model", "scorer", "reference", "cache", "endpoint",
                 "endpoint_model", "endpoint_tokenizer", "api_key_env", "rewriter_url", "rewriter_model",
                 "rewriter_name", "trust_remote_code", "address"):
        assert name not in ra_cli.RESUME_TAKES, name


# ---------------------------------------------------------------------------------------------------------------
# 4. a planted .lock link: refused, its target never truncated or written
def test_lock_link_is_refused_and_its_target_untouched(data, tmp_path, capsys):
    victim = tmp_path / "notes.txt"
    victim.write_text("the user's notes\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").symlink_to(victim)
    code, err = run_main(capsys, "audit", "--data", data / "a.jsonl", "--out", out, *AUDIT)
    assert code == 2 and ".lock" in err and len(err.strip().splitlines()) == 1, err
    assert victim.read_text() == "the user's notes\n"
    assert not (out / "results.parquet").exists()


# ---------------------------------------------------------------------------------------------------------------
# 5. every file written in a run folder is a regular file inside it
def test_links_in_a_run_folder_are_never_written_through(data, tmp_path, capsys):
    other_db = tmp_path / "other.sqlite"
    con = sqlite3.connect(other_db)
    con.execute("CREATE TABLE accounts (name TEXT)")
    con.commit()
    con.close()
    before = other_db.read_bytes()
    out = tmp_path / "run"
    out.mkdir()
    (out / "scores.sqlite").symlink_to(other_db)
    code, err = run_main(capsys, "audit", "--data", data / "a.jsonl", "--out", out, *AUDIT)
    assert code == 2 and "scores.sqlite" in err and len(err.strip().splitlines()) == 1, err
    assert other_db.read_bytes() == before and not Path(str(other_db) + "-wal").exists()
    # a link among the stored conditions' folder, or a planted result file, is refused the same way
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out2 = tmp_path / "run2"
    out2.mkdir()
    (out2 / "conditions").symlink_to(elsewhere, target_is_directory=True)
    code, err = run_main(capsys, "audit", "--data", data / "a.jsonl", "--out", out2, *AUDIT)
    assert code == 2 and "outside the run folder" in err, err
    assert list(elsewhere.iterdir()) == []
    out3 = tmp_path / "run3"
    out3.mkdir()
    target = tmp_path / "keep.json"
    target.write_text("{}")
    (out3 / "manifest.json").symlink_to(target)
    assert ra_cli.main(["audit", "--data", str(data / "a.jsonl"), "--out", str(out3), *AUDIT]) == 0
    assert target.read_text() == "{}"  # the link itself was replaced by the run's own file, never written through
    assert not (out3 / "manifest.json").is_symlink()


# ---------------------------------------------------------------------------------------------------------------
# 6. --out at an existing folder removes only the files this package wrote and recorded
def test_overwrite_keeps_the_users_own_reports(data, tmp_path, capsys, monkeypatch):
    from reward_auditor import report

    def fake_template(template, params, out, name, **kw):  # what execute_template writes, without a kernel
        for suffix in (".ipynb", ".html"):
            (Path(out) / f"{name}{suffix}").write_text(f"{template} {params}")
        return report.RenderedReport(Path(out) / f"{name}.ipynb", Path(out) / f"{name}.html")
    monkeypatch.setattr(report, "execute_template", fake_template)
    out = tmp_path / "run"
    assert ra_cli.main(["audit", "--data", str(data / "a.jsonl"), "--out", str(out), *AUDIT[:-2], "-q"]) == 0
    assert (out / "report.html").exists()
    assert json.loads((out / "manifest.json").read_text())["reports"] == ["report.html", "report.ipynb"]
    (out / "report-my-notes.html").write_text("<p>mine</p>")
    (out / "report_2024.ipynb").write_text("{}")
    # the same audit again: the same result bytes, which the package's report still describes, so it stays ...
    assert ra_cli.main(["audit", "--data", str(data / "a.jsonl"), "--out", str(out), *AUDIT]) == 0
    assert (out / "report.html").exists()
    # ... another seed perturbs otherwise: new results, so the package's report goes, the user's stay ...
    assert ra_cli.main(["audit", "--data", str(data / "a.jsonl"), "--out", str(out), "--seed", "1", *AUDIT]) == 0
    assert not (out / "report.html").exists() and not (out / "report.ipynb").exists()
    # ... and other data with --overwrite
    assert ra_cli.main(["audit", "--data", str(data / "b.jsonl"), "--out", str(out), "--overwrite", *AUDIT]) == 0
    assert (out / "report-my-notes.html").read_text() == "<p>mine</p>" and (out / "report_2024.ipynb").exists()
    # a manifest naming a file outside the folder (or any odd name) removes nothing
    m = json.loads((out / "manifest.json").read_text())
    (tmp_path / "precious.html").write_text("x")
    (out / "manifest.json").write_text(json.dumps({**m, "reports": ["../precious.html", "report-my-notes.html/..",
                                                                    "/etc/hostname"]}))
    assert ra_cli.main(["audit", "--data", str(data / "b.jsonl"), "--out", str(out), *AUDIT]) == 0
    assert (tmp_path / "precious.html").exists() and (out / "report-my-notes.html").exists()


# ---------------------------------------------------------------------------------------------------------------
# 7. a refused command leaves every file of the run folder byte-identical
def test_refused_audit_changes_nothing_and_the_run_still_resumes(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert ra_cli.main(["audit", "--data", str(data / "a.jsonl"), "--out", str(out), *AUDIT]) == 0
    before = folder_hashes(out)
    saved = json.loads((out / ra_cli.RUN_FILE).read_text())
    code, err = run_main(capsys, "audit", "--data", data / "b.jsonl", "--out", out, "--seed", "3", *AUDIT)
    assert code == 2 and "other data" in err, err
    assert folder_hashes(out) == before
    assert json.loads((out / ra_cli.RUN_FILE).read_text()) == saved
    code, err = run_main(capsys, "audit", "--out", out, "--resume", "--data", data / "a.jsonl", "--scorer", "length",
                         "--perturbations", "EF", "-q")
    assert code == 0, err


# ---------------------------------------------------------------------------------------------------------------
# 9. files that share a name are distinct subsets
def test_data_files_with_one_name_are_distinct_subsets(tmp_path, capsys):
    s = load_sample().drop(columns="subset")
    for sub, part in (("a", s.iloc[:10]), ("b", s.iloc[10:20])):
        (tmp_path / sub).mkdir()
        part.to_json(tmp_path / sub / "data.jsonl", orient="records", lines=True)
    s.iloc[20:30].to_json(tmp_path / "other.jsonl", orient="records", lines=True)
    files = [str(tmp_path / "a" / "data.jsonl"), str(tmp_path / "b" / "data.jsonl"), str(tmp_path / "other.jsonl")]
    frame = ra_cli.load_data(files)
    assert frame.groupby("subset").size().to_dict() == {"a/data": 10, "b/data": 10, "other": 10}
    assert ra_cli.subset_names(["x/data.jsonl", "x/data.csv"]) == ["data.jsonl", "data.csv"]
    code, err = run_main(capsys, "audit", "--data", files[0], files[0], "--out", tmp_path / "run", *AUDIT)
    assert code == 2 and "given twice" in err, err


# ---------------------------------------------------------------------------------------------------------------
# 17. --drop-invalid records what it left out: file, count, first row
def test_drop_invalid_is_recorded_in_manifest_and_results(tmp_path, capsys):
    rows = load_sample().head(12).to_dict("records")
    rows[3]["chosen"] = ""
    rows[7]["rejected"] = rows[7]["chosen"]
    path = tmp_path / "some-bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    assert ra_cli.main(["audit", "--data", str(path), "--out", str(out), "--drop-invalid", *AUDIT]) == 0
    want = {"count": 2, "first_row": 4, "field": "chosen", "problem": "is empty"}
    assert json.loads((out / "manifest.json").read_text())["data"]["dropped_invalid"] == {str(path): want}
    assert json.loads((out / "results.json").read_text())["data"]["dropped_invalid"] == {str(path): want}
    assert "2 invalid item(s)" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# issue 35, item 18: text from a run folder reaches the terminal printable only
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e"


def _unprintable(text: str) -> list[str]:
    return sorted({c for c in text if (ord(c) < 32 and c not in "\n") or 0x7f <= ord(c) <= 0x9f or c == "\u202e"})


def test_the_by_turns_refusal_prints_run_json_values_printable_only(tmp_path, capsys):
    rows = load_sample().to_dict("records")
    for i, r in enumerate(rows):
        r["history"] = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."}] if i % 2 else []
    path = tmp_path / "conv.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    assert ra_cli.main(["audit", "--data", str(path), "--out", str(out), *AUDIT]) == 0
    saved = json.loads((out / ra_cli.RUN_FILE).read_text())
    saved["cache"] = f"/tmp/scores{ESCAPES}.sqlite"
    saved["data"] = [f"conv{ESCAPES}.jsonl"]
    (out / ra_cli.RUN_FILE).write_text(json.dumps(saved))
    code, err = run_main(capsys, "report", out, "--by", "turns")
    assert code == 2 and "without --by turns" in err, err
    assert _unprintable(err.rstrip("\n")) == [] and len(err.strip().splitlines()) == 1, repr(err)
    # the very value, each control character escaped in bash's $'…' (it once lost them and named another file)
    assert r"--cache $'/tmp/scores\x1b]0;owned\x07\x1b[2J\u009b31m\u202e.sqlite'" in err
    quoted = err.split("--cache ", 1)[1].split(" --out ", 1)[0]
    back = subprocess.run(["bash", "-c", f"printf '%s' {quoted}"], capture_output=True, text=True, check=True,
                          env={**os.environ, "LC_ALL": "C.UTF-8"}).stdout
    assert back == f"/tmp/scores{ESCAPES}.sqlite"


def test_a_served_model_id_with_escapes_reaches_the_terminal_as_text():
    from reward_auditor.cli import error_line
    from reward_auditor.endpoints import served_identity, served_name
    name = served_name(f"org/evil{ESCAPES}model")
    assert name == "evil]0;owned[2J31mmodel"
    assert _unprintable(json.dumps(served_identity(f"x{ESCAPES}", {"root": ESCAPES}, None, "tok"),
                                   ensure_ascii=False)) == []
    assert _unprintable(error_line(ValueError(f"server said {ESCAPES}\nsecond line"))) == []


def test_a_url_password_across_the_cut_of_a_resume_refusal_leaves_none_of_its_characters(tmp_path, capsys):
    "run.json's saved endpoint is quoted when resuming needs it again: masked first, then cut at 300 characters."
    out = tmp_path / "run"
    out.mkdir()
    url = "https://user:" + "p" * 280 + "Pa55wordAcrossTheCut@gpu-node/v1"   # the password crosses character 300
    (out / ra_cli.RUN_FILE).write_text(json.dumps({"endpoint": url}))
    code, err = run_main(capsys, "audit", "--out", out, "--resume", "--scorer", "length", "-q")
    assert code == 2 and "resuming needs" in err and "--endpoint" in err, err
    assert "Pa55" not in err and "ppppp" not in err, err[-200:]
