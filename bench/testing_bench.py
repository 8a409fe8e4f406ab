"""How fast ``devs.testing``'s ``RecoveryMachine`` explores, in memory (its
default) and on a SQLite file, in one run.

    python bench/testing_bench.py [--examples N] [--steps N] [--backends ...]

Runs the machine for ``--examples`` examples of up to ``--steps`` commands on
each backend (a fresh store per example: ``memory_service``, the default, and
``sqlite_service``, a new file) and prints examples/s and commands/s of each,
and their ratio.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from devs.domain import Policy, RecoveryService
from devs.testing import RecoveryMachine, memory_service, sqlite_service

BACKENDS: dict[str, Callable[[Policy], RecoveryService]] = {
    "memory": memory_service,
    "sqlite": sqlite_service,
}


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


def measure(backend: str, examples: int, steps: int) -> tuple[int, int, float]:
    """Examples, commands and seconds of one exploration on ``backend``."""

    class OnBackend(Counted):
        make_service = staticmethod(BACKENDS[backend])
        examples = 0
        commands = 0

    start = time.perf_counter()
    run_state_machine_as_test(
        OnBackend,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    return OnBackend.examples, OnBackend.commands, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="devs.testing's speed")
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--backends", nargs="+", choices=list(BACKENDS), default=list(BACKENDS)
    )
    args = parser.parse_args(argv)
    rates: dict[str, float] = {}
    print(
        f"| backend | examples (up to {args.steps} commands) | commands "
        "| seconds | examples/s | commands/s |"
    )
    print("|---|---|---|---|---|---|")
    for backend in args.backends:
        examples, commands, seconds = measure(backend, args.examples, args.steps)
        rates[backend] = examples / seconds
        print(
            f"| {backend} | {examples} | {commands} | {seconds:.1f} "
            f"| {examples / seconds:.1f} | {commands / seconds:.0f} |"
        )
    if {"memory", "sqlite"} <= rates.keys():
        print(
            f"\nin memory / on a SQLite file: {rates['memory'] / rates['sqlite']:.2f} x"
        )


if __name__ == "__main__":
    main()
