"""The command line run in this process: exit code and what it printed (pytest's capsys), for tests of its errors."""


def run_main(capsys, *argv):
    "`reward_auditor.cli.main(argv)` → (exit code, captured stdout and stderr); arguments are turned into strings."
    from reward_auditor.cli import main
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr()
