"""A bad argument, a missing file or a closed stdin is reported before torch, transformers, vLLM or
DeepSpeed is imported: each takes seconds to import, and an entry point that makes its user wait for
them to hear of a typo feels broken (issue 46). Each case runs the CLI's `main()` in a fresh
interpreter, which then says which of those modules it holds; time is not asserted (machines are
noisy), the imports are the property."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "vllm", "deepspeed")

DRIVER = """
import importlib, json, sys
module, argv = sys.argv[1], sys.argv[2:]
try:
    rc = importlib.import_module(module).main(argv)
except SystemExit as exc:
    rc = exc.code
sys.stderr.flush()
print(json.dumps({"rc": rc, "heavy": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,)


def run_main(module: str, *argv: str, cwd) -> tuple[object, list[str], str]:
    """`module.main(argv)` in a new interpreter with stdin closed: its status (an int, or the message
    `sys.exit` was given), the heavy modules it imported, its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, module, *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["rc"], out["heavy"], done.stderr


@pytest.mark.parametrize(
    ("module", "argv", "status", "says"),
    [
        ("atgrpo.cli.eval", ["--task", "nosuch", "--model", "/nope"], 2, "invalid choice: 'nosuch'"),
        ("atgrpo.cli.eval", ["--task", "code", "--model", "/nope"], 2, "not found or not HF format"),
        ("atgrpo.cli.eval", ["missing.toml", "--model", "/nope"], 2, "missing.toml"),
        ("atgrpo.cli.eval", ["--task", "math", "--model", "M", "--dataset", "none.jsonl"], 2, "none.jsonl: no such"),
        ("atgrpo.cli.eval", ["--task", "code", "--model", "M", "--adapter", "nope"], 2, "--adapter 'nope'"),
        ("atgrpo.cli.eval", ["--task", "code", "--model", "M", "--samples", "2", "--k", "3"], 2, "--k '3'"),
        ("atgrpo.cli.model", ["import", "nothing.gguf", "out"], 2, "nothing.gguf: expected a .gguf file"),
        ("atgrpo.cli.model", ["import", "M", "M"], 2, "M exists; pass --overwrite"),
        ("atgrpo.cli.model", ["import"], 2, "required: src, dest"),
        ("atgrpo.cli.actor", ["--address", "-"], 2, "stdin closed before the hub's address came"),
        ("atgrpo.cli.actor", ["missing.toml", "--address", "-"], "config error", "missing.toml"),
        ("atgrpo.cli.actor", [], 2, "--address"),
        ("atgrpo.cli.learner", ["missing.toml"], "config error", "missing.toml"),
        ("atgrpo.cli.learner", ["--set", "nosuch.key=1"], "config error", "nosuch"),
        ("atgrpo.cli.learner", ["--nosuch"], 2, "unrecognized arguments: --nosuch"),
        ("atgrpo.cli.train", ["missing.toml"], "config error", "missing.toml"),
        ("atgrpo.cli.keys", ["nosuch"], 2, "invalid choice: 'nosuch'"),
    ],
)
def test_an_error_comes_before_the_heavy_imports(tmp_path, module, argv, status, says) -> None:
    (tmp_path / "M").mkdir()
    (tmp_path / "M" / "config.json").write_text("{}")  # a model folder: the error must be another
    rc, heavy, err = run_main(module, *argv, cwd=tmp_path)
    assert heavy == [], f"{module} {argv} imported {heavy}"
    assert rc == status or (isinstance(rc, str) and rc.startswith(status)), (rc, err[-2000:])
    assert says in (rc if isinstance(rc, str) else err), err[-2000:]
    assert "Traceback" not in err
