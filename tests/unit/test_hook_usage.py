"""Reading an agent's session files for usage (devs.adapters.hooks.usage):
each message once, only what was appended, whole lines, any split of the
reads giving the same totals."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devs.adapters.hooks.usage import (
    ClaudeTranscript,
    CodexRollout,
    CopilotEvents,
    Cursor,
    Found,
    GeminiChat,
    Reader,
    moved,
    read,
    read_session,
)

CLAUDE = ClaudeTranscript()
CODEX = CodexRollout()
GEMINI = GeminiChat()
COPILOT = CopilotEvents()


def assistant(
    ident: str,
    model: str = "claude-sonnet-4-5",
    *,
    out: int = 10,
    inp: int = 100,
    cache_read: int = 0,
    cache_write: int = 0,
) -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {
            "id": ident,
            "model": model,
            "usage": {
                "input_tokens": inp,
                "output_tokens": out,
                "cache_read_input_tokens": cache_read,
                "cache_creation_input_tokens": cache_write,
            },
        },
    }


def lines(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)


def totals(found: list[Found]) -> dict[str, tuple[int, int, int, int]]:
    summed: dict[str, list[int]] = {}
    for item in found:
        for model, tokens in item.by_model.items():
            counts = summed.setdefault(model, [0, 0, 0, 0])
            counts[0] += tokens.input_tokens
            counts[1] += tokens.output_tokens
            counts[2] += tokens.cache_read_tokens
            counts[3] += tokens.cache_creation_tokens
    return {
        model: (a, b, c, d)
        for model, (a, b, c, d) in summed.items()
        if a or b or c or d
    }


def read_all(reader: Reader, path: Path, cursor: Cursor) -> Found:
    found = read(reader, path, cursor)
    assert found is not None
    return found


def test_a_message_written_as_several_rows_counts_once(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    rows = [assistant("m1"), assistant("m1"), {"type": "user"}, assistant("m2", out=7)]
    path.write_bytes(lines(rows))
    found = read_all(CLAUDE, path, Cursor())
    assert totals([found]) == {"claude-sonnet-4-5": (200, 17, 0, 0)}
    assert found.start == 0
    assert found.end == path.stat().st_size


def test_a_message_whose_rows_grow_counts_the_most_they_say(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(lines([assistant("m1", out=1), assistant("m1", out=10)]))
    assert totals([read_all(CLAUDE, path, Cursor())]) == {
        "claude-sonnet-4-5": (100, 10, 0, 0)
    }


def test_a_message_across_two_reads_counts_once(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    cursor = Cursor()
    path.write_bytes(lines([assistant("m1", out=1)]))
    first = read_all(CLAUDE, path, cursor)
    with path.open("ab") as file:
        file.write(lines([assistant("m1", out=10), assistant("m2")]))
    second = read_all(CLAUDE, path, cursor)
    assert totals([first]) == {"claude-sonnet-4-5": (100, 1, 0, 0)}
    assert totals([second]) == {"claude-sonnet-4-5": (100, 19, 0, 0)}
    assert second.start == first.end


def test_only_what_was_appended_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    cursor = Cursor()
    path.write_bytes(lines([assistant("m1")]))
    read_all(CLAUDE, path, cursor)
    again = read_all(CLAUDE, path, cursor)
    assert totals([again]) == {}
    assert again.start == again.end == path.stat().st_size


def test_a_line_being_written_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    whole = lines([assistant("m1"), assistant("m2")])
    path.write_bytes(whole[:-20])  # the second row cut short
    cursor = Cursor()
    first = read_all(CLAUDE, path, cursor)
    assert totals([first]) == {"claude-sonnet-4-5": (100, 10, 0, 0)}
    path.write_bytes(whole)
    second = read_all(CLAUDE, path, cursor)
    assert totals([second]) == {"claude-sonnet-4-5": (100, 10, 0, 0)}


def test_cache_tokens_and_models_are_counted_apart(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    rows = [
        assistant("m1", cache_read=5_000, cache_write=300),
        assistant("m2", "claude-haiku-4-5", inp=3, out=4),
    ]
    path.write_bytes(lines(rows))
    assert totals([read_all(CLAUDE, path, Cursor())]) == {
        "claude-sonnet-4-5": (100, 10, 5_000, 300),
        "claude-haiku-4-5": (3, 4, 0, 0),
    }


def test_rows_that_are_not_usage_count_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    bad: list[Any] = [
        {
            "type": "user",
            "message": {"usage": {"input_tokens": 9}, "role": "assistant"},
        },
        {"type": "assistant", "message": "text"},
        {"type": "assistant", "message": {"id": "x", "usage": "lots"}},
        assistant("m3", inp=-5, out=True),
        assistant("m4", inp=10**16, out=0),
        ["assistant", "usage"],
    ]
    body = lines(bad) + b'{"type":"assistant","usage": not json\n'
    path.write_bytes(body)
    found = read_all(CLAUDE, path, Cursor())
    assert totals([found]) == {}
    assert found.end == len(body)


def test_a_model_name_is_one_bounded_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(
        lines([assistant("m1", "a\nmodel " + "x" * 500), assistant("m2", model=None)])  # type: ignore[arg-type]
    )
    models = set(totals([read_all(CLAUDE, path, Cursor())]))
    assert models == {"a model " + "x" * 192, "unknown"}


def test_a_subagent_transcript_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(lines([assistant("m1")]))
    folder = tmp_path / "session" / "subagents"
    folder.mkdir(parents=True)
    (folder / "agent-a1.jsonl").write_bytes(
        lines([assistant("s1", "claude-haiku-4-5")])
    )
    nested = folder / "workers"
    nested.mkdir()
    (nested / "agent-a2.jsonl").write_bytes(
        lines([assistant("s2", "claude-haiku-4-5")])
    )
    (folder / "agent-a1.meta.json").write_bytes(b"{}")
    read_now = read_session(CLAUDE, path, {})
    assert [key for key, _, _ in read_now] == [
        str(path),
        str(folder / "agent-a1.jsonl"),
        str(nested / "agent-a2.jsonl"),
    ]
    assert totals([found for _, _, found in read_now]) == {
        "claude-sonnet-4-5": (100, 10, 0, 0),
        "claude-haiku-4-5": (200, 20, 0, 0),
    }


def test_reading_leaves_the_cursors_until_they_are_moved(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(lines([assistant("m1")]))
    cursors: dict[str, Cursor] = {}
    read_now = read_session(CLAUDE, path, cursors)
    assert cursors == {}
    moved(cursors, read_now)
    assert cursors[str(path)].offset == path.stat().st_size
    again = read_session(CLAUDE, path, cursors)
    assert totals([found for _, _, found in again]) == {}


def test_a_relative_or_odd_path_is_not_read(tmp_path: Path) -> None:
    for reader in (CLAUDE, CODEX, GEMINI):
        assert reader.where("s.jsonl", None, {}) is None
        assert reader.where(str(tmp_path / "a\x00b"), None, {}) is None
        assert reader.where(None, "s1", {}) is None
    assert read_session(CLAUDE, tmp_path / "missing.jsonl", {}) == []


def test_a_fifo_a_folder_and_a_symlink_are_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert read(CLAUDE, fifo, Cursor()) is None  # would block forever
    assert read(CLAUDE, tmp_path, Cursor()) is None
    real = tmp_path / "real.jsonl"
    real.write_bytes(lines([assistant("m1")]))
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert read(CLAUDE, link, Cursor()) is None


def test_a_file_written_anew_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    cursor = Cursor()
    path.write_bytes(lines([assistant("m1"), assistant("m2"), assistant("m3")]))
    read_all(CLAUDE, path, cursor)
    path.write_bytes(lines([assistant("n1")]))
    again = read_all(CLAUDE, path, cursor)
    assert again.start == 0
    assert totals([again]) == {"claude-sonnet-4-5": (100, 10, 0, 0)}


def test_an_overlong_line_is_skipped_and_the_next_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devs.adapters.hooks import usage

    monkeypatch.setattr(usage, "CHUNK", 64)
    monkeypatch.setattr(usage, "LINE_MAX", 200)
    path = tmp_path / "s.jsonl"
    long_row = assistant("long", model="m" * 150)
    body = lines([long_row]) + lines([assistant("m2")])
    path.write_bytes(body)
    cursor = Cursor()
    found = read_all(CLAUDE, path, cursor)
    assert totals([found]) == {"claude-sonnet-4-5": (100, 10, 0, 0)}
    assert found.end == len(body)


def test_usage_ids_name_the_file_the_range_and_the_model(tmp_path: Path) -> None:
    one = Found(path="/a.jsonl", start=0, end=10)
    assert one.usage_id("m") == Found(path="/a.jsonl", start=0, end=10).usage_id("m")
    others = {
        one.usage_id("n"),
        Found(path="/b.jsonl", start=0, end=10).usage_id("m"),
        Found(path="/a.jsonl", start=0, end=11).usage_id("m"),
    }
    assert one.usage_id("m") not in others
    assert len(others) == 3
    assert one.usage_id("m").startswith("file-")
    assert len(one.usage_id("m")) == 45


def test_a_cursor_survives_the_state_file() -> None:
    cursor = Cursor(
        offset=9,
        message="m",
        counted=(1, 2, 3, 4),
        model="g",
        totals=(5, 6, 7, 0),
        records=True,
        recent=("a", "b"),
    )
    assert Cursor.load(orjson.loads(orjson.dumps(cursor.dump()))) == cursor
    assert Cursor.load("damaged") == Cursor()
    damaged = [-4, None, [1, 2, 3, 4], None, [0, 0, 0, 0], 1, ["x"] * 500, False]
    assert Cursor.load(damaged).offset == 0
    assert len(Cursor.load(damaged).recent) == 64


# ------------------------------------------------------------ Codex


def turn(model: str) -> dict[str, Any]:
    return {"type": "turn_context", "payload": {"model": model, "cwd": "/x"}}


def token_count(inp: int, cached: int, out: int) -> dict[str, Any]:
    total = {
        "input_tokens": inp,
        "cached_input_tokens": cached,
        "output_tokens": out,
        "reasoning_output_tokens": 0,
        "total_tokens": inp + out,
    }
    return {
        "type": "event_msg",
        "payload": {
            "type": "token_count",
            "info": {"total_token_usage": total, "last_token_usage": total},
        },
    }


def test_codex_counts_how_far_the_totals_moved(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    rows = [
        turn("gpt-5-codex"),
        {"type": "event_msg", "payload": {"type": "token_count", "info": None}},
        token_count(1_000, 200, 50),
        token_count(1_000, 200, 50),  # a repeat: nothing new
        token_count(2_500, 700, 90),
    ]
    path.write_bytes(lines(rows))
    assert totals([read_all(CODEX, path, Cursor())]) == {
        "gpt-5-codex": (1_800, 90, 700, 0)
    }


def test_codex_totals_carry_over_reads_and_models(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    cursor = Cursor()
    path.write_bytes(lines([turn("gpt-5"), token_count(100, 0, 10)]))
    first = read_all(CODEX, path, cursor)
    with path.open("ab") as file:
        file.write(lines([turn("gpt-5-mini"), token_count(160, 20, 15)]))
    second = read_all(CODEX, path, cursor)
    assert totals([first]) == {"gpt-5": (100, 10, 0, 0)}
    assert totals([second]) == {"gpt-5-mini": (40, 5, 20, 0)}


def test_codex_totals_that_start_again_count_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(
        lines([turn("gpt-5"), token_count(500, 0, 50), token_count(30, 0, 3)])
    )
    assert totals([read_all(CODEX, path, Cursor())]) == {"gpt-5": (530, 53, 0, 0)}


def usage_record(response: str, inp: int, cached: int, out: int) -> dict[str, Any]:
    usage = {
        "input_tokens": inp,
        "cached_input_tokens": cached,
        "cache_write_input_tokens": 0,
        "output_tokens": out,
        "reasoning_output_tokens": 0,
        "total_tokens": inp + out,
    }
    return {
        "type": "token_usage_record",
        "payload": {"response_id": response, "turn_id": "t1", "usage": usage},
    }


def test_codex_records_count_each_response_once_and_stop_the_totals(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rollout.jsonl"
    rows = [
        turn("gpt-5.5"),
        usage_record("r1", 1_000, 600, 10),
        token_count(1_000, 600, 10),  # the same response's totals: not again
        usage_record("r1", 1_000, 600, 10),
        usage_record("r2", 2_000, 1_500, 20),
        token_count(3_000, 2_100, 30),
    ]
    path.write_bytes(lines(rows))
    assert totals([read_all(CODEX, path, Cursor())]) == {"gpt-5.5": (900, 30, 2_100, 0)}


# ------------------------------------------------------------ Gemini CLI


def gemini(ident: str, **tokens: int) -> dict[str, Any]:
    counts = {"input": 100, "output": 5, "cached": 40, "thoughts": 2, "tool": 0}
    counts.update(tokens)
    return {
        "id": ident,
        "type": "gemini",
        "content": "",
        "tokens": {**counts, "total": 107},
        "model": "gemini-2.5-flash",
    }


def test_gemini_counts_each_answer_once(tmp_path: Path) -> None:
    path = tmp_path / "session-1.jsonl"
    rows = [
        {"id": "u1", "type": "user", "content": "hi"},
        gemini("g1"),
        {"$set": {"lastUpdated": "now"}},
        gemini("g1"),  # written again with its tool calls
        gemini("g2", tool=3),
        {"$rewindTo": "g1"},
    ]
    path.write_bytes(lines(rows))
    assert totals([read_all(GEMINI, path, Cursor())]) == {
        "gemini-2.5-flash": (123, 14, 80, 0)
    }
    subagent = path.with_suffix("") / "sub-1.jsonl"
    subagent.parent.mkdir()
    subagent.write_bytes(lines([gemini("s1")]))
    assert [found.path for _, _, found in read_session(GEMINI, path, {})] == [
        str(path),
        str(subagent),
    ]


# ------------------------------------------------------------ Copilot CLI


def copilot(ident: str, model: str = "gpt-4.1") -> dict[str, Any]:
    usage = {
        "model": model,
        "inputTokens": 1_000,
        "outputTokens": 10,
        "cacheReadTokens": 600,
        "cacheWriteTokens": 0,
        "reasoningTokens": 3,
        "apiCallId": ident,
        "accounting": {"sourceSessionId": "s", "sequence": 1, "usageId": ident},
    }
    return {"type": "session.usage_record", "data": {"usage": usage}, "id": "e"}


def test_copilot_session_events_count_each_record_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    where = COPILOT.where(None, "8dc39846-1eb1", {"HOME": str(home)})
    assert (
        where == home / ".copilot" / "session-state" / "8dc39846-1eb1" / "events.jsonl"
    )
    assert COPILOT.where(None, "s", {"COPILOT_HOME": "/c", "HOME": "/h"}) == Path(
        "/c/session-state/s/events.jsonl"
    )
    for hostile in ("../../etc", "a/b", "", "x" * 200, None):
        assert COPILOT.where(None, hostile, {"HOME": str(home)}) is None
    assert COPILOT.where(None, "s", {"HOME": "relative"}) is None
    where.parent.mkdir(parents=True)
    rows = [
        {"type": "assistant.message", "data": {"content": "x"}},
        copilot("resp_1"),
        copilot("resp_1"),
        copilot("resp_2", "claude-sonnet-4.5"),
    ]
    where.write_bytes(lines(rows))
    assert totals([read_all(COPILOT, where, Cursor())]) == {
        "gpt-4.1": (1_000, 10, 600, 0),
        "claude-sonnet-4.5": (1_000, 10, 600, 0),
    }


# ------------------------------------------------------------ any split


def _claude_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages = draw(st.integers(1, 8))
    rows: list[dict[str, Any]] = []
    for index in range(messages):
        model = draw(st.sampled_from(["a", "b"]))
        outs = sorted(draw(st.lists(st.integers(0, 50), min_size=1, max_size=3)))
        rows += [assistant(f"m{index}", model, out=out) for out in outs]
        if draw(st.booleans()):
            rows.append({"type": "user", "message": {"content": "x"}})
    return rows


@st.composite
def split_sessions(draw: st.DrawFn) -> tuple[str, bytes, list[int]]:
    kind = draw(st.sampled_from(["claude", "codex"]))
    if kind == "claude":
        body = lines(_claude_rows(draw))
    else:
        rows: list[dict[str, Any]] = []
        inp = out = cached = 0
        for _ in range(draw(st.integers(1, 8))):
            if draw(st.booleans()):
                rows.append(turn(draw(st.sampled_from(["g", "h"]))))
            inp += draw(st.integers(0, 500))
            cached = min(inp, cached + draw(st.integers(0, 100)))
            out += draw(st.integers(0, 50))
            rows.append(token_count(inp, cached, out))
        body = lines(rows)
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
    return kind, body, cuts


@settings(max_examples=150, deadline=None)
@given(split_sessions())
def test_any_split_of_the_reads_counts_the_same(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[str, bytes, list[int]]
) -> None:
    """However the file grows between the hook's calls, even mid-line, the
    reads together count what one read of the whole file counts."""
    kind, body, cuts = case
    reader: Reader = CLAUDE if kind == "claude" else CODEX
    folder = tmp_path_factory.mktemp("split")
    whole = folder / "whole.jsonl"
    whole.write_bytes(body)
    expected = totals([read_all(reader, whole, Cursor())])
    grown = folder / "grown.jsonl"
    cursor = Cursor()
    found = []
    for cut in [*cuts, len(body)]:
        grown.write_bytes(body[:cut])
        found.append(read_all(reader, grown, cursor))
    assert totals(found) == expected


# ------------------------------------------------------------ linear time


@pytest.mark.timing  # a ratio of two timings: in one process
@pytest.mark.parametrize(
    "row",
    [
        lines([assistant("m", out=1)]),  # every line a usage: parsed
        b'{"type":"assistant","usage":' + b"[" * 5_000 + b"\n",  # deep, broken
        b'"assistant" "usage" ' * 500 + b"\n",  # wanted, never JSON
        b"x" * 100_000 + b"\n",  # long lines, no usage
        b'{"type":"gemini","tokens":{"input":1},"id":"' + b"g" * 50 + b'"}\n',
    ],
)
def test_reading_a_session_file_is_linear(tmp_path: Path, row: bytes) -> None:
    """Ten times the bytes cost about ten times the time, however the lines
    look: each byte is read once, each wanted line parsed once."""
    reader: Reader = GEMINI if b"gemini" in row else CLAUDE

    def cost(size: int) -> float:
        path = tmp_path / f"{size}.jsonl"
        path.write_bytes(row * max(1, size // len(row)))
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            read_all(reader, path, Cursor())
            best = min(best, time.perf_counter() - start)
        return best

    small, large = cost(1_000_000), cost(10_000_000)
    assert large / small < 20, f"{small:.4f}s -> {large:.4f}s"
