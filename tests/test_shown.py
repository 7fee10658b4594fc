"""Outside text on a terminal: `guards.shown` keeps joiners and drops controls; printed commands name the same files."""
import json
import os
import re
import subprocess

import pytest

from reward_auditor.guards import shell_quoted, shown

NAMES = ["my  data.jsonl", "tab\there.jsonl", "esc\x1b[2J\u202e.jsonl", "nl\nname.jsonl", "it's  x.jsonl",
         "می\u200cخواهم.jsonl"]
RAW = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _bash_words(command: str) -> list[str]:
    "The words bash reads from `command` (its quoting, escapes and $'…' included)."
    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + command], capture_output=True, text=True, check=True,
                         env={**os.environ, "LC_ALL": "C.UTF-8"})
    return out.stdout.split("\0")[:-1]


def test_shown_keeps_the_zero_width_joiners_and_drops_bidi_and_control_characters():
    "U+200C/U+200D spell Persian and Indic names and were removed; marks, overrides, isolates and C0/C1 still go."
    persian = "می\u200cخواهم"                       # without its ZWNJ it is another spelling
    assert shown(f"model {persian}") == f"model {persian}"
    assert shown("क्\u200dष") == "क्\u200dष"
    assert shown("a\u200eb\u200fc\u202ad\u202ee\u2066f\u2069g\u061ch\x1bi\x9bj\x07k") == "abcdefghijk"
    assert shown("one\nline\ttwo") == "one line two"


def test_split_command_names_the_very_files_of_the_run(tmp_path):
    "Paths were run through shown() first: 'my  data.jsonl' became 'my data.jsonl' in the printed command."
    from reward_auditor.report import split_command
    run = tmp_path / "run  two"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"data": NAMES, "model": ["m  \t1"], "seed": 0}), encoding="utf-8")
    cmd = split_command(run)
    assert not RAW.search(cmd) and "\n" not in cmd, repr(cmd)   # nothing raw reaches a terminal
    words = _bash_words(cmd.removesuffix(" (with the run's other options)"))
    assert words[words.index("--data") + 1:][:len(NAMES)] == NAMES
    assert words[words.index("--model") + 1] == "m  \t1"
    assert words[words.index("--cache") + 1] == str(run / "scores.sqlite")
    assert words[words.index("--out") + 1] == str(run) + "-by-turns"


def test_the_error_line_that_quotes_the_split_command_keeps_the_names():
    "The CLI's error line folded every run of spaces, so a quoted 'my  data.jsonl' named another file there too."
    from reward_auditor.cli import error_line
    from reward_auditor.report import ReportError
    quoted = " ".join(shell_quoted(n) for n in NAMES)
    line = error_line(ReportError(f"audit the split: reward-auditor audit --data {quoted}\n  --by turns"))
    assert not RAW.search(line), repr(line)
    assert line.endswith(f"--data {quoted} --by turns")
    assert _bash_words(line.split("--data ", 1)[1].removesuffix(" --by turns")) == NAMES


@pytest.mark.parametrize("value", ["plain.jsonl", "a b", "x\\y", "'", "\\\x1b'", "\u200b", "\u0085\u2028"])
def test_shell_quoted_round_trips_through_bash(value):
    q = shell_quoted(value)
    assert not RAW.search(q)
    assert _bash_words(q) == [value]


def test_plain_lines_and_shown_text_drop_the_same_invisible_characters():
    "Terminal and .txt lines (plain_line) hide what shown() hides: zero-width space, LRM/RLM, BOM; joiners stay."
    from reward_auditor.guards import shown
    from reward_auditor.safety import plain_line
    hidden = "\u200b\u200e\u200f\ufeff\u061c\u2060\u202e\u2067\x1b\x9b"
    text = f"model{hidden}-a\u200cb\u200dc"
    assert plain_line(text) == shown(text) == "model-a\u200cb\u200dc"
    assert plain_line("two\nlines\tkept") == "two\nlines\tkept"   # a multi-line summary keeps its layout
    assert plain_line("a\u2028b\u2029c") == "abc" and shown("a\u2028b\u2029c") == "a b c"  # shown: one line
