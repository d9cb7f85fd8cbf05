"""`atgrpo.errors` is cheap to import and re-exports every exception class the package defines."""

from __future__ import annotations

import ast
import builtins
import json
import subprocess
import sys
from pathlib import Path

import atgrpo.errors

PACKAGE = Path(atgrpo.errors.__file__).resolve().parents[1]

INTERNAL = {
    "Terminated": "cli/train.py: SIGTERM turned into KeyboardInterrupt inside the launcher, never raised out of it",
    "RecordProblem": "data/reader.py: a converter's signal, always turned into DatasetRecordError or a skip",
    "SandboxIsolationWarning": "sandbox.py: a warning category (warnings.warn), not an error",
    "_Untrusted": "workflows/programs.py: a parser's signal that a model-written test must run untrusted, always caught",
}
"""Exception classes deliberately not in `atgrpo.errors`, with the reason."""

HEAVY = (
    "torch",
    "transformers",
    "zmq",
    "vllm",
    "deepspeed",
    "atgrpo.verify.math",
    "atgrpo.data.code_loaders",
    "atgrpo.data.math_loaders",
    "atgrpo.data.reader",
    "atgrpo.transport.endpoints",
    "atgrpo.models.importer",
)


def _exception_classes() -> dict[str, list[str]]:
    """Every class of the package whose bases make it an exception: name -> files defining it."""
    bases: dict[str, set[str]] = {}
    where: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = {
                    b.id if isinstance(b, ast.Name) else b.attr
                    for b in node.bases
                    if isinstance(b, (ast.Name, ast.Attribute))
                }
                bases.setdefault(node.name, set()).update(names)
                where.setdefault(node.name, []).append(str(path.relative_to(PACKAGE)))
    known = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
    known.add("AtgrpoError")  # defined by the extension
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, bs in bases.items():
            if name not in found and bs & (known | found):
                found.add(name)
                changed = True
    return {name: where[name] for name in found}


def test_every_exception_class_is_exported_once() -> None:
    classes = _exception_classes()
    assert {"TransportError", "DatasetError", "ActorError", "UnitLost", "EvalError", "ModelImportError"} <= set(classes)
    missing = sorted(set(classes) - set(atgrpo.errors.__all__) - set(INTERNAL))
    assert not missing, f"exception classes not re-exported from atgrpo.errors: {missing}"
    twice = {name: files for name, files in classes.items() if len(files) > 1}
    assert not twice, f"exception classes defined more than once: {twice}"
    assert set(INTERNAL) <= set(classes), "an allow-listed class no longer exists: drop it from INTERNAL"


def test_every_export_is_an_atgrpo_error() -> None:
    for name in atgrpo.errors.__all__:
        cls = getattr(atgrpo.errors, name)
        assert isinstance(cls, type) and issubclass(cls, atgrpo.errors.AtgrpoError), name


def test_old_import_paths_give_the_same_classes() -> None:
    from atgrpo.actor.actor import ActorError, UnitLost
    from atgrpo.cli.eval import EvalError
    from atgrpo.data.errors import DatasetRecordError
    from atgrpo.engines.errors import PromptTooLongError
    from atgrpo.models.importer import ModelImportError
    from atgrpo.transport.errors import ChecksumMismatch
    from atgrpo.verify.errors import VerifierStartError

    e = atgrpo.errors
    assert (ActorError, UnitLost, EvalError, DatasetRecordError) == (
        e.ActorError,
        e.UnitLost,
        e.EvalError,
        e.DatasetRecordError,
    )
    assert (PromptTooLongError, ModelImportError, ChecksumMismatch, VerifierStartError) == (
        e.PromptTooLongError,
        e.ModelImportError,
        e.ChecksumMismatch,
        e.VerifierStartError,
    )


def test_import_is_light() -> None:
    code = "import json, sys, atgrpo.errors; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert not heavy, f"import atgrpo.errors loaded {heavy}"
