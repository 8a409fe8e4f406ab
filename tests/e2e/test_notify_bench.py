"""The notification benchmark (bench/notify_bench.py) runs end to end and
prints every figure: a tiny run on SQLite."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"\d+(?:\.\d+)?"


def test_notify_bench_prints_every_figure(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "notify_bench.py"),
            *("--seconds", "2", "--rounds", "1", "--backlog", "300"),
            *("--clients", "4", "--dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=300,  # a bound for a loaded machine, not a speed
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert re.match(r"notify bench: .*, \d+ cores, .*Python 3\.", lines[0]), lines
    figures = [
        rf"latency decision→webhook \(4 clients, SQLite\): p50 {NUMBER} ms, "
        rf"p99 {NUMBER} ms, max {NUMBER} ms, .*n=[1-9]\d*, missing 0, ",
        rf"  SQLite round 1 webhooks off: {NUMBER} decisions/s ",
        rf"  SQLite round 1 webhooks on: {NUMBER} decisions/s .*webhooks "
        r"(\d+) of \1 arrived",
        rf"decisions/s \(4 clients, SQLite, mean of 1 round\(s\)\) webhooks off: "
        rf"{NUMBER}, on: {NUMBER}, ratio on/off {NUMBER} \(target ≥ 0\.95\): "
        r"(PASS|FAIL)$",
        r"  SQLite backlog made in process in .*: (\d+) session\.opened \+ "
        r"(\d+) session\.answered",
        rf"backlog 300 messages \(SQLite, Sender\.step loop\): delivered in "
        rf"{NUMBER} s, {NUMBER} msg/s, ids arrived 300, duplicates \d+$",
        rf"backlog 300 messages \(SQLite, Background thread\): delivered in "
        rf"{NUMBER} s, {NUMBER} msg/s, ids arrived 300, duplicates \d+$",
    ]
    for figure in figures:
        found = [line for line in lines if re.match(figure, line)]
        assert len(found) == 1, (figure, result.stdout)
    assert "ERRORS" not in result.stdout
