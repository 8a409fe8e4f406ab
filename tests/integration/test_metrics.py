"""``metrics()`` over a scripted history, on SQLite and on PostgreSQL: every
figure computed by hand, the filters, verify, a rebuild, and bad arguments.

The default policy escalates at 3 consecutive failures and hands off at 5.
The history (``F`` a failure, ``P`` a pause, ``E`` an escalation, ``H`` a
hand-off; what answered each stop in brackets):

========  =====  ===========================================  ===========  ====
task      run    what happens                                 ends         fbh
========  =====  ===========================================  ===========  ====
a         r1     F F F E[resume] F E[rewind], passes          COMPLETED    3
b         r1     F F F E[resume] F E[resume] F H[claim],      COMPLETED    3
                 resolved complete
c         r1     P (entropy) [skip]                           SKIPPED      0
d         -      F, blocked F P[resume], F E (open)           ESCALATION   2
e         -      F F F E[resume] F E[resume] F H (open)       HAND_OFF     3
f         -      passes                                       COMPLETED    -
g         -      F P[resume] F F E[resume] F E[resume] F      RUNNING      1
                 H[rewind]
========  =====  ===========================================  ===========  ====

(fbh: failures before the first human.) Strategies that failed: ``regex``
3 times in a and twice in d (once blocked), ``zeta`` 5 times in e,
``parser`` once in a, ``loop`` once in d.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest

from devs.domain import InvalidInput, Metrics, RecoveryService, UnknownRun
from devs.domain.chart import TaskState
from tests.conftest import MakeService

STOPS = {"Escalated", "Paused", "HandedOff"}
ANSWERS = {"Resumed", "Rewound", "Skipped", "HandoffClaimed"}
HUMAN: dict[str, Any] = {"actor": "ann", "reason": "go on"}


def fail(service: RecoveryService, task_id: str, times: int = 1, **kw: str) -> None:
    for _ in range(times):
        service.record_gate(task_id, 1, error="boom", **kw)


def script(service: RecoveryService) -> datetime:
    """The history above; returns when task d started (the ``since`` of the
    later tasks)."""
    service.start_run("r1", {"a": [], "b": [], "c": []})
    service.start_task("a", run_id="r1")
    service.begin_attempt("a", "regex")
    fail(service, "a", 3)
    service.resume("a", **HUMAN)
    service.begin_attempt("a", "parser")
    fail(service, "a")
    service.rewind("a", **HUMAN)
    service.record_gate("a", 0)

    service.start_task("b", run_id="r1")
    fail(service, "b", 3)
    service.resume("b", **HUMAN)
    fail(service, "b")
    service.resume("b", **HUMAN)
    fail(service, "b")
    service.claim_handoff("b", actor="bo")
    service.resolve_handoff("b", actor="bo", resolution="complete", reason="done")

    service.start_task("c", run_id="r1")
    assert service.report_entropy("c", 0.9).triggered
    service.skip("c", **HUMAN)

    service.start_task("d")
    service.begin_attempt("d", "regex")
    fail(service, "d")
    service.log_lesson("d", "regex", "cannot nest")
    assert service.begin_attempt("d", "regex").blacklisted
    service.resume("d", **HUMAN)
    service.begin_attempt("d", "loop")
    fail(service, "d")

    service.start_task("e")
    fail(service, "e", 3, strategy="zeta")
    service.resume("e", **HUMAN)
    fail(service, "e", strategy="zeta")
    service.resume("e", **HUMAN)
    fail(service, "e", strategy="zeta")

    service.start_task("f")
    service.record_gate("f", 0)

    service.start_task("g")
    fail(service, "g")
    service.report_entropy("g", 0.8)
    service.resume("g", **HUMAN)
    fail(service, "g", 2)
    service.resume("g", **HUMAN)
    fail(service, "g")
    service.resume("g", **HUMAN)
    fail(service, "g")
    service.rewind("g", **HUMAN)

    states = {t: service.task(t).state for t in "abcdefg"}
    assert states == {
        "a": "COMPLETED",
        "b": "COMPLETED",
        "c": "SKIPPED",
        "d": "ESCALATION",
        "e": "HAND_OFF",
        "f": "COMPLETED",
        "g": "RUNNING",
    }
    return service.history("d", limit=1)[0].timestamp


def waits(service: RecoveryService, tasks: str) -> tuple[list[float], int]:
    """Seconds of each answered stop and the number of open ones, read from
    the tasks' recorded events (an independent fold of ``history()``)."""
    answered: list[float] = []
    still_open = 0
    for task_id in tasks:
        opened: datetime | None = None
        for entry in service.history(task_id):
            if entry.event in STOPS:
                opened = entry.timestamp
            elif entry.event in ANSWERS and opened is not None:
                answered.append((entry.timestamp - opened).total_seconds())
                opened = None
        still_open += opened is not None
    return answered, still_open


