"""Servers, files and neighbours we do not control: the API key stays with the origin the user named and out of
every message, a server's non-numbers are never rewards, rewrites are keyed by their server, a dripping server
trips the deadline, a huge answer or gzip is capped, a power tower is refused, a code-carrying .pt is a named
input error, a closed stdout ends quietly, and two processes can fill an empty user cache at once.

Every server is a stdlib ThreadingHTTPServer on 127.0.0.1 whose handlers end after a bounded number of steps."""
import gzip
import json
import math
import os
import subprocess
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-live-AbCdEf0123456789"
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@contextmanager
def serve(routes: dict, seen: list | None = None):
    """A server answering each path with `routes[path](handler, body)` → (status, headers, bytes | iterator of bytes).
    Every request's (path, headers) is appended to `seen`."""
    seen = [] if seen is None else seen

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _go(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            seen.append((self.path, dict(self.headers.items())))
            route = routes.get(self.path.split("?")[0])
            status, headers, payload = route(self, body) if route else (404, {}, b"{}")
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if isinstance(payload, (bytes, bytearray)):
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.end_headers()
            for piece in payload:  # a bounded drip: stops at the iterator's end or when the client hangs up
                try:
                    self.wfile.write(piece)
                    self.wfile.flush()
                except OSError:
                    return

        do_GET = do_POST = _go

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


def js(obj, status=200):
    return lambda h, body: (status, {"Content-Type": "application/json"}, json.dumps(obj).encode())


# ------------------------------------------------------------------------------------------------ item 2: redirects
def test_redirect_to_another_origin_is_refused_and_the_key_never_leaves(monkeypatch):
    from reward_auditor.endpoints import EndpointClient, EndpointError
    from reward_auditor.rewriters import OpenAIRewriter, RewriterError
    monkeypatch.setenv("RA_TEST_KEY", KEY)
    with serve({"/v1/models": js({"data": []}), "/v1/chat/completions": js({})}) as (elsewhere, stolen):
        moved = lambda h, body: (302, {"Location": elsewhere + h.path}, b"")
        with serve({"/v1/models": moved, "/v1/chat/completions": moved}) as (named, _):
            with pytest.raises(EndpointError, match="another origin"):
                EndpointClient(named, api_key_env="RA_TEST_KEY", retries=0).models()
            rw = OpenAIRewriter(base_url=named + "/v1", model="m", api_key=KEY, retries=0, cache=None)
            with pytest.raises(RewriterError, match="another origin"):
                rw.rewrite(["text"], "rewrite")
    assert stolen == []  # nothing reached the other host, with or without the key


def test_same_origin_redirect_is_followed(monkeypatch):
    from reward_auditor.endpoints import EndpointClient
    with serve({"/old": lambda h, b: (302, {"Location": "/v1/models"}, b""),
                "/v1/models": js({"data": [{"id": "m"}]})}) as (url, _):
        assert EndpointClient(url, retries=0).request("/old") == {"data": [{"id": "m"}]}


def test_key_over_plain_http_to_another_host_is_warned_once():
    from reward_auditor.guards import PlainHttpKeyWarning, warn_plain_http_key
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            warn_plain_http_key("http://gpu-node-12.cluster:8000/v1")
        warn_plain_http_key("http://127.0.0.1:8000/v1")
        warn_plain_http_key("https://gpu-node-13.cluster/v1")
    assert [w.category for w in seen] == [PlainHttpKeyWarning]
    assert "gpu-node-12.cluster:8000" in str(seen[0].message)


# ------------------------------------------------------------------------------------------------ item 3: masking
def test_key_echoed_by_a_server_is_masked_in_errors_lines_and_manifests(monkeypatch):
    from reward_auditor.audit import _jsonable
    from reward_auditor.cli import error_line
    from reward_auditor.endpoints import EndpointClient, EndpointError
    monkeypatch.setenv("RA_TEST_KEY", KEY)
    echo = lambda h, body: (401, {}, json.dumps({"error": "bad key", "you_sent": dict(h.headers.items())}).encode())
    with serve({"/v1/models": echo}) as (url, seen):
        with pytest.raises(EndpointError) as info:
            EndpointClient(url, api_key_env="RA_TEST_KEY", retries=0).models()
    assert seen[0][1]["Authorization"] == f"Bearer {KEY}"   # the key did go to the server the user named
    msg = str(info.value)
    assert "HTTP 401" in msg and "bad key" in msg and KEY not in msg and "AbCdEf" not in msg
    assert KEY not in error_line(info.value)
    other = "sk-proj-ZZZZ9999yyyy"  # not in any variable: caught by its shape
    line = error_line(ValueError(f"failed: Authorization: Bearer {other} at https://u:pw9secret@host/v1"))
    assert other not in line and "ZZZZ9999" not in line and "pw9secret" not in line
    manifest = _jsonable({"warnings": [f"server said {KEY}"], "rewriter": {"url": "https://u:pw9secret@h/v1"}})
    assert KEY not in json.dumps(manifest) and "pw9secret" not in json.dumps(manifest)


# --------------------------------------------------------------------------------- item 8: untrusted numbers
@pytest.fixture(scope="module")
def rm(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_models import tiny_rm
    return str(tiny_rm(tmp_path_factory.mktemp("untrusted") / "rm"))


def _classify_server(rm, bad):
    "Answers the one-input activation probe honestly; every scoring batch carries `bad` as its first reward."
    def classify(h, body):
        req = json.loads(body)
        n = len(req["input"])
        if n == 1:
            v = 1 / (1 + math.exp(-0.5)) if req.get("use_activation") else 0.5
            return 200, {}, json.dumps({"data": [{"index": 0, "probs": [v]}]}).encode()
        data = [{"index": i, "probs": [0.1 * i]} for i in range(n)]
        if isinstance(bad, dict):
            data[0].update(bad)
        else:
            data[0]["probs"] = [bad]
        return 200, {}, json.dumps({"data": data}).encode()   # json writes NaN and Infinity as vLLM's Python would
    return {"/v1/models": js({"data": [{"id": "rm", "root": rm, "max_model_len": 256}]}), "/classify": classify}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "nan", "1.5", True, None, [0.3], {"index": 1},
                                 {"index": 9}])
