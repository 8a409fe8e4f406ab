"""``devs metrics``, run as a user runs it (a subprocess per call), over a
history written through the Python API into the same file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import Metrics
from tests.e2e.test_cli import BAD_INPUT, NOT_FOUND, Devs, assert_one_line_error
from tests.e2e.test_cli_shell import on_terminal


@pytest.fixture
def devs(tmp_path: Path) -> Devs:
    return Devs(tmp_path / "state.sqlite", tmp_path)


def history(db: Path) -> str:
    """Task a of run r escalates and is resumed; task b is blocked and
    paused; returns when b started (ISO 8601)."""
    with open_service(Settings(db=str(db))) as service:
        service.start_run("r", {"a": []})
        service.start_task("a", run_id="r")
        service.begin_attempt("a", "patch the regex")
        for _ in range(3):
            service.record_gate("a", 1, error="boom")
        service.resume("a", actor="ann", reason="go on")
        service.start_task("b")
        service.log_lesson("b", "patch the regex", "it cannot nest")
        service.begin_attempt("b", "patch the regex")
        return service.history("b", limit=1)[0].timestamp.isoformat()


def cells(stdout: str) -> list[list[str]]:
    """Each row of the printed tables (tab-separated in a pipe), as its
    cells' text, without the lines of column names."""
    return [
        [cell.strip() for cell in line.split("\t")]
        for line in stdout.splitlines()
        if line not in ("figure\tvalue", "failures\tstrategy")
    ]


def test_metrics_table(devs: Devs) -> None:
    history(devs.db)
    printed = devs("metrics").stdout
    assert printed.startswith("figure\tvalue\n")
    assert "Metrics (all tasks)" in on_terminal(devs.db, "metrics")
    rows = cells(printed)
    assert rows[:17] == [
        ["tasks", "2"],
        ["RUNNING", "1"],
        ["GATE_FAILED", "0"],
        ["ESCALATION", "0"],
        ["PAUSED", "1"],
        ["HAND_OFF", "0"],
        ["COMPLETED", "0"],
        ["SKIPPED", "0"],
        ["loop rate", "100.0% (2 of 2)"],
        ["reached a human", "2 tasks"],
        # b: one blocked attempt before its pause; a: three failed gates
        ["failures before", "mean 2, p50 1, p90 3"],
        ["waits for a human", "1 answered, 1 open"],
        ["time to human", rows[12][1]],
        ["hand-offs", "return 0, complete 0, skip 0, open 0"],
        ["blocked attempts", "1"],
        # a failed three times alike (1.00); b's one blocked attempt scores 0
        ["stuck (score >= 0.75)", "1 task (error_repeat 1, strategy_repeat 1)"],
        ["highest score", "mean 0.50, p50 0.00, p90 1.00"],
    ]
    assert rows[12][1].startswith("mean ")
    assert rows[12][1].endswith(" s")
    assert "failures\tstrategy" in printed
    assert rows[17:] == [["4", "patch the regex"]]


def test_metrics_json_and_filters(devs: Devs) -> None:
    since = history(devs.db)
    everything = Metrics.model_validate(devs.json("metrics"))
    with open_service(Settings(db=str(devs.db))) as service:
        assert everything == service.metrics()
    assert everything.tasks == 2
    ran = Metrics.model_validate(devs.json("metrics", "--run", "r"))
    assert (ran.run_id, ran.tasks, ran.blocked_attempts) == ("r", 1, 0)
    later = Metrics.model_validate(devs.json("metrics", "--since", since))
    assert (later.tasks, later.blocked_attempts) == (1, 1)
    assert later.since is not None
    assert later.since.isoformat() == since
    title = on_terminal(devs.db, "metrics", "--run", "r", "--since", since, columns=200)
    assert f"run r, started since {since}" in title
    assert (
        "no failed strategies" in devs("metrics", "--run", "r", "--since", since).stdout
    )


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--since", "yesterday"), BAD_INPUT, "--since must be an ISO 8601 time"),
        (("--since", "2024-05-01"), BAD_INPUT, "--since must name its timezone"),
        (("--run", " r"), BAD_INPUT, "run_id must not start or end with whitespace"),
        (("--run", "nope"), NOT_FOUND, "unknown run 'nope'"),
    ],
)
def test_bad_filters_are_one_line(
    devs: Devs, args: tuple[str, ...], code: int, message: str
) -> None:
    history(devs.db)
    assert_one_line_error(devs("metrics", *args, code=code), message)
    # With --json, the same line and the error as JSON on stdout.
    answered = devs("metrics", "--json", *args, code=code)
    assert answered.stderr.startswith("devs: error: ")
    assert message in json.loads(answered.stdout)["error"]["message"]
