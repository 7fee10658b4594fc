"""The spec layer: each spec form becomes its object, a bad spec is one error naming its field, and the Python API
given the command line's specs writes the same results, byte for byte."""
import sys
from pathlib import Path

import pandas as pd
import pytest

import reward_auditor as ra
from reward_auditor import cli as ra_cli
from reward_auditor import specs
from reward_auditor.specs import SpecError

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import tiny_rm  # noqa: E402


@pytest.fixture(scope="module")
def rm(tmp_path_factory):
    return tiny_rm(tmp_path_factory.mktemp("rm") / "rm")


@pytest.fixture
def pairs(tmp_path):
    "Two small data files (one subset each) and a score file."
    s = ra.load_sample().drop(columns="subset")
    for name, part in (("chat", s.iloc[:12]), ("code", s.iloc[12:24])):
        part.to_json(tmp_path / f"{name}.jsonl", orient="records", lines=True)
    return tmp_path


def test_the_api_and_the_cli_write_the_same_results(rm, pairs, tmp_path, capsys):
    "The same specs through `reward-auditor audit` and through `ra.audit`: byte-identical results.parquet."
    files = [str(pairs / "chat.jsonl"), str(pairs / "code.jsonl")]
    argv = ["audit", "--data", *files, "--limit", "16", "--scorer", "overlap", "--model", f"rm={rm}",
            "--perturbations", "EF,PH", "-B", "200", "--engine", "local", "--no-report", "-q", "--out", str(tmp_path / "cli")]
    data, scorers, engine = {"paths": files, "limit": 16}, ["overlap", {"model": str(rm), "name": "rm"}], {"name": "local"}
    args = ra_cli.resolve_audit_args(vars(ra_cli.build_parser().parse_args(argv)))  # what the command line parses into
    assert (ra_cli.data_spec(args), ra_cli.scorer_specs(args), ra_cli.engine_spec(args)) == (data, scorers, engine)
    assert ra_cli.rewriter_spec(args) is None
    code = ra_cli.main(argv)
    assert code == 0, capsys.readouterr().err
    ra.audit(data, scorers, ["EF", "PH"], permutations=200, engine=engine, out=tmp_path / "api", progress=False)
    cli_bytes = (tmp_path / "cli" / "results.parquet").read_bytes()
    assert cli_bytes == (tmp_path / "api" / "results.parquet").read_bytes()
    t = pd.read_parquet(tmp_path / "api" / "results.parquet")
    assert set(t["model"]) == {"overlap", "rm"} and set(t["subset"]) == {"chat", "code"}


def test_the_api_reads_a_folder_as_the_cli_does(pairs):
    "`ra.audit(DIR)` reads each data file of a plain folder as its own subset, as `--data DIR` does."
    res = ra.audit(str(pairs), "overlap", "EF", permutations=50, progress=False)
    assert set(res.table["subset"]) == {"chat", "code"} and res.manifest["data"]["n_items"] == 24


def test_data_spec_forms(pairs):
    one, both = str(pairs / "chat.jsonl"), [str(pairs / "chat.jsonl"), str(pairs / "code.jsonl")]
    assert len(specs.data_from(one)) == 12
    assert specs.data_from(both)["subset"].value_counts().to_dict() == {"chat": 12, "code": 12}
    assert specs.data_from([str(pairs)])["subset"].nunique() == 2  # a folder: its files
    cut = specs.data_from({"paths": both, "limit": 10, "seed": 3})
    assert len(cut) == 10 and cut.equals(specs.data_from({"paths": both, "limit": 10, "seed": 3}))
    assert cut.attrs["source"].endswith("(limit 10, seed 3)")


def test_scorer_spec_forms(rm, tmp_path):
    pd.DataFrame({"prompt": ["q"], "response": ["a"], "reward": [1.0]}).to_csv(tmp_path / "s.csv", index=False)

    def n_words(prompt, response):
        return float(len(response.split()))

    got = specs.scorers_from(["overlap", f"mine={tmp_path / 's.csv'}", tmp_path / "s.csv", n_words,
                              {"model": str(rm), "name": "rm", "max_length": 64}])
    assert [(s.name, type(s).__name__) for s in got] == [
        ("overlap", "OverlapScorer"), ("mine", "PrecomputedScorer"), ("s", "PrecomputedScorer"),
        ("n_words", "CallableScorer"), ("rm", "DiscriminativeScorer")]
    assert specs.scorers_from(got[0]) == [got[0]]
    assert [s.name for s in ra.audit.resolve_scorers({"model": str(rm), "name": "x"})] == ["x"]


