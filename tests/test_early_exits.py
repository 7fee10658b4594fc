"""Mistakes said before any work: a Ray address with no cluster behind it, an option given by a prefix of its
name, and a failing rewriter endpoint named by where its URL came from (the flag or the environment)."""
import argparse
import http.server
import socket
import socketserver
import threading

import pytest

from reward_auditor import cli, cli_audit
from reward_auditor import rewriters as R
from reward_auditor.cli import build_parser

from cli_helpers import run_cli as _run


def _closed_port() -> int:
    "A port on 127.0.0.1 that nothing listens on (bound once by this process, then released)."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- full option names only

def _parsers(p):
    yield p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                yield from _parsers(sub)


def test_every_parser_takes_full_option_names_only():
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 10                      # the top parser and each subcommand
    assert all(p.allow_abbrev is False for p in parsers), [p.prog for p in parsers if p.allow_abbrev]


@pytest.mark.parametrize("argv, want", [
    (["audit", "--data", "sample", "--scorer", "length", "--permutation", "100"],
     "`audit` has no option --permutation: did you mean --permutations?"),
    (["demo", "--permutation", "100"], "`demo` has no option --permutation: did you mean --permutations?"),
    (["audit", "--data", "sample", "--scorer", "length", "--perturbation=EF"],
     "`audit` has no option --perturbation: did you mean --perturbations?"),
])
def test_a_prefix_of_an_option_is_refused(capsys, tmp_path, argv, want):
    out = tmp_path / "run"
    rc, res = _run(capsys, *argv, "--out", out)
    assert rc == 2 and want in res.err, res.err
    assert not out.exists()                       # refused before anything was written


def test_the_full_option_name_still_works(capsys, tmp_path):
    ns = build_parser().parse_args(["audit", "--data", "sample", "--scorer", "length", "--permutations", "100"])
    assert ns.permutations == 100
    rc, res = _run(capsys, "audit", "--data", "sample", "--scorer", "length", "--perturbations", "EF",
                   "--permutations", "100", "--limit", "12", "--no-report", "--out", tmp_path / "run", "-q")
    assert rc == 0, res.err
    assert (tmp_path / "run").is_dir()


# ---------------------------------------------------------------- the Ray address, checked first

@pytest.fixture
def nothing_loads(monkeypatch):
    "Fail loudly if the audit gets as far as loading scorers: the address check must come first."
    def refuse(args):
        raise AssertionError("scorers were loaded before the Ray address was checked")
    monkeypatch.setattr(cli_audit, "make_scorers", refuse)  # where `run_audit` looks it up


def _audit(tmp_path, *extra):
    return ["audit", "--data", "sample", "--scorer", "length", "--perturbations", "EF", "--permutations", "100",
            "--out", tmp_path / "run", "--engine", "ray", *extra]


def test_address_auto_without_a_cluster_exits_2_before_loading(capsys, tmp_path, monkeypatch, nothing_loads):
    ray = pytest.importorskip("ray")
    services = pytest.importorskip("ray._private.services")
    if ray.is_initialized():
        pytest.skip("this process is connected to Ray already, so ray.init and the address are not used")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # no cluster on this machine, whatever else runs on it: no address file and no GCS process
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset())
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)
    rc, res = _run(capsys, *_audit(tmp_path, "--address", "auto"))
    assert rc == 2, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "--address" in lines[0] and "no running Ray cluster" in lines[0], res.err
    assert "internal error" not in res.err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_unreachable_host_port_exits_2_naming_address(capsys, tmp_path, monkeypatch, nothing_loads, scheme):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("this process is connected to Ray already, so ray.init and the address are not used")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    port = _closed_port()
    rc, res = _run(capsys, *_audit(tmp_path, "--address", f"{scheme}127.0.0.1:{port}"))
    assert rc == 2, res.err
    assert f"cannot reach the Ray cluster at {scheme}127.0.0.1:{port}" in res.err and "(--address)" in res.err
    assert not (tmp_path / "run").exists()


