"""What the terminal shows besides results: one line per kind of warning, no source lines, no bars under -q."""
import warnings

from reward_auditor.cli import PROG, quiet_bars, warning_lines


def _warn_three_times(what: str):
    for i in range(3):
        warnings.warn(f"{what}: {i + 1} of 10 texts", UserWarning)


def test_warnings_are_one_line_per_kind_without_source(capsys):
    restore = warning_lines()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            _warn_three_times("scorer a")       # one place, three counts: said once
            warnings.warn("another kind", UserWarning)
    finally:
        restore()
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{PROG}: warning: scorer a: 1 of 10 texts", f"{PROG}: warning: another kind"], err
    assert warnings.showwarning is not None and "WarningLines" not in type(warnings.showwarning).__name__


def _bar_shown(quiet: bool, capsys) -> bool:
    "Whether a bar a library makes after the CLI started reaches the terminal."
    restore = quiet_bars(quiet=quiet)
    try:
        import tqdm.auto
        bar = tqdm.auto.tqdm(range(3), desc="Loading weights")
        list(bar)
        bar.close()
    finally:
        restore()
    return "Loading weights" in capsys.readouterr().err


def test_bars_show_without_quiet_and_not_with_it(capsys):
    "The control first: without -q the same bar is seen, so its absence under -q is the silencing, not the capture."
    assert _bar_shown(False, capsys)
    assert not _bar_shown(True, capsys)
    assert _bar_shown(False, capsys)   # restored afterwards


def test_quiet_silences_bars_of_libraries_imported_later(capsys):
    restore = quiet_bars(quiet=True)
    try:
        import tqdm.auto
        bar = tqdm.auto.tqdm(range(3), desc="Loading weights")   # what a library binds after the CLI started
        list(bar)
        bar.close()
    finally:
        restore()
    assert "Loading weights" not in capsys.readouterr().err
    import tqdm.auto
    assert not getattr(tqdm.auto.tqdm, "__name__", "").startswith("Silent")
