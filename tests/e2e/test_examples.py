"""Every script in examples/ runs as it is, as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script), "--db", str(tmp_path / "example.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "example.sqlite").exists()


def test_agent_loop_walks_the_whole_ladder(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "agent_loop.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=True,
    )
    out = result.stdout
    for expected in (
        "outcome=advance next=implement",
        "blacklisted (matches 'patch the tokenizer with a regex')",
        "graph suspended: blacklisted_strategy",
        "graph suspended: entropy_limit",
        "state=ESCALATION   failures=3",
        "state=ESCALATION   failures=4",
        "state=HAND_OFF     failures=5",
        "run demo-run: COMPLETED, completed ['plan', 'implement', 'review']",
        "USER_ESCALATION",
        "HAND_OFF_REQUIRED",
        "task:blacklisted_strategy_attempted",
    ):
        assert expected in out
    assert not list(tmp_path.iterdir()), "the default run must not litter the cwd"
