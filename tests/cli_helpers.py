"""Helpers the command-line tests share: run a command in this process, and write slices of the sample as data files."""
from pathlib import Path

from reward_auditor import cli as ra_cli
from reward_auditor.data import load_sample


def run_cli(capsys, *argv):
    "The command in this process → (exit code, pytest's capture of stdout and stderr); arguments turned into strings."
    code = ra_cli.main([*map(str, argv)])
    return code, capsys.readouterr()


def run_main(capsys, *argv) -> tuple[int, str]:
    "The command in this process → (exit code, stderr)."
    code, captured = run_cli(capsys, *argv)
    return code, captured.err


def sample_jsonl(folder: Path, **slices: slice) -> Path:
    "Write each named row slice of the bundled sample to `folder/<name>.jsonl` (JSON lines); returns `folder`."
    s = load_sample()
    for name, rows in slices.items():
        s.iloc[rows].to_json(folder / f"{name}.jsonl", orient="records", lines=True)
    return folder
