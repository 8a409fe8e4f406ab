"""Stuck detection: a labelled corpus of trajectories, the score's rules, and
what each DEVS_STUCK_DETECTION mode does to the ladder.

The corpus holds synthetic trajectories (strategy and test output per failed
attempt, 3 to 15 attempts). Looping ones — exact repeats, fuzzy repeats,
alternation, no progress — must score at or above 0.75 at their last failure;
progressing ones — new strategies, changing errors, fewer failing tests —
below it. The test prints recall and false alarms.
"""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devs.domain.gate import evaluate
from devs.domain.names import SessionReason
from devs.domain.policy import Policy, StuckDetection
from devs.domain.redaction import error_hash, redact
from devs.domain.stuck import (
    STUCK_AT,
    WINDOW,
    Attempted,
    StuckAssessment,
    assess,
    failing_tests,
)
from devs.domain.task import Task

Label = Literal["loop", "progress"]
Step = tuple[str, str]  # (strategy, test output)


def _stamped(text: str, i: int) -> str:
    """An output whose timestamp and address change every run."""
    return f"{text}\n[12:00:{i:02d}.{i * 7919 % 1000:03d}] at 0x7f{i * 104729:08x}"


def _pytest(failed: int, passed: int, detail: str = "assert parse('') == []") -> str:
    return (
        f"FAILED tests/test_parser.py::test_case - {detail}\n"
        f"==== {failed} failed, {passed} passed in 0.{failed}1s ===="
    )


def _new(n: int, topic: str = "parser") -> list[Step]:
    """n genuinely different strategies with changing errors."""
    ideas = [
        f"rewrite the {topic} as a recursive descent parser",
        f"switch the {topic} to a table-driven state machine",
        f"add a tokenizer stage in front of the {topic}",
        f"handle escaped quotes before splitting in the {topic}",
        f"normalise line endings before the {topic} runs",
        f"replace the regex in the {topic} with str.partition",
        f"cache compiled patterns at import time for the {topic}",
        f"validate the {topic} input with a pydantic model first",
        f"fall back to the stdlib csv module inside the {topic}",
        f"stream the file into the {topic} line by line",
        f"make the {topic} return a dataclass instead of a dict",
        f"add type coercion for numeric fields in the {topic}",
        f"strip BOM markers before the {topic} sees the text",
        f"treat empty fields as None in the {topic}",
        f"split the {topic} into lexer and evaluator modules",
    ]
    errors = [
        "KeyError: 'name'",
        "IndexError: list index out of range",
        "AssertionError: ['a'] != ['a', 'b']",
        "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
        "ValueError: invalid literal for int() with base 10: 'x'",
        "AttributeError: 'NoneType' object has no attribute 'group'",
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff",
        "RecursionError: maximum recursion depth exceeded",
        "AssertionError: 3 != 4",
        "StopIteration",
        "ZeroDivisionError: division by zero",
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1",
        "AssertionError: None is not true",
        "FileNotFoundError: [Errno 2] No such file or directory: 'x.csv'",
        "OverflowError: int too large to convert to float",
    ]
    return [(ideas[i], errors[i]) for i in range(n)]


A = "increase the retry count in fetch_user to five"
B = "wrap fetch_user in a try/except and return None"
C = "mock the HTTP client in the fetch_user test"
X = "ConnectionError: [Errno 111] Connection refused"
Y = "AssertionError: None != {'id': 1}"
Z = "TimeoutError: timed out after 30s"