def test_non_numbers_from_classify_fail_the_unit_quoting_the_server(rm, bad):
    import pandas as pd
    from reward_auditor.endpoints import EndpointError, EndpointRewardScorer
    pairs = pd.DataFrame({"id": ["a", "b"], "prompt": ["Hi?", "Why?"], "chosen": ["Hello.", "Because."],
                          "rejected": ["Go.", "No."]})
    with serve(_classify_server(rm, bad)) as (url, _):
        sc = EndpointRewardScorer(url, batch_size=4, retries=0, timeout=10)
        with pytest.raises(EndpointError, match="classify") as info:
            sc.score_pairs(pairs, progress=False)
    assert "index" in str(info.value) or "results" in str(info.value)  # the server's answer is quoted


@pytest.mark.parametrize("bad", [float("nan"), "-0.5", True, 0.7])
def test_non_numbers_as_log_probabilities_are_refused(bad):
    from reward_auditor.endpoints import EndpointClient, EndpointError, EndpointJudgeScorer
    lps = [None, -0.1, bad]
    with serve({"/v1/completions": js({"choices": [{"logprobs": {"token_logprobs": lps}}]})}) as (url, _):
        judge = EndpointJudgeScorer.__new__(EndpointJudgeScorer)   # only the readout, without a tokenizer
        judge.client, judge.url, judge.served_model = EndpointClient(url, retries=0), url, "m"
        with pytest.raises(EndpointError, match="not a finite number"):
            judge._verdict_logprob([1, 2, 3], 1)


