"""Re-deciding histories (pure domain): any history today's code wrote passes
its own replay check, and what-if under the recorded policy changes nothing;
a stricter or looser policy moves the stops where the ladder says."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devs.domain import replay
from devs.domain.errors import DevsError
from devs.domain.gate import evaluate
from devs.domain.names import Resolution
from devs.domain.policy import Policy, StuckDetection
from devs.domain.task import Task

STRATEGIES = ["use a regex", "use a regex!", "write a parser", "mock the clock", ""]
OUTPUTS = ["E1", "E2", "== 3 failed ==", "== 2 failed =="]

policies = st.builds(
    Policy,
    escalation_threshold=st.integers(1, 6),
    handoff_threshold=st.integers(1, 8),
    hitl_entropy_threshold=st.sampled_from([0.0, 0.5, 0.75, 1.0]),
    failure_history_cap=st.integers(1, 12),
    stuck_detection=st.sampled_from(list(StuckDetection)),
    human_deadline=st.sampled_from([None, 60.0]),
)
commands = st.lists(
    st.one_of(
        st.tuples(st.just("attempt"), st.sampled_from(STRATEGIES[:4])),
        st.tuples(st.just("fail"), st.sampled_from(OUTPUTS)),
        st.tuples(st.just("pass"), st.just("")),
        st.tuples(st.just("entropy"), st.sampled_from(["0.1", "0.8"])),
        st.tuples(st.just("lesson"), st.sampled_from(STRATEGIES[:3])),
        st.tuples(
            st.just("human"),
            st.sampled_from(["resume", "rewind", "skip", "claim", "return"]),
        ),
        st.tuples(st.just("clock"), st.sampled_from(["expire", "remind"])),
    ),
    max_size=40,
)


def _run(policy: Policy, script: list[tuple[str, str]]) -> list[Any]:
    task = Task(task_id="t", run_id=None, agent=None, last_commit="c0", policy=policy)
    for command, arg in script:
        try:
            match command:
                case "attempt":
                    task.begin_attempt(arg)
                case "fail":
                    task.record_gate(
                        evaluate(1), gate="g", strategy=None, error=None, output=arg
                    )
                case "pass":
                    task.record_gate(
                        evaluate(0), gate="g", strategy=None, error=None, output=None
                    )
                case "entropy":
                    task.report_entropy(float(arg))
                case "lesson":
                    task.log_lesson(arg, "why")
                case "human":
                    _human(task, arg)
                case "clock" if arg == "expire":
                    task.expire_deadline(now=None)
                case "clock":
                    task.remind_deadline(now=None, before=0)
        except DevsError:
            pass  # refused: nothing recorded
    return list(task.pending_events)


def _human(task: Task, action: str) -> None:
    match action:
        case "resume":
            task.resume(actor="ann", reason="r")
        case "rewind":
            task.rewind(actor="ann", reason="r", to_commit=None)
        case "skip":
            task.skip(actor="ann", reason="r")
        case "claim":
            task.claim_handoff(actor="ann")
        case _:
            task.resolve_handoff(actor="ann", resolution=Resolution.RETURN, reason="r")


@settings(max_examples=150, deadline=None)
@given(policies, commands)
def test_todays_histories_pass_their_replay_check(
    policy: Policy, script: list[tuple[str, str]]
) -> None:
    events = _run(policy, script)
    assert replay.replay_check(events) == []


@settings(max_examples=150, deadline=None)
@given(policies, commands)
def test_what_if_under_the_recorded_policy_changes_nothing(
    policy: Policy, script: list[tuple[str, str]]
) -> None:
    events = _run(policy, script)
    result = replay.what_if(events, policy)
    assert result.changes == ()
    # The same stops at the same inputs (each named by another event: a
    # recorded stop by its own, a what-if one by the input it followed).
    naming = {"stops": {"__all__": {"event", "event_version"}}}
    assert result.what_if.model_dump(exclude=naming) == result.recorded.model_dump(
        exclude=naming
    )
    assert (result.assumed_resumes, result.dropped_human_actions) == (0, 0)
    assert result.cut_at is None


def _failing(n: int, *, resume: bool = True) -> list[tuple[str, str]]:
    script: list[tuple[str, str]] = []
    for i in range(n):
        script += [("attempt", f"idea {i}"), ("fail", f"E{i}")]
        if resume:
            script.append(("human", "resume"))
    return script


def test_a_stricter_policy_escalates_earlier() -> None:
    events = _run(Policy(), _failing(4))
    result = replay.what_if(events, Policy(escalation_threshold=2))
    assert [s.kind for s in result.recorded.stops] == ["escalation", "escalation"]
    assert [s.kind for s in result.what_if.stops] == ["escalation"] * 3
    assert result.what_if.failures_before_first_human == 2
    assert result.recorded.failures_before_first_human == 3
    assert result.changes[0].startswith("escalations after GateFailed at versions")


def test_a_looser_policy_asks_nobody_and_drops_the_answers() -> None:
    events = _run(Policy(), _failing(4))
    result = replay.what_if(
        events, Policy(escalation_threshold=10, handoff_threshold=10)
    )
    assert result.what_if.stops == ()
    assert result.what_if.failures_before_first_human is None
    assert result.dropped_human_actions == 2  # both resumes had nothing to answer
    assert result.changes[0].startswith(
        "no escalation (recorded: Escalated at versions"
    )


def test_an_earlier_hand_off_cuts_the_rest() -> None:
    events = _run(Policy(), _failing(4))
    result = replay.what_if(events, Policy(escalation_threshold=1, handoff_threshold=2))
    assert [s.kind for s in result.what_if.stops] == ["escalation", "hand_off"]
    assert result.cut_at is not None
    assert result.what_if.final_state == "HAND_OFF"
    assert any("would not have happened" in c for c in result.changes)


def test_an_unanswered_stop_is_assumed_answered() -> None:
    events = _run(Policy(escalation_threshold=10), _failing(3, resume=False))
    result = replay.what_if(events, Policy(escalation_threshold=1, handoff_threshold=9))
    assert result.assumed_resumes == 2
    assert len(result.what_if.stops) == 3


def test_gate_mode_in_what_if_pauses_a_loop() -> None:
    script = [("attempt", "same"), ("fail", "E")] * 3
    events = _run(Policy(escalation_threshold=10, handoff_threshold=10), script)
    result = replay.what_if(
        events,
        Policy(
            escalation_threshold=10,
            handoff_threshold=10,
            stuck_detection=StuckDetection.GATE,
        ),
    )
    assert [s.kind for s in result.what_if.stops] == ["pause"]
    assert result.recorded.stops == ()


def test_the_replay_check_finds_changed_code(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _run(Policy(), _failing(4))

    def never_escalate(self: Task, *, blocked: bool) -> None:
        if self.consecutive_failures >= self.policy.handoff_threshold:
            self._hand_off(payload=self._handoff_payload())

    monkeypatch.setattr(Task, "_climb_ladder", never_escalate)
    differences = replay.replay_check(events)
    # Escalated at 3 failures (version 7) and again at 4 (version 11).
    assert [(d.version, d.event) for d in differences] == [
        (7, "GateFailed"),
        (11, "GateFailed"),
    ]
    first = differences[0]
    assert first.recorded == "GateFailed(3) -> Escalated(max_retries)"
    assert first.recomputed == "GateFailed(3)"
    # Reported once per change: the re-decided task follows the record again.
    assert len(differences) == 2


def test_a_recorded_rewind_does_not_undo_a_hand_off_of_the_other_policy() -> None:
    """Recorded: three failures escalate, a human rewinds, one more fails.
    Stricter: the third failure hands off; the replay ends there."""
    script = [
        *_failing(3, resume=False),
        ("human", "rewind"),
        *_failing(1, resume=False),
    ]
    events = _run(Policy(), script)
    result = replay.what_if(events, Policy(escalation_threshold=2, handoff_threshold=3))
    assert [s.kind for s in result.what_if.stops] == ["escalation", "hand_off"]
    assert result.what_if.final_state == "HAND_OFF"
    assert result.cut_at == events[8].originator_version  # the Rewound
    assert isinstance(events[8], Task.Rewound)


def test_a_recorded_rewind_answering_a_stop_never_made_is_dropped() -> None:
    script = [
        *_failing(3, resume=False),
        ("human", "rewind"),
        *_failing(1, resume=False),
    ]
    events = _run(Policy(), script)
    result = replay.what_if(
        events, Policy(escalation_threshold=10, handoff_threshold=10)
    )
    assert result.dropped_human_actions == 1
    assert result.what_if.stops == ()
    assert result.what_if.final_state == "GATE_FAILED"


# ------------------------------------------------------------- deadlines

DEADLINE = Policy(human_deadline=60)


def _expired(policy: Policy = DEADLINE) -> list[Any]:
    """Three failures escalate; a reminder, then the deadline passes (the
    task is handed off); a human claims and returns it; it fails again."""
    return _run(
        policy,
        [
            *_failing(3, resume=False),
            ("clock", "remind"),
            ("clock", "expire"),
            ("human", "claim"),
            ("human", "return"),
            ("attempt", "idea 9"),
            ("fail", "E9"),
        ],
    )


def test_an_expiry_and_a_reminder_pass_the_replay_check() -> None:
    events = _expired()
    names = [type(e).__name__ for e in events]
    assert names.count("DeadlineReminded") == names.count("DeadlineExpired") == 1
    assert replay.is_input(events[names.index("DeadlineExpired")])
    assert replay.is_input(events[names.index("DeadlineReminded")])
    assert replay.replay_check(events) == []


def test_the_replay_check_takes_an_expiry_as_recorded_not_by_today_s_clock() -> None:
    """The re-decided session opens now, its deadline a minute ahead: an
    expiry read with ``now=None`` is not compared with it."""
    events = _expired()
    assert replay.replay_check(events) == []
    assert replay.what_if(events, DEADLINE).changes == ()


def test_an_expiry_is_a_hand_off_of_the_recorded_course() -> None:
    result = replay.what_if(_expired(), DEADLINE)
    kinds = ["escalation", "hand_off", "escalation"]  # the fourth failure asks again
    assert [s.kind for s in result.recorded.stops] == kinds
    assert result.recorded.stops[1].event == "DeadlineExpired"
    assert result.what_if.stops[1] == result.recorded.stops[1]
    assert [(s.kind, s.version) for s in result.what_if.stops] == [
        (s.kind, s.version) for s in result.recorded.stops
    ]


def test_what_if_drops_an_expiry_where_the_other_policy_never_stopped() -> None:
    result = replay.what_if(
        _expired(),
        Policy(escalation_threshold=10, handoff_threshold=10, human_deadline=60),
    )
    assert result.what_if.stops == ()
    # The reminder, the expiry, the claim and the return answered nothing.
    assert result.dropped_human_actions == 4
    assert result.what_if.final_state == "GATE_FAILED"
    assert "no hand-off (recorded: DeadlineExpired at version" in " ".join(
        result.changes
    )


def test_what_if_drops_an_expiry_the_other_policy_s_session_never_had() -> None:
    """Without a deadline nobody is handed off: the task waits (the return of
    the hand-off is dropped too; its claim claims the escalation that still
    waits, as every stop can be claimed; the next input is assumed
    answered)."""
    result = replay.what_if(_expired(), Policy())
    assert [s.kind for s in result.what_if.stops] == ["escalation", "escalation"]
    assert result.dropped_human_actions == 3
    assert result.assumed_resumes == 1
    assert "no hand-off (recorded: DeadlineExpired at version" in " ".join(
        result.changes
    )


def test_what_if_hands_off_as_recorded_where_its_task_waits_too() -> None:
    """The other policy escalates earlier; where the deadline was recorded
    its task waits as well, so the expiry hands it off there."""
    recorded = _run(
        Policy(escalation_threshold=3, handoff_threshold=9, human_deadline=60),
        [*_failing(3, resume=False), ("clock", "expire")],
    )
    result = replay.what_if(
        recorded,
        Policy(escalation_threshold=2, handoff_threshold=9, human_deadline=60),
    )
    assert [s.kind for s in result.what_if.stops] == [
        "escalation",
        "escalation",
        "hand_off",
    ]
    assert result.what_if.final_state == "HAND_OFF"
    assert result.assumed_resumes == 1
    assert result.cut_at is None
