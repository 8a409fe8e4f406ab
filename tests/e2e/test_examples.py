"""Every script in examples/ runs as it is, as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        check=False,
    )


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    result = run(script.name, "--db", str(tmp_path / "example.sqlite"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "example.sqlite").exists()


def test_the_demo_example_is_the_devs_demo(tmp_path: Path) -> None:
    result = run("demo.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in (
        "$ devs attempt build 'patch the tokenizer with regexes'",
        "[exit 4: PAUSED]",
        "[exit 3: ESCALATED]",
        "[exit 5: HANDED_OFF]",
        "⚠ ENTROPY PAUSE — Max retry threshold reached",
    ):
        assert expected in out
    assert "sk-live-abcdefghijklmnop1234" not in out
    assert not list(tmp_path.iterdir()), "the default run must not litter the cwd"


def test_quickstart_suspends_for_a_human_and_then_passes(tmp_path: Path) -> None:
    result = run("quickstart.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "suspended: max_retries" in out
    assert "a human reads: 3 failures" in out
    assert "'recursive descent parser': tests exit 0 -> complete" in out
    assert out.rstrip().endswith("state: completed")
    assert not list(tmp_path.iterdir()), "the default run must not litter the cwd"