def rank(values: list[float], percent: int) -> float:
    """Nearest rank, exactly: the value at rank ceil(P/100 * N)."""
    return sorted(values)[math.ceil(Fraction(percent * len(values), 100)) - 1]


def states(**counts: int) -> dict[TaskState, int]:
    return {state: counts.get(state, 0) for state in TaskState}


def check_waits(found: Metrics, service: RecoveryService, tasks: str) -> None:
    seconds, still_open = waits(service, tasks)
    times = found.time_to_human
    assert (times.count, times.open) == (len(seconds), still_open)
    assert all(s >= 0 for s in seconds)
    assert times.total == pytest.approx(sum(seconds))
    assert times.p50 == pytest.approx(rank(seconds, 50))
    assert times.p90 == pytest.approx(rank(seconds, 90))
    assert times.p50 is not None
    assert times.p90 is not None
    assert times.p50 <= times.p90 <= max(seconds)


def test_every_figure_of_a_scripted_history(make_service: MakeService) -> None:
    service = make_service()
    script(service)
    found = service.metrics()
    assert (found.run_id, found.since) == (None, None)
    assert found.tasks == 7
    assert found.tasks_by_state == states(
        RUNNING=1, ESCALATION=1, HAND_OFF=1, COMPLETED=3, SKIPPED=1
    )
    assert found.loop_rate == pytest.approx(6 / 7)  # all but f
    before = found.failures_before_first_human
    # 0 1 2 3 3 3: p50 is the 3rd value, p90 the 6th
    assert (before.count, before.total, before.mean) == (6, 12.0, 2.0)
    assert (before.p50, before.p90) == (2.0, 3.0)
    assert (found.time_to_human.count, found.time_to_human.open) == (13, 2)
    check_waits(found, service, "abcdefg")
    assert found.handoffs_by_resolution == {
        "return": 1,  # g, rewound
        "complete": 1,  # b
        "skip": 0,
        "open": 1,  # e
    }
    assert found.blocked_attempts == 1
    assert [(s.strategy, s.failures) for s in found.top_failed_strategies] == [
        ("regex", 5),
        ("zeta", 5),
        ("loop", 1),
        ("parser", 1),
    ]
    assert service.verify().ok
    assert service.rebuild_projections("metrics")
    assert service.metrics() == found
    assert service.verify().ok


def test_filters_by_run_and_start_time(make_service: MakeService) -> None:
    service = make_service()
    since = script(service)

    run = service.metrics(run_id="r1")
    assert run.run_id == "r1"
    assert run.tasks == 3
    assert run.tasks_by_state == states(COMPLETED=2, SKIPPED=1)
    assert run.loop_rate == 1.0
    before = run.failures_before_first_human
    assert (before.count, before.total, before.p50, before.p90) == (3, 6.0, 3.0, 3.0)
    assert (run.time_to_human.count, run.time_to_human.open) == (6, 0)
    check_waits(run, service, "abc")
    assert run.handoffs_by_resolution == {
        "return": 0,
        "complete": 1,
        "skip": 0,
        "open": 0,
    }
    assert run.blocked_attempts == 0
    assert [(s.strategy, s.failures) for s in run.top_failed_strategies] == [
        ("regex", 3),
        ("parser", 1),
    ]

    later = service.metrics(since=since)  # d started exactly then: included
    assert later.since == since
    assert later.tasks == 4
    assert later.tasks_by_state == states(
        RUNNING=1, ESCALATION=1, HAND_OFF=1, COMPLETED=1
    )
    assert later.loop_rate == 0.75
    before = later.failures_before_first_human
    assert (before.count, before.total, before.p50, before.p90) == (3, 6.0, 2.0, 3.0)
    assert (later.time_to_human.count, later.time_to_human.open) == (7, 2)
    check_waits(later, service, "defg")
    assert later.handoffs_by_resolution == {
        "return": 1,
        "complete": 0,
        "skip": 0,
        "open": 1,
    }
    assert later.blocked_attempts == 1
    assert [(s.strategy, s.failures) for s in later.top_failed_strategies] == [
        ("zeta", 5),
        ("regex", 2),
        ("loop", 1),
    ]
    just_after = service.metrics(since=since + timedelta(microseconds=1))
    assert just_after.tasks == 3  # not d

    both = service.metrics(run_id="r1", since=since)
    assert both.tasks == 0
    assert both.tasks_by_state == states()
    assert both.loop_rate == 0.0
    assert both.failures_before_first_human.p50 is None
    assert both.time_to_human.p90 is None
    assert both.top_failed_strategies == ()


