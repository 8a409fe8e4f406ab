"""Seed 004: lessons learned and the strategy blacklist, through the service."""

from __future__ import annotations

import random
import sqlite3
import string
import subprocess
import sys
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import InvalidInput, Outcome, RecoveryService, UnknownTask
from devs.domain.chart import TaskState
from tests.helpers import event_count


@pytest.fixture
def tasks(service: RecoveryService) -> RecoveryService:
    service.start_task("A")
    service.start_task("B")
    return service


def test_logged_lesson_is_retrievable_by_task(tasks: RecoveryService) -> None:
    lesson = tasks.log_lesson("A", "mock the network layer", "mocks hid a real bug")
    [found] = tasks.lessons("A")
    assert found == lesson
    assert found.task_id == "A"
    assert found.failed_strategy == "mock the network layer"
    assert found.rca_summary == "mocks hid a real bug"
    assert found.logged_at is not None


def test_exact_and_fuzzy_matches_are_blacklisted(tasks: RecoveryService) -> None:
    tasks.log_lesson("A", "mock the network layer", "why")
    assert tasks.is_strategy_blacklisted("A", "mock the network layer") is True
    assert tasks.is_strategy_blacklisted("A", "mock the network layers") is True
    assert tasks.is_strategy_blacklisted("A", "rewrite the scheduler") is False


def test_cross_task_isolation(tasks: RecoveryService) -> None:
    tasks.log_lesson("A", "mock the network layer", "why")
    assert tasks.is_strategy_blacklisted("B", "mock the network layer") is False
    assert tasks.lessons("B") == []
    assert tasks.blacklist_directive("B") == ""


def test_directive_lists_the_task_strategies(tasks: RecoveryService) -> None:
    assert tasks.blacklist_directive("A") == ""
    tasks.log_lesson("A", "mock the network layer", "why")
    tasks.log_lesson("A", "retry with sleep(10)", "flaky")
    directive = tasks.blacklist_directive("A")
    assert directive.startswith(
        "SYSTEM: The following strategies have already failed and MUST NOT be used:"
    )
    assert '- "mock the network layer"' in directive
    assert '- "retry with sleep(10)"' in directive


def test_same_strategy_twice_keeps_one_row_newest_summary(
    tasks: RecoveryService,
) -> None:
    tasks.log_lesson("A", "mock the network layer", "first")
    tasks.log_lesson("A", "mock the network layer", "second, better")
    [lesson] = tasks.lessons("A")
    assert lesson.rca_summary == "second, better"


def test_contract_row_exists_in_sqlite(tasks: RecoveryService, db_path: Path) -> None:
    tasks.log_lesson("A", "mock the network layer", "mocks hid a real bug")
    tasks.lessons("A")  # the view catches up before any read
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute(
            "SELECT task_id, failed_strategy, rca_summary, logged_at "
            "FROM lessons_learned WHERE task_id = 'A'"
        ).fetchall()
    [(task_id, failed_strategy, rca_summary, logged_at)] = rows
    assert (task_id, failed_strategy) == ("A", "mock the network layer")
    assert rca_summary == "mocks hid a real bug"
    assert logged_at


def test_second_attempt_with_a_failed_strategy_is_blocked(
    tasks: RecoveryService,
) -> None:
    llm_calls = []

    def agent_turn(strategy: str) -> None:
        decision = tasks.begin_attempt("A", strategy)
        if not decision.proceed:
            return
        llm_calls.append(strategy)  # stands in for the LLM call
        tasks.record_gate("A", 1, error="tests failed")
        tasks.log_lesson("A", strategy, "root cause: wrong approach")

    agent_turn("patch the parser with a regex")
    agent_turn("patch the parser with a regex")
    assert llm_calls == ["patch the parser with a regex"]
    summary = tasks.task("A")
    assert summary.state is TaskState.PAUSED
    assert summary.status == "paused_for_intervention"
    assert summary.consecutive_failures == 2
    [session] = tasks.pending_sessions()
    assert session.reason == "blacklisted_strategy"
    kinds = [n.kind for n in tasks.notifications()]
    assert kinds == ["BLACKLISTED_STRATEGY_ATTEMPTED", "TASK_PAUSED"]


def test_blocked_attempt_decision(tasks: RecoveryService) -> None:
    tasks.log_lesson("A", "patch the parser with a regex", "why")
    decision = tasks.begin_attempt("A", "patch the parser with a regex!")
    assert decision.proceed is False
    assert decision.blacklisted is True
    assert decision.matched_strategy == "patch the parser with a regex"
    assert decision.outcome is Outcome.PAUSE
    assert decision.session_id is not None
    assert "patch the parser with a regex" in decision.directive


def test_allowed_attempt_gets_the_directive(tasks: RecoveryService) -> None:
    tasks.log_lesson("A", "patch the parser with a regex", "why")
    decision = tasks.begin_attempt("A", "write a recursive descent parser")
    assert decision.proceed is True
    assert decision.blacklisted is False
    assert decision.directive == tasks.blacklist_directive("A")


@pytest.mark.parametrize(
    ("strategy", "summary", "message"),
    [
        ("", "why", "failed_strategy must not be empty"),
        ("x" * 4_001, "why", "failed_strategy is 4,001 characters long"),
        ("ok", "", "rca_summary must not be empty"),
        ("ok", "y" * 16_001, "rca_summary is 16,001 characters long"),
    ],
)
def test_bad_lessons_are_rejected(
    tasks: RecoveryService, db_path: Path, strategy: str, summary: str, message: str
) -> None:
    events = event_count(db_path)
    with pytest.raises(InvalidInput, match=message):
        tasks.log_lesson("A", strategy, summary)
    assert event_count(db_path) == events


