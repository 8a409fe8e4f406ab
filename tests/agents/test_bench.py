"""``bench/agents_bench.py`` runs as documented and prints its row from a
real agent (the numbers are the benchmark's to report, not a test's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.agents.conftest import agent_binary

BENCH = Path(__file__).resolve().parents[2] / "bench" / "agents_bench.py"


def test_the_agents_bench_prints_a_row_measured_inside_claude_code() -> None:
    agent_binary("claude-code")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--runs", "1", "--agent", "claude-code"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| claude")]
    assert len(rows) == 1
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert int(cells[1]) >= 20  # the loop's hook calls, every one timed
    assert all(" ms" in cell for cell in cells[2:])