# ------------------------------------------------------------------------------- item 10: rewrite cache key
def test_a_rewrite_from_one_server_is_not_served_for_another(tmp_path):
    from reward_auditor.rewriters import OpenAIRewriter
    say = lambda who: js({"choices": [{"message": {"content": f"rewritten by {who}"}}]})
    with serve({"/v1/chat/completions": say("A")}) as (a, hits_a), serve({"/v1/chat/completions": say("B")}) as (b, hits_b):
        cache = tmp_path / "rewrites.sqlite"
        assert OpenAIRewriter(base_url=a + "/v1", model="same", cache=cache).rewrite(["x"], "do") == ["rewritten by A"]
        assert OpenAIRewriter(base_url=b + "/v1", model="same", cache=cache).rewrite(["x"], "do") == ["rewritten by B"]
        assert (len(hits_a), len(hits_b)) == (1, 1)
        # the same server and settings again: served from the cache (so the cache is in use at all) ...
        assert OpenAIRewriter(base_url=a + "/v1", model="same", cache=cache).rewrite(["x"], "do") == ["rewritten by A"]
        assert len(hits_a) == 1
        # ... but other sampling settings are another key: the server is asked again
        hot = OpenAIRewriter(base_url=a + "/v1", model="same", cache=cache, temperature=0.7)
        assert hot.rewrite(["x"], "do") == ["rewritten by A"] and len(hits_a) == 2
        # ... and so is another seed, which the request sends
        other_seed = OpenAIRewriter(base_url=a + "/v1", model="same", cache=cache, seed=1)
        assert other_seed.rewrite(["x"], "do") == ["rewritten by A"] and len(hits_a) == 3


# --------------------------------------------------------------------------- item 11: deadline and size cap
def test_a_dripping_server_trips_the_wall_clock_deadline():
    from reward_auditor.endpoints import EndpointClient, EndpointError
    drip = lambda h, body: (200, {"Content-Length": "200"}, (b" " for _ in range(200) if not time.sleep(0.1)))
    with serve({"/v1/models": drip}) as (url, _):
        t0 = time.monotonic()
        with pytest.raises(EndpointError, match="within 1 s"):
            EndpointClient(url, timeout=1.0, retries=0).models()
        assert time.monotonic() - t0 < 6   # the drip alone would take 20 s, each byte well inside a read timeout


def test_an_oversized_answer_is_refused():
    from reward_auditor.endpoints import EndpointClient, EndpointError
    big = json.dumps({"data": [{"id": "x" * (2 << 20)}]}).encode()
    chunked = lambda h, body: (200, {}, (big[i:i + 65536] for i in range(0, len(big), 65536)))  # no Content-Length
    with serve({"/v1/models": lambda h, b: (200, {}, big), "/chunked": chunked}) as (url, _):
        client = EndpointClient(url, retries=0, max_bytes=1 << 20)
        with pytest.raises(EndpointError, match="more than 1048576"):
            client.models()
        with pytest.raises(EndpointError, match="larger than 1048576"):
            client.request("/chunked")