def test_lessons_of_an_unknown_task(tasks: RecoveryService) -> None:
    with pytest.raises(UnknownTask, match="unknown task 'zz'"):
        tasks.lessons("zz")
    with pytest.raises(UnknownTask):
        tasks.log_lesson("zz", "a", "b")


def test_long_unicode_strategies(tasks: RecoveryService) -> None:
    long = "渐进式重构 " * 500  # 3,000 characters
    tasks.log_lesson("A", long, "too slow")
    assert tasks.is_strategy_blacklisted("A", long[:-3] + "abc") is True
    assert tasks.is_strategy_blacklisted("A", "🙂" * 10) is False


def _secret(seed: int) -> str:
    """200 characters that read as a secret after ``api_key=``."""
    rnd = random.Random(seed)
    return "".join(rnd.choices(string.ascii_letters + string.digits, k=200))


LONG_STRATEGY = "retry the flaky upload " * 24  # 552 characters: a long text


def test_a_long_candidate_is_redacted_before_it_is_compared(
    tasks: RecoveryService,
) -> None:
    """A candidate longer than the short texts redaction remembers, holding a
    credential, is compared as redacted, call after call: the raw texts are
    200 edits apart (more than the 20% allowed), the redacted ones equal."""
    tasks.log_lesson("A", LONG_STRATEGY + " api_key=" + _secret(1), "why")
    [lesson] = tasks.lessons("A")
    assert lesson.failed_strategy == LONG_STRATEGY + " api_key=[REDACTED]"
    candidate = LONG_STRATEGY + " api_key=" + _secret(2)
    for _ in range(3):
        assert tasks.is_strategy_blacklisted("A", candidate) is True
    assert tasks.is_strategy_blacklisted("A", LONG_STRATEGY + " api_key=") is True


def test_a_long_candidate_asked_again_sees_each_new_lesson(
    tasks: RecoveryService,
) -> None:
    """The same long candidate, remembered as clean by redaction, asked
    again after a lesson that matches it: the new lesson is seen."""
    candidate = "x" * 600 + LONG_STRATEGY
    for _ in range(2):
        assert tasks.is_strategy_blacklisted("A", candidate) is False
    tasks.log_lesson("A", "y" * 600 + LONG_STRATEGY, "why")  # 600 edits: too far
    assert tasks.is_strategy_blacklisted("A", candidate) is False
    tasks.log_lesson("A", "x" * 590 + LONG_STRATEGY, "why")  # 10 edits
    assert tasks.is_strategy_blacklisted("A", candidate) is True


WRITE_LESSON = """
import sys
from devs.adapters.config import Settings, open_service
with open_service(Settings(db=sys.argv[1])) as service:
    service.log_lesson(sys.argv[2], sys.argv[3], "another process")
print("written")
"""


def test_lessons_another_service_or_process_logs_are_seen_on_the_next_call(
    tmp_path: Path,
) -> None:
    """A service that asked (and holds the task's strategies in memory) sees a
    lesson logged in the same file by another service, then by another
    process, on its very next call, each time: also when another query of
    its own caught up first (its views' positions then are those it last
    saw, the strategies in memory still older)."""
    db = tmp_path / "shared.sqlite"
    with (
        open_service(Settings(db=str(db))) as reader,
        open_service(Settings(db=str(db))) as writer,
    ):
        reader.start_task("A")
        first, second, third = (f"strategy {n} " + LONG_STRATEGY for n in "123")
        for _ in range(2):  # the second answer is the remembered strategies'
            assert reader.is_strategy_blacklisted("A", "mock the network") is False
        writer.log_lesson("A", "mock the network", "another service")
        assert reader.lessons("A")[0].failed_strategy == "mock the network"
        assert reader.is_strategy_blacklisted("A", "mock the network") is True
        assert reader.is_strategy_blacklisted("A", "z" * 700) is False
        for strategy in (first, second):
            wrote = subprocess.run(
                [sys.executable, "-c", WRITE_LESSON, str(db), "A", strategy * 2],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert wrote.stdout.strip() == "written", wrote.stderr
            if strategy == second:  # another query catches up first
                assert [entry.task_id for entry in reader.tasks()] == ["A"]
            assert reader.is_strategy_blacklisted("A", strategy * 2) is True
        # 2 edits from each of the two: fuzzy, as ever
        assert reader.is_strategy_blacklisted("A", third * 2) is True
        assert reader.is_strategy_blacklisted("A", "z" * 700) is False
        assert len(reader.lessons("A")) == 3
        with pytest.raises(UnknownTask):
            reader.is_strategy_blacklisted("B", "mock the network")
        writer.start_task("B")
        assert reader.is_strategy_blacklisted("B", "mock the network") is False


def test_a_lesson_recorded_without_a_fold_is_seen_on_the_next_call(
    tmp_path: Path,
) -> None:
    """A lesson in the log past the views (its writer folded nothing: the
    views' positions did not move, the log's end did) is folded by the next
    question, which sees it, though the task's strategies are in memory."""
    db = tmp_path / "gap.sqlite"
    with (
        open_service(Settings(db=str(db))) as stale,
        open_service(Settings(db=str(db))) as reader,
    ):
        stale.start_task("A")
        stale.log_lesson("A", "use a regex", "why")
        for _ in range(2):
            assert reader.is_strategy_blacklisted("A", "mock the network") is False
        stale.read_models.close()  # this one records, folds no more
        stale.log_lesson("A", "mock the network", "why")
        assert reader.is_strategy_blacklisted("A", "mock the network") is True
        assert reader.blacklist_directive("A").count("\n- ") == 2