CORPUS: list[tuple[str, Label, list[Step]]] = [
    # ---- exact repeats -------------------------------------------------------
    ("exact x3", "loop", [(A, X)] * 3),
    ("exact x5", "loop", [(A, X)] * 5),
    ("exact x10", "loop", [(A, X)] * 10),
    ("exact x15", "loop", [(A, X)] * 15),
    ("exact after progress", "loop", [*_new(4), (A, X), (A, X), (A, X)]),
    (
        "same strategy, outputs stamped",
        "loop",
        [(A, _stamped(X, i)) for i in range(4)],
    ),
    (
        "same strategy, stamped, long",
        "loop",
        [(A, _stamped(X, i)) for i in range(9)],
    ),
    (
        "no progress: new strategies, same error x4",
        "loop",
        [(s, X) for s, _ in _new(4)],
    ),
    ("no progress x8", "loop", [(s, Y) for s, _ in _new(8)]),
    (
        "no progress, same failing count",
        "loop",
        [(s, _pytest(3, 7)) for s, _ in _new(6)],
    ),
    ("blocked again and again", "loop", [(A, "BLACKLISTED_STRATEGY\n" + A)] * 4),
    # ---- fuzzy repeats -------------------------------------------------------
    (
        "fuzzy: case and punctuation",
        "loop",
        [
            ("Fix the off-by-one in parse_header", X),
            ("fix the off by one in parse_header", X),
            ("Fix the off-by-one in parse_headers", X),
        ],
    ),
    (
        "fuzzy: timeout values",
        "loop",
        [
            ("Increase the timeout in fetch_user to 30s", Z),
            ("Increase the timeout in fetch_user to 60s", Z),
            ("increase the timeout in fetch_user to 90s", Z),
            ("Increase the timeout in fetch_user to 120s", Z),
        ],
    ),
    (
        "fuzzy: reworded slightly, stamped outputs",
        "loop",
        [
            ("retry the request with exponential backoff", _stamped(Z, 1)),
            ("Retry the request with exponential back-off", _stamped(Z, 2)),
            ("retry the requests with exponential backoff", _stamped(Z, 3)),
            ("retry the request using exponential backoff", _stamped(Z, 4)),
            ("retry that request with exponential backoff", _stamped(Z, 5)),
        ],
    ),
    (
        "fuzzy: whitespace and trailing dots",
        "loop",
        [
            ("pin numpy to 1.26 in requirements.txt", X),
            ("pin  numpy to 1.26 in requirements.txt.", X),
            ("Pin numpy to 1.26 in requirements.txt", X),
            ("pin numpy to 1.26 in requirements.txt!", X),
        ],
    ),
    (
        "fuzzy with unicode",
        "loop",
        [
            ("échapper les guillemets dans le parseur", Y),
            ("Échapper les guillemets dans le parseur", Y),
            ("échapper les guillemets dans le parseur.", Y),
        ],
    ),
    # ---- alternation ---------------------------------------------------------
    ("A-B-A-B, errors X-Y-X-Y", "loop", [(A, X), (B, Y)] * 2),
    ("A-B-A-B-A-B, same error", "loop", [(A, X), (B, X)] * 3),
    (
        "A-B-A-B-A, stamped outputs",
        "loop",
        [(A, _stamped(X, 0)), (B, _stamped(Y, 1))] * 2 + [(A, _stamped(X, 2))],
    ),
    ("A-B-C cycle x2", "loop", [(A, X), (B, Y), (C, Z)] * 2),
    ("A-B-A-B x7", "loop", ([(A, X), (B, Y)] * 4)[:7]),
    (
        "thrash: new strategies, errors return",
        "loop",
        [(s, [X, Y][i % 2]) for i, (s, _) in enumerate(_new(6))],
    ),
    (
        "progress, then alternation",
        "loop",
        [*_new(3), (A, X), (B, Y), (A, X), (B, Y)],
    ),
    (
        "fuzzy alternation",
        "loop",
        [
            ("use a mutex around the cache", X),
            ("drop the cache entirely", Y),
            ("use a mutex around the caches", X),
            ("drop the cache entirely.", Y),
        ],
    ),
    # ---- progressing ---------------------------------------------------------
    ("new x3", "progress", _new(3)),
    ("new x5", "progress", _new(5)),
    ("new x10", "progress", _new(10)),
    ("new x15", "progress", _new(15)),
    ("new, other topic", "progress", _new(7, "scheduler")),
    (
        "fewer failing tests, new strategies",
        "progress",
        [(s, _pytest(6 - i, 4 + i)) for i, (s, _) in enumerate(_new(5))],
    ),
    (
        "fewer failing tests, same strategy",
        "progress",
        [("implement the remaining parser cases", _pytest(8 - i, i)) for i in range(6)],
    ),
    (
        "fewer failures, unittest style",
        "progress",
        [
            (s, f"Ran 12 tests in 0.01s\n\nFAILED (failures={5 - i})")
            for i, (s, _) in enumerate(_new(4))
        ],
    ),
    (
        "an early repeat, then progress",
        "progress",
        [(A, X), (A, X), *_new(3)],
    ),
    (
        "changing errors, similar wording, different ideas",
        "progress",
        [
            ("use a regex to parse the dates", X),
            ("use dateutil to parse the dates", Y),
            ("use datetime.fromisoformat for the dates", Z),
        ],
    ),
    (
        "same error twice, then new ones",
        "progress",
        [(A, X), (B, X), (C, Y), *_new(2)],
    ),
    (
        "alternation broken by a new idea",
        "progress",
        [(A, X), (B, Y), (A, X), *_new(2)],
    ),
    (
        "fewer failing tests while alternating",
        "progress",
        [
            (A, _pytest(5, 1)),
            (B, _pytest(4, 2)),
            (A, _pytest(3, 3)),
            (B, _pytest(2, 4)),
        ],
    ),
    (
        "new strategies, stamped outputs",
        "progress",
        [(s, _stamped(e, i)) for i, (s, e) in enumerate(_new(6))],
    ),
    (
        "long and varied with one early loop",
        "progress",
        [(A, X)] * 3 + _new(12)[:12],
    ),
    (
        "same test, changing assertion",
        "progress",
        [
            (s, f"AssertionError: expected 10 items, got {n}")
            for (s, _), n in zip(_new(5), (2, 4, 6, 8, 9), strict=True)
        ],
    ),
    (
        "one repeat at the end",
        "progress",
        [*_new(6), _new(6)[-1]],
    ),
    (
        "short distinct strategies",
        "progress",
        [("use lxml", X), ("use json", Y), ("use yaml", Z)],
    ),
]


