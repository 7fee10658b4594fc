__version__ = "0.1.0"

# Written by hand, not exported from a notebook (nbdev only keeps `__version__` up to date here).
# The main entry points are reachable from the package, `import reward_auditor as ra; ra.audit(...)`, and are
# imported on first use, so `import reward_auditor` stays fast (no pandas, scipy or torch until needed).
import sys as _sys
import types as _types

_LAZY = {
    "AuditResult": ("audit", "AuditResult"), "AuditError": ("audit", "AuditError"),
    "load_preferences": ("data", "load_preferences"), "load_sample": ("data", "load_sample"),
    "DataError": ("data", "DataError"), "load_scorer": ("scorers", "load_scorer"),
    "render": ("report", "render"), "verifier_audit": ("verifiers", "verifier_audit"),
    "protocol_report": ("protocol", "protocol_report"), "meta_report": ("meta", "meta_report"),
    "plan": ("planning", "plan"), "mde": ("planning", "mde"),
}
_MODULES = ("data", "stats", "multiplicity", "resources", "perturbations", "rewriters", "cache", "scorers", "families", "audit", "plots",
            "report", "cli", "heterogeneity", "verifiers", "protocol", "meta", "compare", "calibration", "specs", "planning",
            "leaderboard")
# submodules named after their main function: `ra.audit(...)` calls `ra.audit.audit(...)`, while
# `ra.audit.AuditResult` and `from reward_auditor.audit import ...` keep working as for any module
_CALLABLE = ("audit", "heterogeneity", "compare", "calibration", "leaderboard")
__all__ = ["__version__", *_LAZY, *_MODULES]


def _param_docs(fn) -> dict:
    """nbdev's docments: the comment after each parameter of `fn`'s signature, read from its source ({} without one).

    As in fastcore's `docments`, the comment on a parameter's line describes it, and so do comment lines right
    above it: `def f(x:int=0, # how many` → `{"x": "how many"}`."""
    import inspect
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return {}
    return _docments(src)


def _docments(src: str) -> dict:
    "The docments of the first `def` in the source text `src` (see `_param_docs`)."
    import io
    import textwrap
    import tokenize
    out, depth, last, seen_def, expect, above = {}, 0, None, False, False, []
    try:
        for t in tokenize.generate_tokens(io.StringIO(textwrap.dedent(src)).readline):
            if not depth:
                if t.type == tokenize.NAME and t.string == "def":
                    seen_def = True
                elif seen_def and t.string == "(":
                    depth, expect = 1, True
                continue
            if t.type == tokenize.OP and t.string in "([{":
                depth += 1
            elif t.type == tokenize.OP and t.string in ")]}":
                depth -= 1
                if not depth:
                    break
            elif t.type == tokenize.OP and t.string == "," and depth == 1:
                expect = True
            elif t.type == tokenize.NAME and depth == 1 and expect:
                last, expect = (t.string, t.start[0]), False
                if above:
                    out[last[0]], above = " ".join(above), []
            elif t.type == tokenize.COMMENT:
                text = t.string.lstrip("#").strip()
                if last and t.start[0] == last[1]:
                    out[last[0]] = f"{out[last[0]]} {text}" if last[0] in out else text
                else:
                    above.append(text)
    except (tokenize.TokenError, SyntaxError):
        return {}
    return out


def _documented(fn) -> str:
    "`fn`'s docstring with a Parameters section made from its docments (once), so that `help(fn)` describes them."
    import re
    doc = fn.__doc__ or ""
    params = _param_docs(fn)
    if not params or re.search(r"^\s*Parameters\n\s*-{3,}", doc, re.M):
        return doc
    width = max(map(len, params))
    lines = [f"    {name.ljust(width)} : {text}" for name, text in params.items()]
    return doc.rstrip() + "\n\n    Parameters\n    ----------\n" + "\n".join(lines) + "\n"


class _CallableModule(_types.ModuleType):
    """A module that can be called as its function of the same name.

    `help(ra.audit)`, `inspect.signature(ra.audit)` and Jupyter's `ra.audit?` describe the function (its signature,
    docstring and parameters) before the module: `__wrapped__` is the function and `__doc__` leads with it."""
    def __call__(self, *args, **kwargs):
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)

    @property
    def __wrapped__(self):
        return getattr(self, self.__name__.rpartition(".")[2])

    @property
    def __doc__(self):
        import inspect
        fn, own = self.__wrapped__, self.__dict__.get("__doc__") or ""
        name = self.__name__.rpartition(".")[2]
        head = f"Called as a function, `{self.__name__}` is `{self.__name__}.{name}`:\n\n{name}{inspect.signature(fn)}\n"
        return f"{own.splitlines()[0] if own else name}\n\n{head}\n{inspect.cleandoc(fn.__doc__ or '')}\n\n" \
               f"The module {self.__name__}:\n\n{own}"

    @__doc__.setter
    def __doc__(self, value):
        self.__dict__["__doc__"] = value


def _audit_view(result) -> str:
    """An audit's notebook view, drawn on the plots floor (`plots.audit_html`) from what the result hands over.

    The result type keeps no drawing code and `audit` never imports `plots`; this face, above every floor,
    attaches the view when `audit` is imported, and `plots` (pandas' Styler) loads only when a result is shown."""
    from .audit import findings_html
    from .plots import audit_html
    return audit_html(repr(result).splitlines()[0], findings_html(result.table), result.table)


class _Package(_types.ModuleType):
    def __setattr__(self, name, value):
        if name in _CALLABLE and isinstance(value, _types.ModuleType) and type(value) is _types.ModuleType:
            value.__class__ = _CallableModule  # set when the import system binds the submodule
            fn = value.__dict__.get(name)
            if callable(fn):
                fn.__doc__ = _documented(fn)  # help(audit) lists every parameter, from its docments
        if name == "audit" and isinstance(value, _types.ModuleType) and hasattr(value, "AuditResult"):
            value.AuditResult._repr_html_ = _audit_view  # Jupyter's HTML view of a result
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package

import os as _os
import warnings as _warnings

_HERE = _os.path.dirname(_os.path.abspath(__file__)) + _os.sep


def _raised_here(category, filename) -> bool:
    "Whether the package raised the warning: its own category, its own file, or its code calling `warnings.warn`."
    if getattr(category, "__module__", "").startswith(__name__ + ".") or str(filename).startswith(_HERE):
        return True
    f = _sys._getframe(2)  # past this function and the formatter: the warnings machinery, then the raiser
    while f is not None and f.f_code.co_filename.endswith("warnings.py"):
        f = f.f_back
    return f is not None and f.f_code.co_filename.startswith(_HERE)


def _format_warning(message, category, filename, lineno, line=None, _python=_warnings.formatwarning):
    "The package's warnings as `Category: message` (no file, line number or source line); others as before."
    if _raised_here(category, filename):
        return f"{category.__name__}: {message}\n"
    return _python(message, category, filename, lineno, line)


_warnings.formatwarning = _format_warning  # notebooks and scripts see the message only (the CLI prints its own lines)


def __getattr__(name: str):
    "Import an entry point or submodule on first access (PEP 562)."
    import importlib
    if name in _LAZY:
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
        globals()[name] = value
        return value
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_LAZY, *_MODULES})
