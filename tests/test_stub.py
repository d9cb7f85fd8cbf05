"""`_core.pyi` must describe the built extension exactly (mypy stubtest)."""

import subprocess
import sys


def test_stub_matches_the_built_extension() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "atgrpo._core"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
