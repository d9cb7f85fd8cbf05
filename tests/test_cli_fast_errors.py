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
        # Checked before the warm start (minutes) and the imports, not when the hub binds after them.
        ("atgrpo.cli.learner", ["--curve-keys", "/nope"], 2, "CurveKeyError: cannot load CURVE key /nope/hub.key"),
        ("atgrpo.cli.learner", ["--address", "bogus://x"], 2, "AddressError: hub address 'bogus://x'"),
        ("atgrpo.cli.learner", ["--address", "tcp://10.0.0.1:5555"], 2, "InsecureEndpointError: hub on tcp://"),
        ("atgrpo.cli.learner", ["--set", 'policies.shared.path="/nope"'], 2, "'/nope': no such folder"),
        ("atgrpo.cli.learner", ["--set", 'policies.shared.path="."'], 2, "'.': not an HF-format model folder"),
        ("atgrpo.cli.actor", ["--curve-keys", "/nope", "--address", "tcp://10.0.0.1:5555"], 2, "CURVE key /nope/"),
        ("atgrpo.cli.actor", ["--curve-keys", "/nope", "--address", "ipc:///nope/hub.sock"], 2, "CURVE key /nope/"),
        ("atgrpo.cli.actor", ["--address", "bogus://x"], 2, "actor address 'bogus://x'"),
        ("atgrpo.cli.actor", ["--address", "tcp://10.0.0.1:5555"], 2, "actor on tcp://10.0.0.1:5555 without CURVE"),
        ("atgrpo.cli.train", ["missing.toml"], "config error", "missing.toml"),
        ("atgrpo.cli.keys", ["nosuch"], 2, "invalid choice: 'nosuch'"),
        ("atgrpo.cli.keys", ["add-actor", "/nope", "x"], 2, "/nope is not a key folder"),
        ("atgrpo.cli.keys", ["bundle", "/nope", "x", "out"], 2, "cannot load CURVE key /nope/"),
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


def test_a_key_folder_without_actors_is_refused_before_the_imports(tmp_path) -> None:
    """A hub whose key folder has no `actors/` would accept no actor (and pyzmq would raise an
    untyped OSError when the hub binds): the learner says so first."""
    from atgrpo.transport import keys

    folder = keys.generate_keys(tmp_path / "keys")
    for f in (folder / "actors").iterdir():
        f.unlink()
    (folder / "actors").rmdir()
    rc, heavy, err = run_main("atgrpo.cli.learner", "--curve-keys", str(folder), cwd=tmp_path)
    assert (rc, heavy) == (2, []), err[-2000:]
    assert "CurveKeyError" in err and "no actors/ folder" in err and "Traceback" not in err


def test_the_learner_sends_its_failed_event_when_a_check_fails(tmp_path) -> None:
    """A launcher shows the learner's `Failed` event as its error: a check before the warm start
    sends it as `run_learner` would have."""
    done = subprocess.run(
        [sys.executable, "-m", "atgrpo.cli.learner", "--address", "bogus://x"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    event = json.loads(done.stdout.strip().splitlines()[-1])
    assert event["type"] == "failed" and event["error"].startswith("AddressError: hub address 'bogus://x'")
    assert not (tmp_path / "runs").exists()  # nothing written: no out_dir, no ipc folder, no model


def test_the_transport_package_loads_its_names_on_first_use() -> None:
    """`atgrpo.transport.keys` and `.security` load without torch (the endpoints and tensors import
    it); every name of `atgrpo.transport` is still there when asked for."""
    code = (
        "import sys\n"
        "from atgrpo.transport import keys\n"
        "from atgrpo.transport.security import check_address, require_keys\n"
        "assert 'torch' not in sys.modules, 'torch'\n"
        "import atgrpo.transport as t\n"
        "from atgrpo.transport import *\n"
        "missing = [n for n in t.__all__ if n not in dir(t) or getattr(t, n) is None]\n"
        "assert not missing, missing\n"
        "from atgrpo.transport import HubEndpoint, codec, endpoints\n"
        "assert HubEndpoint is endpoints.HubEndpoint and t.encode is codec.encode\n"
        "try:\n"
        "    from atgrpo.transport import nosuch\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('nosuch')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
