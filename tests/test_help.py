"""help() describes what it is asked about: `help(ra.audit)` documents the function `ra.audit(...)` calls (signature,
docstring, every parameter) although `ra.audit` is also the module, and `help(audit)` describes each of its parameters
from the comment after it in the notebook (nbdev's docments)."""
import importlib.util
import inspect
import pydoc
import re
import textwrap

import pytest

import reward_auditor as ra
from reward_auditor.audit import audit


def _described(text: str, name: str) -> bool:
    "A `name : description` line of a Parameters section, with a description."
    return re.search(rf"^\s*{name}\s+: \S", text, re.M) is not None


def test_every_parameter_of_audit_has_a_docment():
    params = list(inspect.signature(audit).parameters)
    docs = ra._param_docs(audit)
    assert len(params) >= 30
    missing = [p for p in params if not docs.get(p)]
    assert not missing, f"audit(): no comment after {missing} (nbdev's docments: `name: type = default, # what it is`)"


def test_help_of_the_audit_function_describes_every_parameter():
    text = pydoc.render_doc(audit, renderer=pydoc.plaintext)
    missing = [p for p in inspect.signature(audit).parameters if not _described(text, p)]
    assert not missing, missing


def test_help_of_ra_audit_documents_the_function_not_only_the_module():
    text = pydoc.render_doc(ra.audit, renderer=pydoc.plaintext)
    description = text.split("DESCRIPTION", 1)[1].split("CLASSES", 1)[0]
    assert "audit(data" in description  # the call's signature leads
    missing = [p for p in inspect.signature(audit).parameters if not _described(description, p)]
    assert not missing, missing
    assert inspect.signature(ra.audit) == inspect.signature(audit)  # Jupyter's ra.audit? and tab completion
    assert ra.audit.__wrapped__ is audit
    assert "Docs: https://" in ra.audit.__doc__  # the module's own docstring follows


@pytest.mark.parametrize("name", ["heterogeneity", "compare", "calibration"])
def test_the_other_callable_modules_lead_with_their_function(name):
    mod = getattr(ra, name)
    fn = getattr(mod, name)
    assert inspect.signature(mod) == inspect.signature(fn)
    assert f"{name}{inspect.signature(fn)}" in pydoc.render_doc(mod, renderer=pydoc.plaintext).replace("\n    ", "\n")


def test_param_docs_reads_docments(tmp_path):
    "As fastcore's docments: the comment on a parameter's line describes it, and so do comment lines right above it."
    (tmp_path / "docm.py").write_text(textwrap.dedent('''
        def deco(f): return f

        @deco
        def f(a: int,  # how many
              # a mapping,
              # described above it
              b: dict = {"x": (1, 2)},
              *, c=None,
              d: str = "s",  # the last one
              ) -> int:  # not a parameter
            "One line."
            # not a parameter either
            return 0
    '''))
    spec = importlib.util.spec_from_file_location("docm", tmp_path / "docm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert ra._param_docs(mod.f) == {"a": "how many", "b": "a mapping, described above it", "d": "the last one"}
    fastcore = pytest.importorskip("fastcore.docments")  # nbdev's own reader agrees
    assert {k: " ".join(v.split()) for k, v in fastcore.docments(mod.f).items() if v and k != "return"} == \
        ra._param_docs(mod.f)
    doc = ra._documented(mod.f)
    assert doc.startswith("One line.") and _described(doc, "a") and _described(doc, "d") and not _described(doc, "c")
    mod.f.__doc__ = doc
    assert ra._documented(mod.f) == doc  # once
