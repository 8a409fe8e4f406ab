"""An agent-like loop driven through the whole failure ladder.

Run it as it is:  python examples/agent_loop.py [--db PATH]

Without --db it uses a fresh SQLite file in a temporary directory. A run of three
tasks (plan -> implement -> review); the "implement" task fails, learns a lesson,
repeats a failed strategy (blocked, paused), spikes its entropy (paused), fails to
an escalation twice, is handed off to a human, comes back and finally passes.
Every decision the service returns is printed.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from devs.domain import (
    AttemptDecision,
    GateDecision,
    GraphSuspended,
    RecoveryService,
    suspend_if_stopped,
)


def show(step: str, decision: AttemptDecision | GateDecision) -> None:
    extra = ""
    if isinstance(decision, GateDecision):
        extra = f" passed={decision.passed} outcome={decision.outcome}"
        if decision.next_node:
            extra += f" next={decision.next_node}"
    else:
        extra = f" proceed={decision.proceed}"
        if decision.blacklisted:
            extra += f" blacklisted (matches {decision.matched_strategy!r})"
    print(
        f"  {step:<44} state={decision.state:<12} "
        f"failures={decision.consecutive_failures}{extra}"
    )


def attempt_and_test(
    app: RecoveryService, task: str, strategy: str, exit_code: int, error: str = ""
) -> GateDecision | None:
    """One agent turn: check the strategy, 'call the LLM', run the test gate."""
    decision = app.begin_attempt(task, strategy)
    show(f"attempt {strategy!r}", decision)
    suspend_if_stopped(decision)
    gate = app.record_gate(
        task,
        exit_code,
        gate="tests",
        strategy=strategy,
        error=error or None,
        output=f"pytest: {error or 'all green'}",
    )
    show(f"gate tests exit={exit_code}", gate)
    suspend_if_stopped(gate)
    return gate


def human(app: RecoveryService, task: str, why: str) -> None:
    result = app.resume(task, actor="operator", reason=why)
    print(f"  ↳ human resumes ({why}): state={result.state}")


def main(db: Path) -> None:
    app = RecoveryService(env={"SQLITE_DBNAME": str(db)})
    print(f"devs-recovery demo on {db}")
    app.start_run(
        "demo-run", {"plan": [], "implement": ["plan"], "review": ["implement"]}
    )

    print("\n[plan]")
    app.start_task("plan", run_id="demo-run", agent="planner")
    attempt_and_test(app, "plan", "outline the parser work", 0)

    print("\n[implement]")
    app.start_task("implement", run_id="demo-run", agent="coder", last_commit="4f2a9c1")
    attempt_and_test(
        app, "implement", "patch the tokenizer with a regex", 1, "IndexError"
    )
    app.log_lesson(
        "implement",
        "patch the tokenizer with a regex",
        "regexes cannot match nested brackets",
    )
    print("  lesson logged; directive for the next prompt:")
    print("    " + app.blacklist_directive("implement").replace("\n", "\n    "))

    try:
        attempt_and_test(app, "implement", "patch the tokenizer with regexes", 1)
    except GraphSuspended as signal:
        print(f"  ⏸ graph suspended: {signal.reason} (session {signal.session_id})")
        human(app, "implement", "pick a different approach")

    entropy = app.report_entropy("implement", 0.82)
    print(f"  entropy 0.82 -> triggered={entropy.triggered}")
    try:
        suspend_if_stopped(entropy)
    except GraphSuspended as signal:
        print(f"  ⏸ graph suspended: {signal.reason}")
        human(app, "implement", "agent is confused; reset the context")

    for strategy, error in [
        ("parser combinator library", "RecursionError"),
        ("hand-written lexer", "AssertionError: 3 != 4"),
    ]:
        try:
            attempt_and_test(app, "implement", strategy, 1, error)
        except GraphSuspended:
            report = app.failure_report("implement").last_escalation
            assert report is not None
            print(
                f"  ⚠ escalation: {report.failure_count} failures, "
                f"strategies {list(report.failed_strategies)}, last error "
                f"{report.last_error!r}"
            )
            human(app, "implement", "one more try")

    try:
        attempt_and_test(app, "implement", "vendor an old parser", 1, "ImportError")
    except GraphSuspended:
        [entry] = app.handoff_queue()
        payload = entry.payload
        digest = (payload.last_error_hash or "")[:12]
        print(
            f"  ✋ handed off: {payload.failure_count} failures, "
            f"last error hash {digest}…, last commit {payload.last_commit}"
        )
        app.claim_handoff("implement", actor="senior-dev")
        app.resolve_handoff(
            "implement",
            actor="senior-dev",
            resolution="return",
            reason="pinned the grammar; try recursive descent",
        )
        print("  ↳ senior-dev claimed the hand-off and returned it to the agent")

    attempt_and_test(app, "implement", "recursive descent parser", 0)

    print("\n[review]")
    app.start_task("review", run_id="demo-run", agent="reviewer")
    attempt_and_test(app, "review", "read the diff", 0)

    run = app.run_state("demo-run")
    print(f"\nrun {run.run_id}: {run.status}, completed {list(run.completed)}")
    print("notifications for humans, in log order:")
    for note in app.notifications():
        print(f"  #{note.position:<3} {note.kind:<38} {note.task_id} {note.reason}")
    history = app.history("implement")
    print(
        f"'implement' has {len(history)} events; replayed, it ends {history[-1].state}"
    )
    app.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", type=Path, help="SQLite file (default: a fresh temp file)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    main(args.db or Path(tempfile.mkdtemp(prefix="devs-demo-")) / "devs_state.sqlite")
