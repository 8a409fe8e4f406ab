"""The HTTP benchmark (bench/http_bench.py) runs end to end and prints every
figure and a verdict per target: a tiny run on both backends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# locust (in the test extra) is not imported here: importing it monkey-patches
# the process (gevent); the benchmark starts it as a subprocess.


@pytest.mark.slow
def test_http_bench_prints_every_figure_and_verdict(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "http_bench.py"),
            *("--seconds", "1", "--clients", "2", "--workers", "1"),
            *("--inprocess-seconds", "0.3", "--lag-seconds", "1"),
            *("--lag-idle-seconds", "0.5", "--lag-clients", "2"),
            *("--dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=600,  # a bound for a loaded machine, not a speed
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any("synchronous_commit=on" in line for line in lines)
    points = [
        line
        for line in lines
        if line.startswith(("| SQLite | 1 | 2 |", "| PostgreSQL | 1 | 2 |"))
    ]
    assert len(points) == 2, result.stdout
    for point in points:
        assert point.count(" | ") == 8, point
        assert "| 0 |" in point  # no answer but 200/201
    assert sum("projection lag, busy" in line for line in lines) == 2
    beside = [
        line for line in lines if "(1 thread, read models kept by a `devs" in line
    ]
    assert len(beside) == 1, beside
    assert beside[0].startswith("| PostgreSQL | 1 |"), beside
    verdicts = [line for line in lines if line.startswith("target ")]
    # Per backend: the ratio and p99 at 16 clients (not run here); PostgreSQL
    # adds its in-process rate and the projection lag.
    assert len(verdicts) == 6, verdicts
    assert sum(v.startswith("target not measured: ") for v in verdicts) == 2
