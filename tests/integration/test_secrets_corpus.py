"""The secrets corpus through every free-text field of every command.

No corpus secret may be found afterwards in the raw bytes of the database
files (log, snapshots, read models, WAL), in a log line or in a decision the
caller gets back; an id that holds one is refused, writing nothing. The
ordinary corpus, sent the same way, reads back unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from devs.domain import InvalidInput, Policy, RecoveryService
from tests.corpus import ORDINARY, SECRETS, hostile, runner_output
from tests.helpers import event_count


@pytest.fixture
def app(tmp_path: Path) -> Iterator[RecoveryService]:
    service = open_service(Settings(db=str(tmp_path / "devs.sqlite")))
    service.policy = Policy(escalation_threshold=3, handoff_threshold=5)
    yield service
    service.close()


def one_line(text: str) -> str:
    return " ".join(text.splitlines())


def every_command(app: RecoveryService, task: str, text: str) -> list[object]:
    """Send ``text`` through every free-text field; returns every answer."""
    line = one_line(text)
    answers: list[object] = [app.start_task(task, agent=line)]
    answers.append(app.begin_attempt(task, text))
    for _ in range(3):  # escalates at 3
        answers.append(
            app.record_gate(task, 1, gate=line, strategy=text, error=text, output=text)
        )
    answers.append(app.resume(task, actor="ann", reason=text))
    answers.append(app.log_lesson(task, text, text))
    answers.append(app.begin_attempt(task, text))  # blocked: 4th failure, escalates
    answers.append(app.rewind(task, actor="ann", reason=text))
    answers.append(app.record_gate(task, 1, error=text, output=text))  # hands off
    answers.append(app.claim_handoff(task, actor="bob"))
    answers.append(
        app.resolve_handoff(task, actor="bob", resolution="return", reason=text)
    )
    answers.append(app.report_entropy(task, 0.99))  # pauses
    answers.append(app.skip(task, actor="ann", reason=text))
    answers.append(app.start_task(f"{task}-passes"))
    answers.append(app.record_gate(f"{task}-passes", 0, gate=line, strategy=text))
    return answers


def read_everything(app: RecoveryService, task: str) -> list[object]:
    return [
        app.task(task),
        app.history(task),
        app.gate_status(task),
        app.failure_report(task),
        app.lessons(task),
        app.blacklist_directive(task),
        app.pending_sessions(),
        app.handoff_queue(),
        app.notifications(),
    ]


def raw_bytes(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.iterdir()))


def test_no_secret_reaches_the_store_the_logs_or_an_answer(
    app: RecoveryService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answers: list[object] = []
    for i, (text, _) in enumerate(SECRETS):
        answers += every_command(app, f"task-{i}", text)
    app.catch_up()
    for i in range(len(SECRETS)):
        answers += read_everything(app, f"task-{i}")
        answers += read_everything(app, f"task-{i}-passes")
    app.close()

    stored = raw_bytes(tmp_path)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    answered = "\n".join(repr(answer) for answer in answers)
    for _, secret in SECRETS:
        assert secret.encode() not in stored, secret
        assert secret not in logged, secret
        assert secret not in answered, secret
    assert b"[REDACTED]" in stored


@pytest.mark.parametrize(("text", "secret"), SECRETS[:12])
def test_an_id_holding_a_secret_is_refused_without_echo(
    app: RecoveryService, tmp_path: Path, text: str, secret: str
) -> None:
    app.start_task("t1")
    app.report_entropy("t1", 0.99)  # pauses: a human may now resume it
    before = event_count(tmp_path / "devs.sqlite")
    token = one_line(text).replace(" ", "-")
    attempts: list[Callable[[], object]] = [
        lambda: app.start_task(token),
        lambda: app.start_run(token, {"a": []}),
        lambda: app.start_run("r1", {token: []}),
        lambda: app.start_task("t2", last_commit=token),
        lambda: app.resume("t1", actor=token, reason="r"),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidInput, match="holds a credential") as refused:
            attempt()
        assert secret not in str(refused.value)
    assert event_count(tmp_path / "devs.sqlite") == before


def test_ordinary_text_reads_back_unchanged(app: RecoveryService) -> None:
    output = runner_output(20_000)
    for i, text in enumerate(ORDINARY):
        task = f"task-{i}"
        app.start_task(task, agent=text)
        app.begin_attempt(task, text)
        app.record_gate(task, 1, gate=text, error=text, output=output + text)
        app.log_lesson(task, text, text)
        app.report_entropy(task, 0.99)
        app.resume(task, actor="ann", reason=text)
    app.catch_up()
    for i, text in enumerate(ORDINARY):
        task = f"task-{i}"
        summary = app.task(task)
        failure = summary.failure_history[-1]
        assert summary.agent == text
        assert failure.gate == text
        assert failure.strategy == text
        assert failure.error_message == text
        assert failure.output_excerpt.endswith(text)
        assert [(le.failed_strategy, le.rca_summary) for le in app.lessons(task)] == [
            (text, text)
        ]
        assert app.history(task)[-1].changes["reason"] == text


@pytest.mark.parametrize("unit", ["a.", "-----BEGIN ", "Bearer ", "a:b@", "\\"])
def test_hostile_output_is_recorded(app: RecoveryService, unit: str) -> None:
    """A hostile output of 200,000 characters is recorded (bench/bench.py
    times redaction of each; this checks what is stored)."""
    app.start_task("t1")
    app.record_gate("t1", 1, output=hostile(unit), error=hostile(unit, 1000))
    failure = app.task("t1").failure_history[-1]
    # Its head and its tail are kept, with what was cut between them.
    kept_head, _, kept_tail = failure.output_excerpt.partition("\n[… ")
    assert hostile(unit).startswith(kept_head)
    assert hostile(unit).endswith(kept_tail.split(" characters cut …]\n", 1)[1])