def test_a_listening_address_passes_the_check(monkeypatch):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("this process is connected to Ray already, so ray.init and the address are not used")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    from reward_auditor.engines import EngineError, check_ray_address
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        assert check_ray_address(f"127.0.0.1:{port}") == f"127.0.0.1:{port}"
        assert check_ray_address(f"ray://127.0.0.1:{port}") == f"127.0.0.1:{port}"
        cli.check_engine_address({"engine": "ray", "address": f"127.0.0.1:{port}"})       # no error
    cli.check_engine_address({"engine": "local", "address": "127.0.0.1:1"})             # not used: not checked
    assert check_ray_address(None) is None and check_ray_address("local") is None         # a local instance
    closed = _closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed}")                              # read as ray.init reads it
    for given in (None, "auto"):
        with pytest.raises(EngineError, match=f"cannot reach the Ray cluster at 127.0.0.1:{closed}"):
            check_ray_address(given)
    assert check_ray_address("local") is None
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(EngineError, match="port that is not a number"):
        check_ray_address("127.0.0.1:http")


# ---------------------------------------------------------------- the rewriter's advice names its source

class _Unauthorized(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"error": "bad key"}'
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_rewriter_url_from_the_flag_is_named_as_the_flag(monkeypatch, tmp_path):
    monkeypatch.setenv("REWARD_AUDITOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    port = _closed_port()
    rw = cli.make_rewriter({"rewriter_url": f"http://127.0.0.1:{port}/v1", "rewriter_name": "m"}, ["LE-model"])
    rw.retries, rw.timeout = 0, 2
    with pytest.raises(R.RewriterError) as e:
        rw.rewrite(["some answer"], "make it longer")
    msg = str(e.value)
    assert "cannot reach" in msg and msg.endswith("check --rewriter-url"), msg
    assert "OPENAI_BASE_URL" not in msg


def test_rewriter_url_from_the_environment_is_named_as_the_variable(monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    rw = R.OpenAIRewriter(model="m", api_key="k", retries=0, timeout=2, cache=None)
    with pytest.raises(R.RewriterError) as e:
        rw.rewrite(["x"], "y")
    assert str(e.value).endswith("check OPENAI_BASE_URL") and "--rewriter-url" not in str(e.value)


def test_a_refused_key_names_where_the_key_came_from(monkeypatch):
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        rw = R.OpenAIRewriter(base_url=url, model="m", retries=0, timeout=5, cache=None, url_from="--rewriter-url")
        with pytest.raises(R.RewriterError) as e:
            rw.rewrite(["x"], "y")
        assert "HTTP 401" in str(e.value) and str(e.value).endswith("check OPENAI_API_KEY"), str(e.value)
        rw = R.OpenAIRewriter(base_url=url, model="m", api_key="k2", retries=0, timeout=5, cache=None)
        with pytest.raises(R.RewriterError) as e:
            rw.rewrite(["x"], "y")
        assert str(e.value).endswith("check the api_key argument") and "OPENAI" not in str(e.value)
    finally:
        srv.shutdown()
        srv.server_close()


# ---------------------------------------------------------------- impossible numbers

@pytest.mark.parametrize("argv, said", [
    (["heterogeneity", "--example", "--min-power", "nan"], "min-power must be a power in (0, 1), got nan"),
    (["heterogeneity", "--example", "--v-target", "-1"], "v-target must be a Cramér's V in (0, 1], got -1.0"),
    (["verifier-audit", "--timeout", "0"], "timeout must be a number of seconds > 0, got 0.0"),
    (["audit", "--data", "sample", "--scorer", "length", "--margin", "inf"], "margin must be a number >= 0 or 'auto'"),
    (["audit", "--data", "sample", "--scorer", "length", "--alpha", "nan"], "alpha must be a number strictly between"),
    (["audit", "--data", "sample", "--scorer", "length", "--sequential", "--futility", "nan"], "futility must be"),
    (["leaderboard", "--example", "--permutations", "99"], "sign flips must be a whole number >= 100, got 99"),
])
def test_an_impossible_number_is_refused_before_any_work(capsys, tmp_path, argv, said):
    rc, out = _run(capsys, *argv, "--out", tmp_path / "o")
    assert rc == 2 and said in out.err and out.err.count("\n") == 1, out.err
    assert not (tmp_path / "o").exists()


def test_the_audit_refuses_an_infinite_margin_from_python_too():
    from reward_auditor.audit_settings import AuditError, AuditSettings
    with pytest.raises(AuditError, match="margin must be a number >= 0"):
        AuditSettings(margin=float("inf"))
