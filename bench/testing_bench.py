"""How fast ``devs.testing``'s ``RecoveryMachine`` explores, on SQLite.

    python bench/testing_bench.py [--examples N] [--steps N]

Runs the default machine (a fresh SQLite file per example) for ``--examples``
examples of up to ``--steps`` commands and prints examples/s and commands/s.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from devs.testing import RecoveryMachine


class Counted(RecoveryMachine):
    """The default machine, counting its examples and commands."""

    examples = 0
    commands = 0

    def begin(self, policy: object, ids: list[str]) -> None:
        type(self).examples += 1
        super().begin(policy, ids)  # type: ignore[arg-type]

    def teardown(self) -> None:
        type(self).commands += self.steps
        super().teardown()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="devs.testing's speed")
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    run_state_machine_as_test(
        Counted,
        settings=settings(
            max_examples=args.examples,
            stateful_step_count=args.steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    seconds = time.perf_counter() - start
    print("| figure | value |")
    print("|---|---|")
    print(f"| examples (up to {args.steps} commands each) | {Counted.examples} |")
    print(f"| commands | {Counted.commands} |")
    print(f"| seconds | {seconds:.1f} |")
    print(f"| examples/s | {Counted.examples / seconds:.1f} |")
    print(f"| commands/s | {Counted.commands / seconds:.0f} |")


if __name__ == "__main__":
    main()
