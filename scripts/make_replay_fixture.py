"""Write tests/fixtures/replay-check.sqlite: histories decided by this release.

The replay check (``devs replay-check``, tests/integration/test_replay_fixture.py
and .ci/run) re-decides every history in it with the code of the day: a change
that alters how these histories decide fails CI. Run it again only when a
change of decisions is intended (and say so in the commit):

    .venv/bin/python scripts/make_replay_fixture.py tests/fixtures/replay-check.sqlite

The histories cover every path of the ladder under four policies: the default
(stuck detection observing), a stricter one, stuck detection gating, and off.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from devs.adapters.config import Settings, open_service
from devs.domain import IllegalTransition
from devs.domain.policy import Policy, StuckDetection

DEFAULT = Policy()
STRICT = Policy(escalation_threshold=2, handoff_threshold=3, failure_history_cap=5)
GATE = Policy(
    escalation_threshold=4,
    handoff_threshold=6,
    hitl_entropy_threshold=0.75,
    stuck_detection=StuckDetection.GATE,
)
OFF = Policy(escalation_threshold=2, handoff_threshold=4, stuck_detection="off")


def pytest_output(failed: int, passed: int) -> str:
    return (
        "FAILED tests/test_parser.py::test_nested - AssertionError\n"
        f"==== {failed} failed, {passed} passed in 0.12s ===="
    )


def a_run_under_the_default_policy(path: Path) -> None:
    with open_service(Settings(db=str(path)), policy=DEFAULT) as app:
        app.start_run("release", {"design": [], "build": ["design"], "ship": ["build"]})
        app.start_task("design", run_id="release", agent="coder", last_commit="c0")
        app.begin_attempt("design", "sketch the module layout")
        app.record_gate("design", 0, gate="lint")

        app.start_task("build", run_id="release", agent="coder", last_commit="c1")
        app.begin_attempt("build", "parse the config with a regex")
        app.record_gate("build", 1, gate="pytest", output=pytest_output(4, 6))
        app.log_lesson("build", "parse the config with a regex", "nesting breaks it")
        app.begin_attempt("build", "Parse the config with a regex!")  # blocked
        app.resume("build", actor="ann", reason="try another idea")
        app.begin_attempt("build", "write a recursive parser")
        app.record_gate("build", 1, gate="pytest", output=pytest_output(4, 6))
        app.rewind("build", actor="bob", reason="start over", to_commit="c1")
        app.report_entropy("build", 0.2)
        app.begin_attempt("build", "fix the remaining 3 cases")
        app.record_gate("build", 1, gate="pytest", output=pytest_output(3, 7))
        app.resume("build", actor="ann", reason="nearly there")
        app.begin_attempt("build", "fix the remaining 2 cases")
        app.record_gate("build", 1, gate="pytest", output=pytest_output(2, 8))
        app.claim_handoff("build", actor="cy")
        app.resolve_handoff("build", actor="cy", resolution="return", reason="fixed")
        app.begin_attempt("build", "finish the parser")
        app.record_gate("build", 0, gate="pytest")

        app.start_task("ship", run_id="release", agent="coder", last_commit="c2")
        app.begin_attempt("ship", "publish the wheel")
        app.report_entropy("ship", 0.9)
        app.skip("ship", actor="ann", reason="shipped by hand")


def a_stricter_policy(path: Path) -> None:
    with open_service(Settings(db=str(path)), policy=STRICT) as app:
        app.start_task("strict", agent="coder")
        for i in range(2):
            app.begin_attempt("strict", "bump the timeout")
            app.record_gate("strict", None, gate="pytest", error=f"timed out ({i})")
        app.resume("strict", actor="ann", reason="once more")
        app.begin_attempt("strict", "bump the timeout again")
        app.record_gate("strict", 2, gate="pytest", output="same error")
        app.claim_handoff("strict", actor="bob")
        app.resolve_handoff("strict", actor="bob", resolution="complete", reason="done")


def stuck_detection_gating(path: Path) -> None:
    with open_service(Settings(db=str(path)), policy=GATE) as app:
        app.start_task("looping", agent="coder")
        for _ in range(3):  # the third identical failure scores 1.0: paused
            app.begin_attempt("looping", "retry the flaky download")
            app.record_gate("looping", 1, output="ConnectionError: refused")
        app.resume("looping", actor="ann", reason="the mirror is back")
        app.begin_attempt("looping", "retry the flaky download")
        app.record_gate("looping", 1, output="ConnectionError: refused")  # escalates
        app.resume("looping", actor="ann", reason="use the other mirror")
        app.begin_attempt("looping", "download from the second mirror")
        app.record_gate("looping", 0)

        app.start_task("progressing", agent="coder")
        for failed in (5, 4, 3):
            app.begin_attempt("progressing", "implement the next parser case")
            app.record_gate("progressing", 1, output=pytest_output(failed, 10 - failed))


def stuck_detection_off(path: Path) -> None:
    with open_service(Settings(db=str(path)), policy=OFF) as app:
        app.start_task("unobserved", agent="coder")
        for _ in range(4):
            try:
                app.begin_attempt("unobserved", "same thing")
                app.record_gate("unobserved", 1, output="E")
            except IllegalTransition:
                app.resume("unobserved", actor="ann", reason="go on")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    path = parser.parse_args(argv).path
    if path.exists():
        print(f"{path} exists; remove it first", file=sys.stderr)
        return 2
    for write in (
        a_run_under_the_default_policy,
        a_stricter_policy,
        stuck_detection_gating,
        stuck_detection_off,
    ):
        write(path)
    with sqlite3.connect(path) as connection:  # one file, no -wal beside it
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("PRAGMA journal_mode=DELETE")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