def test_engine_and_rewriter_spec_forms(rm):
    from reward_auditor.engines import LocalEngine, RayEngine
    assert specs.engine_from(None) is None and specs.engine_from("local") is None
    e = LocalEngine(unit_batches=1)
    assert specs.engine_from(e) is e
    pytest.importorskip("ray")
    ray = specs.engine_from({"name": "ray", "workers": 2, "unit_batches": 3})  # made, not started
    assert isinstance(ray, RayEngine) and (ray.workers, ray.unit_batches) == (2, 3)
    assert type(specs.rewriter_from({"model": str(rm)}, ["LE-model"])).__name__ == "TransformersRewriter"
    assert type(specs.rewriter_from({"url": "http://127.0.0.1:9/v1", "name": "m"}, ["SP-model"])).__name__ == \
        "OpenAIRewriter"
    assert specs.rewriter_from(None, ["EF"]) is None


BAD = [
    (lambda p: specs.data_from({"paths": [str(p)], "limt": 3}), "data.limt"),
    (lambda p: specs.data_from({"paths": [str(p)], "limit": -1}), "data.limit"),
    (lambda p: specs.data_from({"format": "jsonl"}), "data.paths"),
    (lambda p: specs.data_from([str(p / "chat.jsonl")] * 2), "data"),
    (lambda p: specs.scorers_from([{"kind": "dpo"}]), "scorers"),
    (lambda p: specs.scorers_from(["overlap", "overlap"]), "scorers"),
    (lambda p: specs.scorers_from([1.5]), "scorers"),
    (lambda p: ra.audit.resolve_scorers(["overlap", "overlap"]), "scorers"),  # the audit keeps the specs' rule
    (lambda p: specs.endpoint_scorer({"endpoint": "http://127.0.0.1:9", "kind": "dpo"}), "kind"),
    (lambda p: specs.endpoint_scorer({"endpoint": "http://127.0.0.1:9", "api": "chat"}), "endpoint.api"),
    (lambda p: specs.endpoint_scorer({"endpoint": "http://127.0.0.1:9", "timout": 3}), "endpoint.timout"),
    (lambda p: specs.engine_from("rai"), "engine"),
    (lambda p: specs.engine_from({"name": "ray", "worker": 2}), "engine.worker"),
    (lambda p: specs.rewriter_from({"model": str(p)}, ["LE-model"]), "rewriter.model"),
    (lambda p: specs.rewriter_from({"url": "http://127.0.0.1:9/v1"}, ["LE-model"]), "rewriter.name"),
    (lambda p: specs.rewriter_from({"model": str(p)}, ["EF"]), "rewriter"),
    (lambda p: specs.rewriter_from(None, ["LE-model"]), "perturbations"),
]


@pytest.mark.parametrize("make,field", BAD, ids=[f for _, f in BAD])
def test_a_bad_spec_is_one_error_naming_its_field(make, field, pairs):
    with pytest.raises(SpecError) as e:
        make(pairs)
    assert e.value.field == field and str(e.value).endswith(f" ({field})") and "\n" not in str(e.value)


def test_the_api_refuses_a_bad_spec_before_writing(pairs, tmp_path):
    with pytest.raises(SpecError, match=r"\(engine\)$"):
        ra.audit({"paths": [str(pairs)]}, "overlap", "EF", engine="rai", out=tmp_path / "run", progress=False)
    assert {f.name for f in (tmp_path / "run").glob("*")} <= {".lock"}  # the run's lock alone: nothing written


@pytest.mark.parametrize("argv,line", [
    (["--endpoint", "http://127.0.0.1:9", "--kind", "dpo"],
     "an endpoint scores reward models (/classify) and judges (--kind judge, /v1/completions); --kind dpo is not "
     "available over HTTP (--kind)"),
    (["--endpoint", "http://127.0.0.1:9", "--endpoint-api", "chat"],
     "api 'chat' reads a judge's verdict; add --kind judge (--endpoint-api)"),
    (["--rewriter-url", "http://127.0.0.1:9/v1"],
     "a rewriter is given but no *-model perturbation is selected (e.g. LE-model) (--rewriter-model/--rewriter-url)"),
])
def test_the_cli_names_the_option_of_a_bad_spec(argv, line, pairs, tmp_path, capsys):
    code = ra_cli.main(["audit", "--data", str(pairs / "chat.jsonl"), "--scorer", "overlap", "--perturbations", "EF", "-q",
                        "--no-report",
                        *argv, "--out", str(tmp_path / "run")])
    assert code == 2 and capsys.readouterr().err.strip() == f"reward-auditor: error: {line}"
