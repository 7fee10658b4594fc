"""Run `reward_auditor.cli` with its arguments and end the process (exit code 97) at a chosen write.

RA_KILL_AT: a piece of the target file's name (the first write to a file whose name contains it is the kill
point). RA_KILL_MODE: `before` (die before the file is written or moved into place) or `half` (write half of
its bytes, then die: a writer killed mid-write). Writes are seen wherever they happen: DataFrame.to_parquet,
Path.write_text/write_bytes, and os.replace (the last step of an atomic write).

RA_KILL_AFTER_COMMITS=k: instead, the process sends itself SIGKILL right after its k-th transaction to the score
cache (an engine commits one unit per transaction, a scorer one chunk): a driver killed in the middle of a run, with
no clean-up, no atexit, no finally."""
import os
import pathlib
import signal
import sys

import pandas as pd

AT = os.environ.get("RA_KILL_AT", "\0")  # "\0" never occurs in a file name: no write is a kill point
MODE = os.environ.get("RA_KILL_MODE", "before")


def _hit(path) -> bool:
    "Whether `path` is the file to die at (a buffer, e.g. Parquet bytes made in memory, is never it)."
    return isinstance(path, (str, os.PathLike)) and AT in os.path.basename(os.fspath(path))


def _halve(path) -> None:
    data = pathlib.Path(path).read_bytes()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def _die():
    sys.stdout.flush()
    os._exit(97)


_to_parquet = pd.DataFrame.to_parquet
_write_text = pathlib.Path.write_text
_write_bytes = pathlib.Path.write_bytes
_replace = os.replace


def to_parquet(self, path=None, *a, **kw):
    if _hit(path):
        if MODE == "half":
            _to_parquet(self, path, *a, **kw)
            _halve(path)
        _die()
    return _to_parquet(self, path, *a, **kw)


def write_text(self, data, *a, **kw):
    if _hit(self):
        if MODE == "half":
            _write_text(self, data[: len(data) // 2], *a, **kw)
        _die()
    return _write_text(self, data, *a, **kw)


def write_bytes(self, data):
    if _hit(self):
        if MODE == "half":
            _write_bytes(self, data[: len(data) // 2])
        _die()
    return _write_bytes(self, data)


def replace(src, dst, *a, **kw):
    if _hit(dst):
        if MODE == "half":
            _halve(src)
            _replace(src, dst, *a, **kw)
        _die()
    return _replace(src, dst, *a, **kw)


pd.DataFrame.to_parquet = to_parquet
pathlib.Path.write_text = write_text
pathlib.Path.write_bytes = write_bytes
os.replace = replace

COMMITS = int(os.environ.get("RA_KILL_AFTER_COMMITS", "0"))
if COMMITS:
    from reward_auditor.cache import ScoreCache
    _put_many, _done = ScoreCache.put_many, [0]

    def put_many(self, *a, **kw):
        n = _put_many(self, *a, **kw)
        _done[0] += 1
        if _done[0] >= COMMITS:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return n

    ScoreCache.put_many = put_many

if __name__ == "__main__":
    from reward_auditor.cli import main
    sys.exit(main(sys.argv[1:]))