def _score(steps: list[Step]) -> StuckAssessment:
    attempted = []
    for strategy, output in steps:
        clean = redact(output)
        attempted.append(
            Attempted(
                strategy=redact(strategy),
                error_hash=error_hash(clean),
                failing_tests=failing_tests(clean),
            )
        )
    return assess(attempted)


def test_the_corpus_is_big_and_sized_as_the_issue_asks() -> None:
    assert len(CORPUS) >= 40
    assert all(3 <= len(steps) <= 15 for _, _, steps in CORPUS)
    labels = {label for _, label, _ in CORPUS}
    assert labels == {"loop", "progress"}


def test_recall_and_false_alarms_on_the_labelled_corpus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    loops = [(name, _score(steps)) for name, label, steps in CORPUS if label == "loop"]
    progress = [
        (name, _score(steps)) for name, label, steps in CORPUS if label == "progress"
    ]
    caught = [name for name, a in loops if a.score >= STUCK_AT]
    alarms = [name for name, a in progress if a.score >= STUCK_AT]
    recall = len(caught) / len(loops)
    false_alarms = len(alarms) / len(progress)
    with capsys.disabled():
        print(
            f"\nstuck corpus: {len(loops)} looping, {len(progress)} progressing; "
            f"recall {recall:.1%}, false alarms {false_alarms:.1%}"
        )
        for name, a in loops:
            if a.score < STUCK_AT:
                print(f"  missed: {name}: {a.score} ({a.summary})")
        for name in alarms:
            print(f"  false alarm: {name}")
    assert recall >= 0.95, [n for n, a in loops if a.score < STUCK_AT]
    assert false_alarms <= 0.05, alarms


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([(A, X)] * 3, "same strategy 3 times; same error hash 3 times"),
        ([(A, X), (B, Y)] * 2, "strategies alternate A-B-A-B; error hashes alternate"),
        ([(s, X) for s, _ in _new(4)], "same error hash 4 times"),
        ([(A, X), (B, Y), (C, Z), (A, X)], "strategies revisit earlier ones"),
    ],
)
def test_signals_say_what_repeats(steps: list[Step], expected: str) -> None:
    assert _score(steps).summary.startswith(expected)


def test_the_formula() -> None:
    assert _score([(A, X)]).score == 0
    assert _score([(A, X), (A, X)]).score == 0.5
    assert _score([(A, X)] * 3).score == 1.0
    no_progress = _score([(s, X) for s, _ in _new(4)])
    assert (no_progress.strategy_revisits, no_progress.error_revisits) == (0, 3)
    assert no_progress.score == 0.75
    # A new strategy with a new error ends both runs.
    assert _score([(A, X)] * 5 + _new(1)).score == 0
    # Only the last WINDOW failures count.
    assert _score([(A, X)] * 30).window == WINDOW


@pytest.mark.parametrize(
    ("output", "count"),
    [
        ("==== 3 failed, 2 passed in 0.1s ====", 3),
        ("FAILED (failures=2)", 2),
        ("Tests: 4 failed, 10 total", 4),
        ("1 failing\n\n  1) parser", 1),
        ("= 1 failed =\n= 2 failed, 1 error =", 1),
        ("all good", None),
        ("exit code 1", None),
    ],
)
def test_failing_test_counts(output: str, count: int | None) -> None:
    assert failing_tests(output) == count


texts = st.text(max_size=300) | st.sampled_from([A, B, C, "", " ", "\x00" * 50])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | texts, st.sampled_from([X, Y, Z]) | st.text()),
        min_size=1,
        max_size=25,
    )
)
def test_the_score_is_in_0_1_and_explained(items: list[tuple[str | None, str]]) -> None:
    assessment = assess(
        [
            Attempted(
                strategy=s, error_hash=error_hash(e), failing_tests=failing_tests(e)
            )
            for s, e in items
        ]
    )
    assert 0.0 <= assessment.score <= 1.0
    assert assessment.window == min(len(items), WINDOW)
    assert (assessment.score > 0) == bool(assessment.signals)