# -------------------------------------------------------------------------- item 12: a power tower as gold
def test_verifier_audit_refuses_a_power_tower_gold_at_once(tmp_path):
    golds = tmp_path / "golds.jsonl"
    golds.write_text(json.dumps({"gold": "9^{9^{9^{9}}}"}) + "\n" + json.dumps({"gold": "2^{10}"}) + "\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "reward_auditor.cli", "verifier-audit", "--golds", str(golds),
                        "--verifier", "string", "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120, env=ENV, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "row 1" in r.stderr and "refused" in r.stderr and str(golds) in r.stderr
    assert time.monotonic() - t0 < 100


def test_every_gold_parse_runs_under_the_time_limit(monkeypatch):
    from reward_auditor import verifier_answers as V  # where load_golds reads each gold
    monkeypatch.setattr(V, "read_answer", lambda tex, kind: time.sleep(30))
    t0 = time.monotonic()
    with pytest.raises(V.VerifierAuditError, match="longer than 0.5s"):
        V.load_golds(["1"], timeout=0.5)
    assert time.monotonic() - t0 < 5


# ------------------------------------------------------------------------------------ item 13: gzip bomb
def test_a_gzip_bomb_is_capped_and_names_the_file(tmp_path, monkeypatch):
    from reward_auditor.data import DataError, load_preferences
    row = json.dumps({"prompt": "p" * 50, "chosen": "c" * 50, "rejected": "r" * 50}) + "\n"
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb") as f:
        f.write(row.encode() * 20_000)   # ~3.2 MB of valid rows in a few kB
    assert bomb.stat().st_size < 100_000
    monkeypatch.setenv("REWARD_AUDITOR_MAX_INPUT_MB", "1")
    with pytest.raises(DataError, match="gunzipped") as info:
        load_preferences(str(bomb))
    assert str(bomb) in str(info.value) and "REWARD_AUDITOR_MAX_INPUT_MB" in str(info.value)
    monkeypatch.setenv("REWARD_AUDITOR_MAX_INPUT_MB", "8")
    assert len(load_preferences(str(bomb))) == 20_000


# ---------------------------------------------------------------------- item 14: a .pt that is not weights only
class Payload:
    "Pickled by reference: a weights-only load refuses it."


def test_ldl_head_that_is_not_weights_only_is_a_named_input_error(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_models import tiny_family
    from reward_auditor.cli import is_input_error
    from reward_auditor.scorers import ScorerError, load_scorer
    folder = tiny_family(tmp_path / "ldl", "ldl-reward")
    torch.save({"weight": Payload()}, folder / "regression_layer.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ScorerError, match="regression_layer.pt is not a weights-only") as info:
            load_scorer(str(folder), device="cpu", dtype="float32")
    assert is_input_error(info.value)   # the CLI exits 2 with that line


# ---------------------------------------------------------------------------------- item 15: closed stdout
def test_a_closed_stdout_ends_quietly():
    p = subprocess.Popen([sys.executable, "-m", "reward_auditor.cli", "models"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=ENV)
    p.stdout.close()   # the reader is gone before the first line is written, as with `| head -0`
    _, err = p.communicate(timeout=120)
    assert err.decode() == "" and p.returncode in (0, 141)


# --------------------------------------------------------------------------- item 16: a shared, empty cache
UNPACK = """
import os, sys, time
from pathlib import Path
from reward_auditor import meaning_check as P
P.SentenceEmbedder = lambda folder: folder   # the unpack is under test, not the model
me, other = Path(sys.argv[1]), Path(sys.argv[2])
me.touch()
while not other.exists():
    time.sleep(0.005)
folder = P.sentence_embedder()
print((folder / "model.safetensors").stat().st_size)
"""


def test_two_processes_unpack_the_meaning_model_into_an_empty_cache(tmp_path):
    import importlib.util
    import zipfile
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the all-MiniLM-L6-v2 weights package is not installed")
    with zipfile.ZipFile(Path(list(spec.submodule_search_locations)[0]) / "model.zip") as z:
        size = z.getinfo("model.safetensors").file_size
    env = {**ENV, "REWARD_AUDITOR_CACHE": str(tmp_path / "cache")}
    for attempt in range(2):
        a, b = tmp_path / f"a{attempt}", tmp_path / f"b{attempt}"
        procs = [subprocess.Popen([sys.executable, "-c", UNPACK, str(x), str(y)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, text=True) for x, y in ((a, b), (b, a))]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [o[1][-500:] for o in outs]
        assert [o[0].strip() for o in outs] == [str(size)] * 2
    left = [p.name for p in (tmp_path / "cache").rglob("*") if p.name.endswith((".tmp", ".part", ".stale"))]
    assert left == []   # no temporary name survives


# ------------------------------------------------------------------- issue 35: keys across a cut, deep JSON
def _key_across(cut: int, key: str) -> bytes:
    "An error page whose key starts a few characters before the place a quote of `cut` characters ends."
    return json.dumps({"error": "x" * (cut - 20) + key + " and more"}).encode()


@pytest.mark.parametrize("status, cut", [(401, 500), (503, 200)])
def test_a_key_across_the_cut_of_an_endpoint_error_leaves_none_of_its_characters(monkeypatch, status, cut):
    from reward_auditor.endpoints import EndpointClient, EndpointError
    key = "rk-cut-KeyAcrossTheCut0123456789"   # not shaped like a token: masked only because it is the key
    monkeypatch.setenv("RA_TEST_KEY", key)
    with serve({"/v1/models": lambda h, b: (status, {}, _key_across(cut, key))}) as (url, _):
        with pytest.raises(EndpointError) as info:
            EndpointClient(url, api_key_env="RA_TEST_KEY", retries=0).models()
    assert "KeyAcross" not in str(info.value) and key[:8] not in str(info.value), str(info.value)[-80:]
    assert "***" in str(info.value) and f"HTTP {status}" in str(info.value)


@pytest.mark.parametrize("status, cut", [(400, 300), (200, 200)])
def test_a_key_across_the_cut_of_a_rewriter_error_leaves_none_of_its_characters(status, cut):
    from reward_auditor.rewriters import OpenAIRewriter, RewriterError
    key = "rk-cut-RewriterKeyAcross0123456789"
    with serve({"/v1/chat/completions": lambda h, b: (status, {}, _key_across(cut, key))}) as (url, _):
        rw = OpenAIRewriter(base_url=url + "/v1", model="m", api_key=key, retries=0, cache=None)
        with pytest.raises(RewriterError) as info:
            rw.rewrite(["text"], "rewrite")
    assert "RewriterKey" not in str(info.value) and key[:8] not in str(info.value), str(info.value)[-80:]


def test_a_key_cut_by_the_error_page_cap_is_masked_from_its_start(monkeypatch):
    "The error page itself is read up to 4 KiB: a key that crosses that cap arrives cut, and its start is masked."
    from reward_auditor.endpoints import EndpointClient, EndpointError
    from reward_auditor.guards import ERROR_BODY_BYTES
    key = "rk-cap-KeyAcrossTheCap0123456789"
    monkeypatch.setenv("RA_TEST_KEY", key)
    page = b" " * (ERROR_BODY_BYTES - 12) + key.encode()   # whitespace folds away: the key's start is in the quote
    with serve({"/v1/models": lambda h, b: (401, {}, page)}) as (url, _):
        with pytest.raises(EndpointError) as info:
            EndpointClient(url, api_key_env="RA_TEST_KEY", retries=0).models()
    assert key[:8] not in str(info.value) and str(info.value).endswith("***"), str(info.value)[-80:]


DEEP = b"[" * 200_000 + b"]" * 200_000


def test_deeply_nested_json_from_an_endpoint_is_exit_2_naming_the_server(capsys, tmp_path):
    from reward_auditor.cli import main
    with serve({"/v1/models": lambda h, b: (200, {"Content-Type": "application/json"}, DEEP)}) as (url, _):
        code = main(["audit", "--data", "sample", "--endpoint", url, "--perturbations", "EF", "-q", "--no-report",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{url}/v1/models" in err and "nested too deeply" in err and "--endpoint" in err
    assert "Traceback" not in err and "internal error" not in err


def test_deeply_nested_json_from_a_rewriter_is_a_rewriter_error_naming_the_server():
    from reward_auditor.rewriters import OpenAIRewriter, RewriterError
    with serve({"/v1/chat/completions": lambda h, b: (200, {}, DEEP)}) as (url, _):
        rw = OpenAIRewriter(base_url=url + "/v1", model="m", retries=0, cache=None)
        with pytest.raises(RewriterError, match="nested too deeply") as info:
            rw.rewrite(["text"], "rewrite")
    assert f"{url}/v1/chat/completions" in str(info.value)


def test_json_a_rewriter_parses_but_nests_too_deeply_is_refused_like_an_unparsable_one():
    "The rewriter caught only the parser's RecursionError: content nested 980 levels deep parsed and went on."
    from reward_auditor.rewriters import OpenAIRewriter, RewriterError
    body = b'{"choices": [{"message": {"content": ' + b"[" * 980 + b"]" * 980 + b"}}]}"
    with serve({"/v1/chat/completions": lambda h, b: (200, {}, body)}) as (url, _):
        rw = OpenAIRewriter(base_url=url + "/v1", model="m", retries=0, cache=None)
        with pytest.raises(RewriterError, match="nested too deeply") as info:
            rw.rewrite(["text"], "rewrite")
    assert f"{url}/v1/chat/completions" in str(info.value)


@pytest.mark.parametrize("answer", [b'{"data": ' + b"[" * 980 + b"]" * 980 + b"}",   # parses, too deep to quote
                                    b'{"data": "one model"}', b'{"data": [1, 2]}', b'{"data": 7}'])
def test_a_malformed_model_list_is_exit_2_naming_the_server(answer, capsys, tmp_path):
    from reward_auditor.cli import main
    with serve({"/v1/models": lambda h, b: (200, {"Content-Type": "application/json"}, answer)}) as (url, _):
        code = main(["audit", "--data", "sample", "--endpoint", url, "--perturbations", "EF", "-q", "--no-report",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and f"{url}/v1/models" in err and "--endpoint" in err, err
    assert "internal error" not in err
