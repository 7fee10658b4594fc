"""Every fenced shell line of README.md runs as written, or is marked with why a test cannot run it.

Like the bad-input table: a new README line fails here until it runs offline in seconds or is given a reason.
Lines run in a scratch folder through `main()` with `--no-report` added (the reports' rendering has tests of
its own), so the whole table costs seconds."""
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from reward_auditor.cli import main

REPO = Path(__file__).resolve().parents[1]

# a fragment of the line → why it is not run here (weights, GPUs, servers, big data or minutes)
NOT_HERE = {
    "--kind genjudge": "run in order against the stand-in judge server by test_readme_genjudge_lines_run_in_order",
    "scripts/setup.sh": "builds the virtual environment: network and minutes",
    "scripts/test.sh": "the whole test suite",
    "Skywork/Skywork-Reward-V2": "downloads a 0.6B reward model and wants a GPU",
    "--endpoint": "needs a running vLLM server",
    "hh-rlhf/": "reads the HH-RLHF download",
    "verifier-audit": "about a minute of verifier calls; tests/test_cli.py runs a quick form",
    "report runs/skywork-chat": "renders the Skywork run above",
    "reward-auditor demo": "the full demo (all perturbations, 10,000 draws); tests/test_cli.py runs it end to end",
    "--rewriter-url": "needs a rewriting LLM behind an endpoint; tests/test_store.py round-trips a pack",
    "chat-pack.parquet": "audits the pack that the rewriting LLM above writes",
    "--kind prm": "needs a process reward model's weights and step data; tests/test_prm.py runs a tiny one",
    "runs/model-a": "compares two runs of real reward models; tests/test_compare.py runs the command",
}


def shell_lines(text: str) -> list[tuple[int, str]]:
    "(README line, command) for each command of each ```bash block: continuations joined, comments dropped."
    out = []
    for m in re.finditer(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S):
        first = text[:m.start()].count("\n") + 2
        joined, start = "", None
        for i, line in enumerate(m.group(1).splitlines()):
            start = first + i if start is None else start
            joined += line.rstrip().removesuffix("\\") + " " if line.rstrip().endswith("\\") else line
            if line.rstrip().endswith("\\"):
                continue
            for cmd in re.sub(r"(^|\s)#.*$", "", joined).split("&&"):  # `setup.sh && .venv/bin/reward-auditor demo`
                if cmd.strip():
                    out.append((start, cmd.strip().removeprefix(".venv/bin/")))
            joined, start = "", None
    return out


LINES = shell_lines((REPO / "README.md").read_text(encoding="utf-8"))


def test_the_readme_has_the_lines_we_expect():
    assert any("demo" in c for _, c in LINES) and any("--data sample" in c for _, c in LINES)
    assert all(c.startswith(("reward-auditor ", "bash ", "REWARD_AUDITOR_API_KEY=")) for _, c in LINES), LINES
    assert ("reward-auditor demo" in [c for _, c in LINES])


@pytest.mark.parametrize("cmd", [c for _, c in LINES], ids=[f"README:{n}" for n, _ in LINES])
def test_readme_line_runs(cmd, tmp_path, monkeypatch, capsys):
    why = next((r for frag, r in NOT_HERE.items() if frag in cmd), None)
    if why:
        pytest.skip(why)
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(cmd)
    assert argv[0] == "reward-auditor", cmd
    rc = main(argv[1:] + ["--no-report"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "error" not in err


def test_readme_genjudge_lines_run_in_order(tmp_path, monkeypatch, capsys):
    "The generative-judge lines, verbatim, against an OpenAI-compatible stand-in serving one judge on their port."
    from urllib.parse import urlparse
    from fake_judge import FakeJudgeServer
    cmds = [c for _, c in LINES if "--kind genjudge" in c]
    assert len(cmds) >= 2
    url = urlparse(shlex.split(cmds[0])[shlex.split(cmds[0]).index("--endpoint") + 1])
    try:
        srv = FakeJudgeServer(port=url.port, judges=("length-judge",))
    except OSError as e:
        pytest.skip(f"port {url.port} is taken on this machine ({e}); the lines need it for the stand-in server")
    monkeypatch.chdir(tmp_path)
    served = []
    with srv:
        for cmd in cmds:
            before = srv.requests
            rc = main(shlex.split(cmd)[1:] + ["--no-report"])
            err = capsys.readouterr().err
            assert rc == 0, (cmd, err)
            served.append(srv.requests - before)
    assert served[0] > 0 and served[1:] == [0] * (len(cmds) - 1), served  # the later lines read stored generations
    v = pd.read_parquet(tmp_path / "runs" / "genjudge" / "verdicts.parquet")
    assert {"condition", "id", "order", "sample", "verdict"} <= set(v.columns) and "original" in set(v["condition"])


def test_every_skipped_line_is_marked_on_purpose():
    "Each reason in the table still matches a README line (a stale mark would hide a new line)."
    for frag in NOT_HERE:
        assert any(frag in c for _, c in LINES), frag


TUTORIALS = sorted((REPO / "nbs" / "tutorials").glob("*.ipynb"))


@pytest.mark.parametrize("nb", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorials_run_under_papermill_as_written(nb):
    "`papermill walkthrough.ipynb out.ipynb -p ...` needs the kernel and language in the notebook itself."
    import nbformat
    from papermill.utils import nb_kernel_name, nb_language
    node = nbformat.read(nb, as_version=4)
    assert nb_kernel_name(node) and nb_language(node) == "python"


def _stated_commands(nb: Path) -> list[str]:
    import json
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells)
    return re.findall(r"`(reward-auditor [^`]+)`", text)


@pytest.mark.parametrize("nb", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorials_stated_commands_parse(nb):
    "Each `reward-auditor ...` a tutorial tells the reader to type is a valid command line; a resume names the model."
    from reward_auditor.cli import build_parser
    for cmd in _stated_commands(nb):
        argv = shlex.split(cmd)[1:]
        ns, extra = build_parser().parse_known_args(argv)
        assert not extra, cmd
        if "--resume" in argv:
            assert "--model" in argv or "--scorer" in argv, f"{nb.name}: {cmd} (resuming needs the model again)"


def test_walkthrough_real_model_cell_is_quiet():
    "The real-model cell runs without bars and leaves the truncation warnings to the manifest's one line each."
    import json
    cells = json.loads((REPO / "nbs" / "tutorials" / "walkthrough.ipynb").read_text(encoding="utf-8"))["cells"]
    src = next("".join(c["source"]) for c in cells if "if model:" in "".join(c["source"]))
    assert "progress=False" in src and "manifest" in src
