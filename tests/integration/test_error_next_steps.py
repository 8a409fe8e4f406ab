"""Errors that say what to do (issue 24, point 5): a path where ``env``
belongs, positional arguments where keywords belong, a task started twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from devs.domain import AlreadyExists, InvalidInput, RecoveryService


@pytest.mark.parametrize("where", ["other.sqlite", Path("other.sqlite")])
def test_a_path_for_env_names_the_call_that_opens_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: object
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput) as refused:
        RecoveryService(where)  # type: ignore[arg-type]
    assert refused.value.field == "env"
    message = str(refused.value)
    assert "RecoveryService() takes no path" in message
    assert "open_service(Settings(db='other.sqlite')) (from devs.adapters.config)" in (
        message
    )
    assert "RecoveryService(env={'DEVS_DB': 'other.sqlite'})" in message
    assert list(tmp_path.iterdir()) == []  # nothing opened


def test_keywords_given_positionally_are_named(service: RecoveryService) -> None:
    service.start_task("t")
    with pytest.raises(TypeError) as refused:
        service.resume("t", "ann", "go")  # type: ignore[call-arg]
    assert str(refused.value) == (
        "RecoveryService.resume() too many positional arguments; resume() takes "
        "task_id positionally; actor, reason, if_version are keyword-only: "
        "resume(task_id, actor=..., reason=..., if_version=...)"
    )
    with pytest.raises(
        TypeError, match=r"actor, if_version are keyword-only: claim_handoff\("
    ):
        service.claim_handoff("t", "ann")  # type: ignore[call-arg]


def test_a_task_or_run_started_again_says_what_to_do(
    service: RecoveryService,
) -> None:
    service.start_run("r", {"t": []})
    service.start_task("t")
    with pytest.raises(AlreadyExists) as task:
        service.start_task("t")
    assert str(task.value) == (
        "task 't' was already started: record its attempts with "
        "begin_attempt(), or read it with task()"
    )
    assert task.value.task_id == "t"
    with pytest.raises(AlreadyExists) as run:
        service.start_run("r", {"t": []})
    assert "start its tasks with start_task(run_id=...)" in str(run.value)
    assert run.value.run_id == "r"
