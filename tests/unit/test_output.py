"""The one function that decides what people read of an agent's output."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devs.domain.gate import evaluate
from devs.domain.output import CUT_MARKER, clean, error_line, keep, readable, shown
from devs.domain.policy import Policy
from devs.domain.task import OUTPUT_EXCERPT_LIMIT, Task

RED = "\x1b[31m"
RESET = "\x1b[0m"
PYTEST = "\n".join(
    [
        "INFO  [alembic.runtime.migration] Context impl SQLiteImpl.",
        "=" * 29 + " test session starts " + "=" * 30,
        "collected 3 items",
        "",
        "tests/test_login.py F.." + " " * 50 + "[100%]",
        "",
        "=" * 35 + " FAILURES " + "=" * 35,
        "____________________________ test_login_500 ____________________________",
        "    def test_login_500():",
        ">       assert session['token']",
        f"{RED}E       KeyError: 'session_token'{RESET}",
        "=" * 27 + " short test summary info " + "=" * 28,
        "FAILED tests/test_login.py::test_login_500 - KeyError: 'session_token'",
        "=" * 25 + " 1 failed, 2 passed in 0.12s " + "=" * 25,
    ]
)


def test_clean_strips_terminal_sequences_and_keeps_the_text() -> None:
    text = (
        f"{RED}red{RESET} \x1b[1;4mbold\x1b[22m \x1b]8;;http://x\x07link\x1b]8;;\x07"
        " \x1b]0;title\x1b\\done\r\nnext\rover\x00\x07\x7f"
    )
    assert clean(text) == "red bold link done\nnext\nover"
    assert clean("tab\tkept\nnew line") == "tab\tkept\nnew line"


def test_an_unterminated_sequence_ends_with_its_line() -> None:
    assert clean("a\x1b]0;no end\nb") == "a\nb"
    assert clean("a\x1b[") == "a"


@given(st.text())
def test_clean_is_idempotent_and_leaves_no_escape(text: str) -> None:
    once = clean(text)
    assert clean(once) == once
    assert "\x1b" not in once
    assert "\r" not in once


@pytest.mark.timing  # a ratio of two timings: in one process
def test_clean_is_linear_on_hostile_input() -> None:
    """Many unterminated sequences: twice the input, about twice the time
    (compared as a ratio in one run, loosely: the machines are noisy)."""

    def took(n: int) -> float:
        text = "\x1b]" * n + "\x1b[" * n + "\x1bP" * n
        start = time.perf_counter()
        clean(text)
        return time.perf_counter() - start

    took(10_000)
    small = min(took(50_000) for _ in range(3))
    large = min(took(200_000) for _ in range(3))
    assert large < small * 12


def test_keep_keeps_the_head_and_the_tail_and_says_what_was_cut() -> None:
    line = "E KeyError: 'session_token' " + "x" * 5_000 + " SUMMARY: 1 failed"
    kept = keep(line, 2_000)
    assert len(kept) <= 2_000
    assert kept.startswith("E KeyError: 'session_token'")
    assert kept.endswith("SUMMARY: 1 failed")
    cut = len(line) - len(kept) + len(CUT_MARKER.format(cut=len(line) - len(kept)))
    assert f"[… {cut:,} characters cut …]" in kept
    assert keep("short", 2_000) == "short"


@given(st.text(min_size=0, max_size=400), st.integers(min_value=60, max_value=300))
def test_keep_is_bounded_and_never_splits_a_pair(text: str, limit: int) -> None:
    kept = keep(text, limit)
    assert len(kept) <= limit
    if len(text) <= limit:
        assert kept == text


def test_keep_never_splits_a_surrogate_pair() -> None:
    pair = "\ud83d\ude00"  # as decoded with surrogatepass
    text = pair * 500
    kept = keep(text, 101)
    head, _, tail = kept.partition("\n[…")
    assert not ("\ud800" <= head[-1] <= "\udbff")
    tail = tail.split("\n", 1)[1]
    assert not ("\udc00" <= tail[0] <= "\udfff")


def test_error_line_is_the_runner_s_error_line() -> None:
    assert error_line(PYTEST) == "E KeyError: 'session_token'"
    assert (
        error_line("ok\nFAILED t.py::x - boom\nE nope")
        == "E nope"  # pytest's E line is the most telling
    )
    assert error_line("ok\nFAILED t.py::x - boom\nsummary") == "FAILED t.py::x - boom"
    assert error_line("build\nTypeError: x is undefined\nmore") == (
        "TypeError: x is undefined"
    )
    assert error_line("goroutine\npanic: nil map\n") == "panic: nil map"
    assert error_line("npm ERR! code 1\nbye") == "npm ERR! code 1"


def test_error_line_else_the_last_non_empty_line() -> None:
    assert error_line("INFO starting\nsomething odd happened\n\n") == (
        "something odd happened"
    )
    assert error_line("", exit_code=2) == "exit code 2"
    assert error_line("") == ""
    assert len(error_line("E " + "x" * 5_000)) == 300


def test_error_line_looks_in_each_text_in_order() -> None:
    assert error_line("exited with code 1: 1 failed", "E boom") == "E boom"
    assert error_line("the caller's words", "plain output") == "the caller's words"


def test_shown_neutralises_bidirectional_controls() -> None:
    spoof = "see \u202etxet desrever\u202c and \u2066x\u2069\u200f"
    assert shown(spoof) == (
        "see <U+202E>txet desrever<U+202C> and <U+2066>x<U+2069><U+200F>"
    )
    assert readable(f"{RED}\u202eabc") == "<U+202E>abc"


def test_a_failure_stores_clean_output_its_head_and_tail_and_its_line() -> None:
    task = Task(task_id="t", run_id=None, agent=None, last_commit=None, policy=Policy())
    long_line = f"{RED}E       KeyError: 'session_token'{RESET} " + "y" * 6_000
    output = "INFO alembic\n" + long_line + "\n" + "=" * 10 + " 1 failed " + "=" * 10
    task.record_gate(
        evaluate(1), gate="pytest", strategy=None, error=None, output=output
    )
    failure = task.failures[-1]
    assert "\x1b" not in failure.output_excerpt
    assert len(failure.output_excerpt) <= OUTPUT_EXCERPT_LIMIT
    assert failure.output_excerpt.startswith("INFO alembic\nE       KeyError")
    assert failure.output_excerpt.endswith("1 failed ==========")
    assert failure.error_line == "E KeyError: 'session_token' " + "y" * 271 + "…"
    assert failure.last_error == failure.error_line
    assert task.report().last_error == failure.error_line


def test_a_failure_recorded_before_the_line_existed_derives_it() -> None:
    task = Task(task_id="t", run_id=None, agent=None, last_commit=None, policy=Policy())
    task.record_gate(evaluate(1), gate="g", strategy=None, error=None, output=PYTEST)
    old = task.failures[-1].model_copy(update={"error_line": None})
    assert old.last_error == "E KeyError: 'session_token'"
