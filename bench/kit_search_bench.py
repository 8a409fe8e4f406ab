"""How long ``devs.testing``'s documented starter takes to find and shrink a
planted bug, as a user runs it: ``pytest`` on a test file, one run per seed.

    python bench/kit_search_bench.py [--seeds N] [--python PATH] [--keep DIR]

The test file is docs/testing.md's starter with ``MyReferee`` a wrapper that
records every third failed gate of a task twice (the bug the kit's own test
plants first). Each run is ``python -m pytest -q --hypothesis-seed=S`` in a
fresh directory; the bench prints, per seed, the wall time, whether the run
failed on the planted bug, the lines pytest printed, and the commands in the
counterexample script the kit adds. ``--python`` runs another interpreter
(another build of devs-recovery, e.g. a venv of an older release, to compare
in the same run).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

PLANTED = '''
from typing import Any


class MyReferee:
    """Every third failed gate of a task is recorded twice (a planted bug)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.failures: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def record_gate(self, task_id: str, exit_code: Any, **kwargs: Any) -> Any:
        decision = self.inner.record_gate(task_id, exit_code, **kwargs)
        if exit_code != 0:
            self.failures[task_id] = self.failures.get(task_id, 0) + 1
            if self.failures[task_id] % 3 == 0 and decision.state == "GATE_FAILED":
                decision = self.inner.record_gate(task_id, exit_code, **kwargs)
        return decision
'''

STARTER = """
from devs.testing import RecoveryMachine, memory_service, search_settings


class MyMachine(RecoveryMachine):
    make_service = staticmethod(lambda policy: MyReferee(memory_service(policy)))


MyMachine.TestCase.settings = search_settings(max_examples=200)
test_my_referee = MyMachine.TestCase
"""
"""docs/testing.md's starter, word for word (a docs test checks it)."""

SYMPTOM = re.compile(r"(failures|state [A-Z_]+|is [A-Z_]+), the ladder")


def run_once(python: str, seed: int, directory: Path) -> dict[str, object]:
    """One pytest run of the starter; what it took and what it printed."""
    test = directory / "test_my_referee.py"
    test.write_text(PLANTED + STARTER)
    started = time.perf_counter()
    done = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--hypothesis-seed={seed}",
            test.name,
        ],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=1_800,
        check=False,
    )
    seconds = time.perf_counter() - started
    output = done.stdout + done.stderr
    script = output.partition("def test_counterexample() -> None:")[2]
    calls = [
        line
        for line in script.splitlines()
        if re.match(r"^E?\s+(answer = )?service\.", line) and "start_task" not in line
    ]
    return {
        "seconds": seconds,
        "found": done.returncode == 1 and bool(SYMPTOM.search(output)),
        "lines": len(output.splitlines()),
        "commands": len(calls) if script else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="runs (seeds 0..N-1)")
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter to run pytest"
    )
    parser.add_argument("--keep", type=Path, help="leave the test files here")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    print(f"starter + planted bug, pytest under {args.python}")
    print(f"{'seed':>4} {'seconds':>8} {'found':>6} {'lines':>6} {'commands':>9}")
    rows = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory(prefix="devs-kit-bench-") as temporary:
            directory = Path(temporary)
            if args.keep is not None:
                directory = args.keep / f"seed-{seed}"
                directory.mkdir(parents=True, exist_ok=True)
            row = run_once(args.python, seed, directory)
        rows.append(row)
        print(
            f"{seed:>4} {row['seconds']:>8.1f} {row['found']!s:>6} "
            f"{row['lines']:>6} {row['commands']!s:>9}",
            flush=True,
        )
    times = [float(row["seconds"]) for row in rows]  # type: ignore[arg-type]
    found = sum(bool(row["found"]) for row in rows)
    median, slowest = statistics.median(times), max(times)
    print(
        f"found {found} of {len(rows)}; seconds: median {median:.1f}, max {slowest:.1f}"
    )
    return 0 if found == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