def test_no_tasks_no_figures(make_service: MakeService) -> None:
    found = make_service().metrics()
    assert found.tasks == 0
    assert found.tasks_by_state == states()
    assert found.loop_rate == 0.0
    for spread in (found.failures_before_first_human, found.time_to_human):
        assert (spread.count, spread.total) == (0, 0.0)
        assert (spread.mean, spread.p50, spread.p90) == (None, None, None)
    assert found.time_to_human.open == 0
    assert found.handoffs_by_resolution == dict.fromkeys(
        ("return", "complete", "skip", "open"), 0
    )
    assert (found.blocked_attempts, found.top_failed_strategies) == (0, ())


def test_the_ten_strategies_that_failed_most(make_service: MakeService) -> None:
    """Most failures first, ties in code-point order (``Z`` before ``a``,
    whatever the database's collation), summed across tasks, at most 10."""
    service = make_service(
        DEVS_ESCALATION_THRESHOLD="1000", DEVS_HANDOFF_THRESHOLD="1000"
    )
    service.start_task("one")
    service.start_task("two")
    counts = {"b": 3, "alpha": 2, "Zeta": 2, "é": 2, "e": 2, "x": 1}
    counts.update({f"s{n:02d}": 1 for n in range(8)})
    for strategy, times in counts.items():
        fail(service, "one", times, strategy=strategy)
    fail(service, "two", 2, strategy="x")  # x: 1 + 2 = 3
    fail(service, "two")  # a failure naming no strategy counts for none
    found = service.metrics().top_failed_strategies
    assert [(s.strategy, s.failures) for s in found] == [
        ("b", 3),
        ("x", 3),
        ("Zeta", 2),
        ("alpha", 2),
        ("e", 2),
        ("é", 2),
        ("s00", 1),
        ("s01", 1),
        ("s02", 1),
        ("s03", 1),
    ]
    assert service.metrics(since=datetime.now(UTC) + timedelta(days=1)).tasks == 0


def test_bad_arguments_are_refused_naming_them(make_service: MakeService) -> None:
    service = make_service()
    service.start_run("r", {"a": []})
    with pytest.raises(InvalidInput, match="since must be timezone-aware") as naive:
        service.metrics(since=datetime(2024, 5, 1))
    assert naive.value.field == "since"
    with pytest.raises(InvalidInput, match="since must be a datetime") as text:
        service.metrics(since="2024-05-01T00:00:00Z")  # type: ignore[arg-type]
    assert text.value.field == "since"
    with pytest.raises(InvalidInput, match="run_id must not be empty") as empty:
        service.metrics(run_id="")
    assert empty.value.field == "run_id"
    with pytest.raises(UnknownRun, match="unknown run 'nope'"):
        service.metrics(run_id="nope")
    assert service.metrics(run_id="r").tasks == 0


def test_an_answer_without_a_session_keeps_every_read_model(
    make_service: MakeService,
) -> None:
    """A rewind or skip that answers no session (a handed-off task, a running
    one) once made ``hitl_sessions`` record its position apart from the fold:
    on PostgreSQL the runner's batch then failed, its events were lost from
    every read model while the position moved past them, and ``verify()``
    failed."""
    service = make_service()
    service.start_task("t")
    service.rewind("t", **HUMAN)  # running: no session
    fail(service, "t", 3)
    service.resume("t", **HUMAN)
    fail(service, "t")
    service.resume("t", **HUMAN)
    fail(service, "t")  # handed off: no session either
    assert service.task("t").state == "HAND_OFF"
    service.skip("t", **HUMAN)
    service.start_task("u")
    assert [entry.task_id for entry in service.tasks()] == ["t", "u"]
    assert service.metrics().tasks_by_state == states(RUNNING=1, SKIPPED=1)
    assert service.metrics().handoffs_by_resolution["skip"] == 1
    assert service.verify().ok
