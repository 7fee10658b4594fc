"""ScoreCache across processes: concurrent writers, kill -9 of a writer, pickling into a worker."""
import math
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reward_auditor.cache import CacheError, ScoreCache, key_digest

REPO = Path(__file__).resolve().parents[1]


def _writer(path, tag, n_tx, per_tx):
    cache = ScoreCache(path)
    for t in range(n_tx):
        keys = [(tag, f"text {t} {k}") for k in range(per_tx)]
        cache.put_many("fp", keys, [t * 1000.0 + k for k in range(per_tx)])


def test_round_trip_none_and_nan(tmp_path):
    c = ScoreCache(tmp_path / "c.sqlite")
    c.put_many("m", [("p", "r1"), ("p", "r2")], [0.5, float("nan")])
    a, b, missing = c.get_many("m", [("p", "r1"), ("p", "r2"), ("p", "r3")])
    assert a == 0.5 and math.isnan(b) and missing is None
    assert c.get_many("other", [("p", "r1")]) == [None]
    assert c.count("m") == 2 and c.count() == 2


def test_keys_are_exact_text():
    assert key_digest(("a b", "c")) != key_digest(("a", "b c"))
    assert key_digest(("x\u00e9",)) != key_digest(("xe\u0301",))  # no unicode normalisation
    with pytest.raises(TypeError):
        key_digest(("a", 3))


def test_two_processes_writing_at_once(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ScoreCache(path)  # create the schema first
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, tag, 40, 25)) for tag in ("A", "B")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    c = ScoreCache(path)
    assert c.count("fp") == 2 * 40 * 25
    assert c.get_many("fp", [("A", "text 39 24"), ("B", "text 7 3")]) == [39024.0, 7003.0]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_kill9_keeps_committed_transactions(tmp_path):
    path = tmp_path / "killed.sqlite"
    ScoreCache(path)
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "from reward_auditor.cache import ScoreCache\n"
        "c = ScoreCache(%r)\n"
        "t = 0\n"
        "while True:\n"
        "    c.put_many('fp', [('k', f'{t} {k}') for k in range(50)], [float(t)] * 50)\n"
        "    t += 1\n" % (str(REPO), str(path))
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            n = sqlite3.connect(path, timeout=30).execute("SELECT COUNT(*) FROM scores").fetchone()[0]
            if n >= 500:
                break
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    c = ScoreCache(path)
    n = c.count("fp")
    assert n >= 500 and n % 50 == 0  # whole transactions only
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _read_back(cache, q):
    q.put(cache.get_many("fp", [("x", "y")]))


def test_pickles_into_a_worker(tmp_path):
    c = ScoreCache(tmp_path / "p.sqlite")
    c.put_many("fp", [("x", "y")], [3.5])
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_read_back, args=(c, q))
    p.start()
    assert q.get(timeout=60) == [3.5]
    p.join(60)
    with pytest.raises(CacheError):
        import pickle
        pickle.dumps(ScoreCache(":memory:"))


def test_not_a_cache_file_is_named(tmp_path):
    bad = tmp_path / "notes.sqlite"
    bad.write_bytes(b"plain text, not sqlite " * 200)
    with pytest.raises(CacheError, match="notes.sqlite"):
        ScoreCache(bad)


def test_nested_folder_created(tmp_path):
    c = ScoreCache(tmp_path / "a" / "b" / "scores.sqlite")
    c.put_many("fp", [("q",)], [1.0])
    assert (tmp_path / "a" / "b" / "scores.sqlite").exists()


def test_a_full_disk_refuses_the_whole_batch_and_keeps_what_was_stored(tmp_path):
    "A full disk (simulated with SQLite's page limit) is one CacheError; no row of the batch stays, earlier rows do."
    c = ScoreCache(tmp_path / "scores.sqlite")
    c.put_many("fp", [("kept",)], [1.0])
    con = c._connect()
    con.execute(f"PRAGMA max_page_count = {con.execute('PRAGMA page_count').fetchone()[0]}")
    keys = [(f"answer {i} " * 40,) for i in range(2000)]
    with pytest.raises(CacheError, match="free disk space"):
        c.put_many("fp", keys, [float(i) for i in range(2000)])
    assert c.get_many("fp", [("kept",), keys[0], keys[-1]]) == [1.0, None, None]
    c.put_many("fp", [("kept",)], [2.0])               # the connection is usable after the rollback
    assert c.get_many("fp", [("kept",)]) == [2.0]


def test_every_store_names_a_file_that_is_not_sqlite_and_keeps_its_connections_per_process(tmp_path):
    "The score cache and the generation store share one SQLite base (cache.SQLiteFile): the same refusal, the same pickling."
    import pickle
    import pytest
    from reward_auditor.cache import CacheError, ScoreCache, SQLiteFile
    from reward_auditor.generations import GenerationStore, GenerationStoreError
    for cls, err in ((ScoreCache, CacheError), (GenerationStore, GenerationStoreError)):
        assert issubclass(cls, SQLiteFile)
        bad = tmp_path / f"{cls.__name__}.sqlite"
        bad.write_text("not a database " * 200)
        with pytest.raises(err, match=f"cannot open the {cls.what} {bad}"):
            cls(bad)
        store = cls(tmp_path / f"{cls.__name__}-ok.sqlite")
        assert pickle.loads(pickle.dumps(store)).path == store.path
        with pytest.raises(err, match="in-memory"):
            pickle.dumps(cls(":memory:"))