def test_hostile_text_is_handled_in_one_pass() -> None:
    """Huge, near-identical strategies: the fuzzy distance gives up at its
    cutoff; the score is still computed (timings are in bench/)."""
    huge = "x" * 4000
    assessment = assess(
        [
            Attempted(strategy=huge[: 4000 - i] + "y" * i, error_hash=str(i))
            for i in range(WINDOW)
        ]
    )
    assert assessment.strategy_revisits == WINDOW - 1
    output = "1 failed " * 100_000
    assert failing_tests(output) == 1


# ------------------------------------------------------------ in the ladder


def _task(mode: StuckDetection, **policy: object) -> Task:
    return Task(
        task_id="t",
        run_id=None,
        agent=None,
        last_commit=None,
        policy=Policy.model_validate({"stuck_detection": mode, **policy}),
    )


def _fail(task: Task, strategy: str, output: str) -> None:
    task.begin_attempt(strategy)
    task.record_gate(
        evaluate(1), gate="tests", strategy=None, error=None, output=output
    )


def _names(task: Task) -> list[str]:
    return [type(e).__name__ for e in task.pending_events]


def test_observe_records_the_score_and_decides_as_off() -> None:
    observe, off = _task(StuckDetection.OBSERVE), _task(StuckDetection.OFF)
    for task in (observe, off):
        for _ in range(4):
            if task.pending_session is not None:
                task.resume(actor="ann", reason="go on")
            _fail(task, A, X)
    assert _names(observe) == _names(off)
    failed = [e for e in observe.pending_events if isinstance(e, Task.GateFailed)]
    assert [e.stuck.score for e in failed if e.stuck] == [0.0, 0.5, 1.0, 1.0]
    assert all(
        e.stuck is None for e in off.pending_events if isinstance(e, Task.GateFailed)
    )
    assert observe.stuck is not None
    assert observe.report().stuck == observe.stuck


def test_gate_pauses_through_the_entropy_gate_with_a_derived_score() -> None:
    task = _task(StuckDetection.GATE, escalation_threshold=10, handoff_threshold=20)
    _fail(task, A, X)
    _fail(task, A, X)
    assert task.pending_session is None  # 0.5 < 0.75
    _fail(task, A, X)
    session = task.pending_session
    assert session is not None
    assert session.reason is SessionReason.ENTROPY_LIMIT
    assert (session.entropy_score, session.entropy_source) == (1.0, "derived")
    assert task.state == "PAUSED"
    assert _names(task)[-2:] == ["GateFailed", "Paused"]


def test_gate_does_not_pause_twice_when_the_ladder_already_stopped() -> None:
    task = _task(StuckDetection.GATE)  # escalates at 3, as the score reaches 1.0
    for _ in range(3):
        _fail(task, A, X)
    assert task.state == "ESCALATION"
    assert _names(task).count("Paused") == 0
    assert _names(task)[-1] == "Escalated"


def test_gate_respects_the_entropy_threshold() -> None:
    strict = _task(
        StuckDetection.GATE,
        hitl_entropy_threshold=0.5,
        escalation_threshold=10,
        handoff_threshold=20,
    )
    _fail(strict, A, X)
    _fail(strict, A, X)
    assert strict.state == "PAUSED"
    # Strategy thrice, errors X-Y-X: 0.75, which pauses at the default
    # threshold but not at 1.0.
    for threshold, state in ((0.75, "PAUSED"), (1.0, "GATE_FAILED")):
        task = _task(
            StuckDetection.GATE,
            hitl_entropy_threshold=threshold,
            escalation_threshold=10,
            handoff_threshold=20,
        )
        for output in (X, Y, X):
            _fail(task, A, output)
        assert task.stuck is not None
        assert task.stuck.score == 0.75
        assert task.state == state


def test_a_pass_clears_the_score() -> None:
    task = _task(StuckDetection.OBSERVE)
    _fail(task, A, X)
    _fail(task, A, X)
    assert task.stuck is not None
    task.record_gate(evaluate(0), gate="tests", strategy=None, error=None, output=None)
    assert task.stuck is None


def test_a_blocked_attempt_carries_a_score() -> None:
    task = _task(StuckDetection.OBSERVE)
    task.log_lesson(A, "it does not help")
    for _ in range(2):
        task.begin_attempt(A)
        task.resume(actor="ann", reason="try another")
    blocked = [
        e
        for e in task.pending_events
        if isinstance(e, Task.BlacklistedStrategyAttempted)
    ]
    assert [e.stuck.score for e in blocked if e.stuck] == [0.0, 0.5]
