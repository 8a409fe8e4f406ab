"""Arguments the service refuses, through its public methods: the error names
the argument, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from devs.domain import InvalidInput, RecoveryService
from devs.domain.chart import TaskState
from devs.domain.names import Resolution
from devs.domain.values import POSITION_MAX, RESOLUTIONS, STATES
from tests.helpers import event_count


def test_the_literal_choices_are_the_domain_s_own() -> None:
    assert tuple(Resolution) == RESOLUTIONS
    assert tuple(TaskState) == STATES


@pytest.fixture
def handed_off(service: RecoveryService) -> RecoveryService:
    service.start_task("t1")
    for _ in range(5):
        if service.record_gate("t1", 1).outcome == "escalate":
            service.resume("t1", actor="h", reason="again")
    service.claim_handoff("t1", actor="h")
    return service


@pytest.mark.parametrize(
    ("resolution", "shown"),
    [(b"return", "b'return'"), (1, "1"), ("Return", "'Return'"), (None, "None")],
)
def test_a_resolution_must_be_one_of_the_three(
    handed_off: RecoveryService, db_path: Path, resolution: object, shown: str
) -> None:
    before = event_count(db_path)
    with pytest.raises(InvalidInput) as refused:
        handed_off.resolve_handoff(
            "t1",
            actor="h",
            resolution=resolution,  # type: ignore[arg-type]
            reason="r",
        )
    assert str(refused.value) == (
        f"resolution must be one of return, complete, skip; got {shown}"
    )
    assert event_count(db_path) == before


def test_a_resolution_may_be_the_enum_member(handed_off: RecoveryService) -> None:
    result = handed_off.resolve_handoff(
        "t1",
        actor="h",
        resolution=Resolution.COMPLETE,  # type: ignore[arg-type]
        reason="done",
    )
    assert result.state is TaskState.COMPLETED


@pytest.mark.parametrize("state", [b"HAND_OFF", "hand_off", 3])
def test_a_state_filter_must_be_a_state(
    service: RecoveryService, state: object
) -> None:
    with pytest.raises(InvalidInput, match=r"^state must be one of RUNNING, "):
        service.tasks(state=state)  # type: ignore[arg-type]


def test_notifications_after_the_last_possible_position(
    service: RecoveryService,
) -> None:
    assert service.notifications(after=POSITION_MAX) == []
    with pytest.raises(
        InvalidInput, match=r"^after 9223372036854775807 is out of range \[0, "
    ):
        service.notifications(after=POSITION_MAX + 1)


def test_one_read_model_is_rebuilt_by_its_name(service: RecoveryService) -> None:
    service.start_task("t1")
    service.log_lesson("t1", "retry blindly", "it never helps")
    service.catch_up()
    service.rebuild_projections("lessons_learned")
    assert [lesson.failed_strategy for lesson in service.lessons("t1")] == [
        "retry blindly"
    ]
    with pytest.raises(InvalidInput, match="unknown projection 'lessons'; known"):
        service.rebuild_projections("lessons")
    with pytest.raises(InvalidInput, match=r"^names must be read model names"):
        service.rebuild_projections([1, 2])  # type: ignore[list-item]


def test_a_call_that_does_not_fit_the_signature_is_a_type_error(
    service: RecoveryService,
) -> None:
    with pytest.raises(TypeError, match=r"RecoveryService\.resume\(\) too many"):
        service.resume("t1", "actor", "reason")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing a required argument: 'actor'"):
        service.resume("t1", reason="r")  # type: ignore[call-arg]


def test_what_an_edge_takes_apart_is_refused_as_the_command_refuses_it() -> None:
    """``given_apart`` (the path's task id, the token's actor, the If-Match
    version) validates with the commands' types, in their words."""
    from devs.domain.arguments import given_apart

    assert given_apart(task_id="t1", actor="ana", if_version=3) == {
        "task_id": "t1",
        "actor": "ana",
        "if_version": 3,
    }
    assert given_apart(if_version=None) == {}
    for bad, field in (({"actor": "   "}, "actor"), ({"if_version": 0}, "if_version")):
        with pytest.raises(InvalidInput) as refused:
            given_apart(**bad)
        assert refused.value.field == field


def test_an_unchecked_command_does_not_validate_again() -> None:
    """``unchecked`` runs the command as an edge that validated every
    argument calls it: a value its model would refuse is not looked at."""
    from devs.adapters.config import Settings, open_service
    from devs.domain.application import unchecked

    with open_service(Settings(db=":memory:")) as service:
        service.start_task("t1")
        with pytest.raises(InvalidInput) as refused:
            service.record_gate("t1", 1, gate="te\x01sts")
        assert refused.value.field == "gate"
        run = unchecked(RecoveryService.record_gate)
        decision = run(service, "t1", 1, gate="te\x01sts")  # the edge's to check
        assert decision.consecutive_failures == 1
