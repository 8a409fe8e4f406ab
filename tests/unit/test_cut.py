"""``cut``: a text over its limit keeps its end (where a log says most) after a
marker that says what was cut, within the limit, without splitting a
character."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devs.adapters.presenters import one_line
from devs.domain.values import ERROR_MAX, OUTPUT_MAX, cut


def test_a_text_within_its_limit_is_returned_as_it_is() -> None:
    text = "e" * ERROR_MAX
    assert cut(text, ERROR_MAX) is text
    assert cut("", 10) == ""


def test_a_text_over_its_limit_keeps_its_end_and_says_so() -> None:
    text = "x" * 200_000 + "exited with code 1: boom"
    marker = "[cut: 200,024 characters, the limit is 100,000] …"
    kept = cut(text, ERROR_MAX)
    assert len(kept) == ERROR_MAX
    assert kept == marker + text[-(ERROR_MAX - len(marker)) :]
    assert kept.endswith("exited with code 1: boom")


def test_keep_is_what_is_stored_of_it() -> None:
    text = "x" * 200_000 + "THE REAL ERROR: boom"
    kept = cut(text, ERROR_MAX, keep=2_000)
    assert len(kept) == 2_000
    assert kept.startswith("[cut: 200,020 characters, the limit is 100,000] …x")
    assert kept.endswith("THE REAL ERROR: boom")


def test_the_output_limit() -> None:
    kept = cut("o" * OUTPUT_MAX + "1 failed", OUTPUT_MAX)
    assert len(kept) == OUTPUT_MAX
    assert kept.startswith("[cut: 10,000,008 characters, the limit is 10,000,000] …o")
    assert kept.endswith("o1 failed")


def test_a_surrogate_pair_is_never_split() -> None:
    """Text decoded with ``surrogatepass`` holds a character beyond U+FFFF as two
    code points; the cut keeps both or neither."""
    limit = 100
    marker = "[cut: 300 characters, the limit is 100] …"
    room = limit - len(marker)  # how much of the end is kept
    pair = "\ud83d\ude00"  # U+1F600, as a surrogate pair
    # The cut falls between the pair's two halves: neither is kept.
    text = "b" * (300 - room - 1) + pair + "a" * (room - 1)
    kept = cut(text, limit)
    assert kept == marker + "a" * (room - 1)
    assert kept.encode("utf-8")  # no lone surrogate
    # The cut falls before the pair: both are kept.
    whole = cut("b" * (300 - room) + pair + "a" * (room - 2), limit)
    assert whole == marker + pair + "a" * (room - 2)
    assert whole.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")


@given(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=300),
    st.integers(60, 200),
)
def test_any_text_fits_its_limit_and_stays_valid_unicode(text: str, limit: int) -> None:
    kept = cut(text, limit)
    assert len(kept) <= limit
    assert kept.encode("utf-8").decode("utf-8") == kept
    if len(text) <= limit:
        assert kept == text
    else:
        marker = f"[cut: {len(text):,} characters, the limit is {limit}] …"
        assert kept.startswith(marker)
        assert text.endswith(kept.removeprefix(marker))


def test_a_limit_must_leave_room_for_the_marker() -> None:
    with pytest.raises(ValueError, match="too small"):
        cut("x" * 100, 10)


def test_a_shortened_line_starts_with_the_marker_of_a_cut() -> None:
    text = cut("x" * 200_000 + "exited with code 1: boom", ERROR_MAX, keep=2_000)
    line = one_line(text, 80)
    assert line.startswith("[cut: 200,024 characters, the limit is 100,000] …x")
    assert len(line) == 80
