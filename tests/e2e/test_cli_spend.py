"""The spend breaker at the command line, run as a user runs ``devs`` (a
subprocess per call): ``devs usage`` counts a model call and stops the task
at its budget (exit 4), ``devs resume`` is refused until ``devs budget``
raises it (exit 8), and a bad count is one line and exit 6."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_cli import (
    BAD_INPUT,
    OK,
    PAUSED,
    REFUSED,
    USAGE,
    Devs,
    assert_one_line_error,
    devs,
)
from tests.helpers import event_count

__all__ = ["devs"]  # the fixture, used by name

BUDGET = {"DEVS_TASK_BUDGET_USD": "1"}
CALL = ("--model", "claude-sonnet-4-5-20250929", "--output", "0")


def test_a_budget_stops_the_task_until_a_person_raises_it(devs: Devs) -> None:
    devs("task", "start", "t1", env=BUDGET)
    first = devs("usage", "t1", *CALL, "--input", "200000", "--usage-id", "m1")
    assert first.stdout.strip() == "t1: USD 0.6000 of 1 spent, 200,000 tokens"
    again = devs("usage", "t1", *CALL, "--input", "200000", "--usage-id", "m1")
    assert "counted before: nothing recorded" in again.stdout
    stopped = devs.json("usage", "t1", *CALL, "--input", "200000", code=PAUSED)
    assert stopped["triggered"] is True
    assert stopped["spend"]["spent_usd"] == 1.2
    assert devs.json("task", "show", "t1")["pending_session"]["reason"] == (
        "budget_exhausted"
    )
    before = event_count(devs.db)
    refused = devs("resume", "t1", "--reason", "go", code=REFUSED)
    assert_one_line_error(refused, "raise it first (`devs budget t1 --usd N`")
    low = devs("budget", "t1", "--usd", "1.1", "--reason", "more", code=BAD_INPUT)
    assert_one_line_error(low, "is not above what task 't1' has spent")
    assert event_count(devs.db) == before
    raised = devs.json("budget", "t1", "--usd", "3", "--reason", "worth it")
    assert raised["spend"]["budget_usd"] == 3.0
    devs("resume", "t1", "--reason", "go", code=OK)
    assert devs.json("task", "show", "t1")["state"] == "RUNNING"


def test_a_bad_count_is_refused_in_one_line(devs: Devs) -> None:
    devs("task", "start", "t1")
    before = event_count(devs.db)
    negative = devs("usage", "t1", *CALL, "--input", "-1", code=USAGE)
    assert "--input" in negative.stderr
    blank = devs(
        "usage", "t1", "--model", " ", "--input", "1", "--output", "1",
        code=BAD_INPUT,
    )  # fmt: skip
    assert_one_line_error(blank, "model must not be empty")
    assert event_count(devs.db) == before


def test_a_runs_budget_stops_its_tasks_until_a_person_raises_it(
    devs: Devs, tmp_path: Path
) -> None:
    dag = tmp_path / "dag.json"
    dag.write_text('{"a": [], "b": []}')
    devs("run", "start", "r", "--dag", str(dag), env={"DEVS_RUN_BUDGET_USD": "1"})
    devs("task", "start", "a", "--run", "r")
    devs("task", "start", "b", "--run", "r")
    devs("usage", "a", *CALL, "--input", "200000")
    stopped = devs("usage", "b", *CALL, "--input", "200000", code=PAUSED)
    assert "budget spent: paused for a human (PAUSED)" in stopped.stdout
    assert devs.json("task", "show", "a")["state"] == "PAUSED"
    refused = devs("resume", "a", "--reason", "go", code=REFUSED)
    assert_one_line_error(refused, "raise the run's budget first (`devs budget --run r")
    both = devs("budget", "a", "--run", "r", "--usd", "2", code=USAGE)
    assert "give a TASK_ID or --run RUN (one of them)" in both.stderr
    tokens = devs("budget", "--run", "r", "--tokens", "5", code=USAGE)
    assert "a run's budget is --usd alone" in tokens.stderr
    raised = devs("budget", "--run", "r", "--usd", "2", "--reason", "worth it")
    assert raised.stdout.startswith("run r: USD 1.2000 of 2 spent: budget set by")
    for task in ("a", "b"):
        devs("resume", task, "--reason", "go", code=OK)
    spent = devs.json("spend", "--run", "r")
    assert (spent["budget_usd"], spent["spent_usd"]) == (2.0, 1.2)
