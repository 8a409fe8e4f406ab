"""A gate's error and output are an agent's output: hostile input. Too long, they
are cut to their limits and recorded, never refused (the gate would be lost
exactly when the output is hostile); other texts are still refused.

The task redacts each text whole before it is cut, so a secret that straddles
the cut point is removed whole, never half-kept.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from devs.domain import InvalidInput, RecoveryService
from devs.domain.output import keep
from devs.domain.redaction import error_hash, redact
from devs.domain.task import ERROR_MESSAGE_LIMIT, OUTPUT_EXCERPT_LIMIT
from devs.domain.values import ERROR_MAX, OUTPUT_MAX
from tests.helpers import event_count

SUMMARY = "\n==== 3 failed, 7 passed in 0.12s ====\n"


def marker(length: int, limit: int) -> str:
    return f"[cut: {length:,} characters, the limit is {limit:,}] …"


def cut_at(length: int, limit: int, stored: int) -> int:
    """Where the part kept of a text of ``length`` characters begins."""
    return length - (stored - len(marker(length, limit)))


def test_an_error_over_its_limit_is_recorded_cut_and_says_so(
    service: RecoveryService,
) -> None:
    service.start_task("t1")
    error = "x" * 200_000 + "exited with code 1: boom"
    events = event_count(service)
    decision = service.record_gate("t1", 1, error=error)
    assert (decision.reason, decision.consecutive_failures) == ("NON_ZERO_EXIT", 1)
    assert event_count(service) == events + 1
    [failure] = service.task("t1").failure_history
    assert failure.error_message.startswith(marker(200_024, 100_000) + "x")
    assert failure.error_message.endswith("exited with code 1: boom")
    assert len(failure.error_message) == ERROR_MESSAGE_LIMIT
    # The hash identifies the whole (redacted) error, not the part kept.
    assert failure.error_hash == decision.error_hash == error_hash(error)


def test_an_output_over_its_limit_is_recorded_cut_and_says_so(
    service: RecoveryService,
) -> None:
    service.start_task("t1")
    output = "o" * OUTPUT_MAX + SUMMARY
    decision = service.record_gate("t1", 1, output=output)
    assert decision.consecutive_failures == 1
    [failure] = service.task("t1").failure_history
    assert failure.output_excerpt.startswith(marker(len(output), OUTPUT_MAX) + "o")
    assert failure.output_excerpt.endswith(SUMMARY)
    assert len(failure.output_excerpt) == OUTPUT_EXCERPT_LIMIT
    assert failure.error_hash == error_hash(output)
    # The failing tests are counted at the end of what the command printed.
    assert failure.failing_tests == 3


def test_texts_at_their_limits_are_recorded_as_before(
    service: RecoveryService,
) -> None:
    service.start_task("t1")
    service.record_gate("t1", 1, error="e" * ERROR_MAX, output="o" * OUTPUT_MAX)
    [failure] = service.task("t1").failure_history
    # Their head and their tail, and between them what was cut.
    assert failure.error_message == keep("e" * ERROR_MAX, ERROR_MESSAGE_LIMIT)
    assert failure.output_excerpt == keep("o" * OUTPUT_MAX, OUTPUT_EXCERPT_LIMIT)
    head = ERROR_MESSAGE_LIMIT // 4
    assert failure.error_message.startswith("e" * head + "\n[… ")
    assert " characters cut …]\ne" in failure.error_message
    assert len(failure.error_message) == ERROR_MESSAGE_LIMIT


TOKEN = "ghp_" + "A1b2C3d4E5" * 4  # a GitHub token: 40 characters after ghp_


@pytest.mark.parametrize("shift", [-45, -30, -20, -11, -6, -1, 0, 3])
@pytest.mark.parametrize(
    "secret",
    [TOKEN, f"Authorization: Bearer {TOKEN}", f"password={TOKEN}"],
    ids=["token", "header", "assignment"],
)
def test_a_secret_straddling_the_cut_is_redacted_whole(
    service: RecoveryService, secret: str, shift: int
) -> None:
    """Cut first and redacted after, ``ghp_A1b2C3`` would be kept: too short a
    token to be recognised, but half of a real one."""
    length = ERROR_MAX + 500
    kept = cut_at(length, ERROR_MAX, ERROR_MESSAGE_LIMIT)  # where the cut falls
    before = kept + shift - len(secret) // 2
    error = "e" * before + " " + secret + "\n"
    error += "z" * (length - len(error))
    assert len(error) == length
    service.start_task("t1")
    service.record_gate("t1", 1, error=error, output=error)
    [failure] = service.task("t1").failure_history
    for stored in (failure.error_message, failure.output_excerpt):
        assert "ghp_" not in stored
        assert "A1b2" not in stored
    # Cut (after redaction) to its limit, saying so.
    assert failure.error_message.startswith("[cut: ")
    assert f" characters, the limit is {ERROR_MAX:,}] …" in failure.error_message


def test_a_secret_straddling_the_output_cut_is_redacted_whole(
    service: RecoveryService,
) -> None:
    length = OUTPUT_MAX + 100
    # The marker counts the redacted output: 30 characters shorter.
    redacted_length = length - len(TOKEN) + len("[REDACTED]")
    # Where the tail kept begins, in the redacted output: the token is put
    # across it (cut first, its second half would be kept).
    probe = keep("o" * OUTPUT_MAX, OUTPUT_EXCERPT_LIMIT)
    tail = len(probe.rsplit(" characters cut …]\n", 1)[1])
    start = redacted_length - tail - 5  # [REDACTED] straddles the tail's start
    output = "o" * (start - 1) + " " + TOKEN + " "
    output += "z" * (length - len(output))
    service.start_task("t1")
    service.record_gate("t1", 1, output=output)
    [failure] = service.task("t1").failure_history
    # The marker gives the length of the redacted output (what was cut).
    redacted = len(redact(output))
    assert redacted == length - len(TOKEN) + len("[REDACTED]")
    assert failure.output_excerpt.startswith(marker(redacted, OUTPUT_MAX))
    assert "ghp_" not in failure.output_excerpt
    assert "A1b2" not in failure.output_excerpt
    assert " characters cut …]\nCTED] z" in failure.output_excerpt  # of [REDACTED]


def test_other_texts_over_their_limits_are_still_refused(
    service: RecoveryService,
) -> None:
    service.start_task("t1")
    events = event_count(service)
    refusals: list[tuple[Callable[[], object], str]] = [
        (
            lambda: service.record_gate("t1", 1, strategy="s" * 4_001),
            "strategy is 4,001 characters long; the limit is 4,000",
        ),
        (
            lambda: service.record_gate("t1", 1, gate="g" * 201),
            "gate is 201 characters long; the limit is 200",
        ),
        (
            lambda: service.log_lesson("t1", "s", "r" * 16_001),
            "rca_summary is 16,001 characters long; the limit is 16,000",
        ),
        (
            lambda: service.record_gate("t1", 1, error="a\x00b"),
            "error must not contain control characters",
        ),
    ]
    for call, message in refusals:
        with pytest.raises(InvalidInput) as refused:
            call()
        assert str(refused.value) == message
    assert event_count(service) == events


def test_a_gate_sent_exactly_once_is_recorded_whatever_its_output(
    service: RecoveryService,
) -> None:
    """The request an idempotency key is checked against holds the output: it
    is not refused for its length either (it is only hashed)."""
    service.start_task("t1")
    output = "o" * (2 * OUTPUT_MAX + 1)
    request = f"POST /tasks/t1/gates\n{output}"
    with service.exactly_once("gate-1", request):
        first = service.record_gate("t1", 1, output=output)
    with service.exactly_once("gate-1", request):
        again = service.record_gate("t1", 1, output=output)
    assert again == first
    assert len(service.task("t1").failure_history) == 1
