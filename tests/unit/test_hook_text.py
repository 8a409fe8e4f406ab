"""The breaker's reading of agents' text: which commands are gates, the exit
code in an error text, the first error line, the strategy and the task name
(devs.adapters.hooks.breaker), and the entries it writes into settings files
(devs.adapters.hooks.install)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from devs.adapters.hooks.breaker import (
    GATE_PATTERN,
    HookRecord,
    HookSettings,
    Place,
    command_change,
    edit_change,
    error_line,
    exit_code_in,
    strategy_of,
    task_base,
)
from devs.adapters.hooks.claude_code import CLAUDE_CODE
from devs.adapters.hooks.client import server_key
from devs.adapters.hooks.codex import CODEX
from devs.adapters.hooks.install import (
    hook_command,
    install,
    own_agent,
    status,
    uninstall,
)
from devs.adapters.hooks.openhands import OPENHANDS
from devs.adapters.launch import hook_call
from devs.domain.errors import InvalidInput
from devs.domain.values import STRATEGY_MAX

GATE = re.compile(GATE_PATTERN)

GATES = [
    "pytest",
    "pytest -q tests/test_a.py",
    "python -m pytest -x",
    "python3 -m pytest",
    "python3.11 -m pytest -k slow",
    "uv run pytest",
    "cd src && pytest",
    "npm test",
    "npm run test -- --watch=false",
    "pnpm test",
    "yarn test",
    "bun test",
    "cargo test --all",
    "cargo nextest run",
    "go test ./...",
    "make test",
    "make -j4 test",
    "make check",
    "tox -e py311",
    "nox -s tests",
    "(cd app; npm test)",
]
NOT_GATES = [
    "ls -la",
    "git commit -m 'make tests pass'",
    "cat pytest.ini",
    "pip install pytest-cov",
    "echo testing",
    "npm install",
    "grep -r pytest_plugins .",
    "make build",
    "go build ./...",
    "cargo build",
    "mytox",
]


@pytest.mark.parametrize("command", GATES)
def test_the_default_pattern_knows_the_usual_test_commands(command: str) -> None:
    assert GATE.search(command), command


@pytest.mark.parametrize("command", NOT_GATES)
def test_other_commands_are_not_gates(command: str) -> None:
    assert not GATE.search(command), command


@pytest.mark.timing  # a ratio of two timings: in one process
def test_the_gate_pattern_is_linear_on_hostile_commands() -> None:
    """A 200,000-character command of the pattern's own pieces is judged about
    as fast as a plain one of that length (a ratio, not a time limit)."""
    plain = "a" * 200_000
    hostile = "make -x " * 25_000

    def cost(text: str) -> float:
        start = time.perf_counter()
        for _ in range(5):
            GATE.search(text)
        return time.perf_counter() - start

    assert cost(hostile) < 200 * max(cost(plain), 1e-4)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("Exit code 1\nFAILED test_a", 1),
        ("Command exited with non-zero status code 2", 2),
        ("Error: exit status 127", 127),
        ("exited with code 3: boom", 3),
        ("Traceback (most recent call last)", None),
        ("", None),
        ("Exit code 99999999999", None),
    ],
)
def test_the_exit_code_is_read_as_the_agents_write_it(
    text: str, code: int | None
) -> None:
    assert exit_code_in(text) == code


def test_the_first_error_line_skips_the_exit_code_and_prefers_an_error() -> None:
    output = (
        "Exit code 1\n===== test session starts\ncollected 3\n"
        "E   assert 1 == 2\nFAILED x"
    )
    assert error_line(output, 1) == "E assert 1 == 2"
    assert error_line("Exit code 2\nsomething odd", 2) == "something odd"
    assert error_line("", 5) == "exited with code 5"
    assert error_line("\n\n", None) == "failed"
    long = "error " + "x" * 10_000
    assert len(error_line(long, 1)) == 300


def test_go_tests_failure_line_is_not_taken_for_a_banner() -> None:
    output = "=== RUN   TestAdd\n--- FAIL: TestAdd (0.00s)\n    add_test.go:5: 3\nFAIL"
    assert error_line(output, 1) == "--- FAIL: TestAdd (0.00s)"


def test_a_secret_across_a_cut_is_redacted_before_the_cut() -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    for cut_at in range(980, 1_000):
        text = edit_change("/x.py", "a" * cut_at + " token=" + secret)
        assert "ghp_" not in text, cut_at
    assert "ghp_" not in command_change("x" * 190 + " " + secret)
    assert "ghp_" not in error_line("E " + "y" * 290 + " " + secret, 1)


def test_install_follows_a_linked_settings_file(tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "settings.json"
    target.parent.mkdir()
    target.write_text('{"model": "opus"}')
    link = tmp_path / "settings.json"
    link.symlink_to(target)
    install(CLAUDE_CODE, link, "devs hook claude-code")
    assert link.is_symlink()
    assert "hook claude-code" in target.read_text()


def test_a_relative_devs_db_in_two_folders_is_two_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"DEVS_DB": "state.sqlite"}
    keys = set()
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        keys.add(server_key(None, env))
    assert len(keys) == 2
    monkeypatch.chdir(tmp_path)
    assert server_key("/abs.sqlite", env) == server_key("/abs.sqlite", env)


def test_a_strategy_is_the_changes_and_is_bounded() -> None:
    changes = ["edit a.py: x = 1", "ran: pip install x"]
    assert strategy_of(changes, "pytest  -q") == "edit a.py: x = 1\nran: pip install x"
    assert strategy_of([], "pytest  -q") == "rerun without changes: pytest -q"
    huge = strategy_of([f"edit f{i}.py: " + "y" * 1_000 for i in range(20)], "pytest")
    assert len(huge) == STRATEGY_MAX
    assert re.search(r" \[\.\.\. sha256 [0-9a-f]{16}\]$", huge)
    # Changes that differ only past the cut are another strategy.
    other = strategy_of(
        [f"edit f{i}.py: " + "y" * 1_000 for i in range(19)] + ["edit f19.py: z"],
        "pytest",
    )
    assert other != huge
    assert len(other) == STRATEGY_MAX


@given(st.text(max_size=300), st.text(min_size=1, max_size=60))
def test_a_task_base_is_always_a_valid_task_id(top: str, branch: str) -> None:
    base = task_base(Place(top="/" + top, branch=branch, cwd="/"))
    assert 1 <= len(base) <= 200
    assert base.isprintable()
    assert base == base.strip()


def test_a_task_base_names_the_repository_and_branch() -> None:
    one = task_base(Place(top="/work/app", branch="feature/x", cwd="/work/app"))
    assert one.startswith("app@feature/x-")
    other = task_base(Place(top="/home/me/app", branch="feature/x", cwd="/"))
    assert one != other  # two clones are two tasks


def test_a_damaged_state_file_is_a_fresh_start() -> None:
    assert HookRecord.load(b"not json") == HookRecord()
    assert HookRecord.load(b"[1, 2]") == HookRecord()
    kept = HookRecord(generation=3, changes=["edit a"], stopped="why")
    assert HookRecord.load(kept.dump()) == kept


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DEVS_GATE_PATTERN", "(unclosed"),
        ("DEVS_URL", "ftp://x"),
        ("DEVS_HOOK_TIMEOUT", "nan"),
        ("DEVS_HOOK_TIMEOUT", "0"),
        ("DEVS_HOOK_TIMEOUT", "9999"),
        ("DEVS_TASK_ID", "line\nbreak"),
        ("DEVS_TASK_ID", "x" * 201),
    ],
)
def test_a_wrong_hook_setting_is_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        HookSettings.from_environ({name: value})
    assert raised.value.field == name
    assert name in str(raised.value)


def test_the_breakers_commands_are_recognised() -> None:
    command = hook_command("/opt/venv/bin/devs", "/data/devs.sqlite", "claude-code")
    assert own_agent(command) == "claude-code"
    assert own_agent("'/my dir/devs' hook codex") == "codex"
    assert own_agent("/usr/bin/other-tool hook claude-code") is None
    assert own_agent("echo devs") is None
    assert own_agent(None) is None


def test_install_merges_is_idempotent_and_uninstall_removes_only_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    theirs = {
        "model": "opus",
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}]}
            ],
            "Notification": [{"hooks": [{"type": "command", "command": "notify"}]}],
        },
    }
    path.write_bytes(orjson.dumps(theirs))
    command = hook_command("/bin/devs", None, "claude-code")
    assert install(CLAUDE_CODE, path, command)
    once = path.read_bytes()
    assert not install(CLAUDE_CODE, path, command)
    assert path.read_bytes() == once
    data = orjson.loads(once)
    assert data["model"] == "opus"
    assert data["hooks"]["PreToolUse"][0]["hooks"][0]["command"] == "lint"
    for event, _ in CLAUDE_CODE.events:
        assert any(
            h["command"] == command for g in data["hooks"][event] for h in g["hooks"]
        ), event
    found = status(CLAUDE_CODE, path)
    assert set(found.events) == {e for e, _ in CLAUDE_CODE.events}
    # Installing another devs replaces the entries instead of adding more.
    other = hook_command("/elsewhere/devs", None, "claude-code")
    install(CLAUDE_CODE, path, other)
    assert status(CLAUDE_CODE, path).commands == (other,)
    assert uninstall(CLAUDE_CODE, path)
    assert orjson.loads(path.read_bytes()) == theirs
    assert not uninstall(CLAUDE_CODE, path)


def test_install_refuses_a_file_it_cannot_read_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "settings.json"
    path.write_text("{not json")
    with pytest.raises(InvalidInput, match="not JSON"):
        install(CLAUDE_CODE, path, "devs hook claude-code")
    assert path.read_text() == "{not json"


def test_openhands_entries_go_where_openhands_reads_them(tmp_path: Path) -> None:
    """OpenHands reads snake_case events at the top level (or PascalCase, or
    under a "hooks" wrapper, which hides every other top-level key): the
    entries join the spelling the file already uses, never a second one."""
    top = tmp_path / "top.json"
    top.write_bytes(
        orjson.dumps(
            {"pre_tool_use": [{"matcher": "terminal", "hooks": [{"command": "mine"}]}]}
        )
    )
    command = hook_command("/bin/devs", None, "openhands")
    install(OPENHANDS, top, command)
    data = orjson.loads(top.read_bytes())
    assert "hooks" not in data
    assert set(data) == {"session_start", "pre_tool_use", "post_tool_use", "stop"}
    assert data["pre_tool_use"][0]["hooks"][0]["command"] == "mine"
    uninstall(OPENHANDS, top)
    assert orjson.loads(top.read_bytes()) == {
        "pre_tool_use": [{"matcher": "terminal", "hooks": [{"command": "mine"}]}]
    }

    pascal = tmp_path / "pascal.json"
    pascal.write_bytes(orjson.dumps({"PreToolUse": []}))
    install(OPENHANDS, pascal, command)
    data = orjson.loads(pascal.read_bytes())
    assert "pre_tool_use" not in data
    assert data["PreToolUse"][0]["hooks"][0]["command"] == command

    wrapped = tmp_path / "wrapped.json"
    wrapped.write_bytes(orjson.dumps({"hooks": {"stop": []}}))
    install(OPENHANDS, wrapped, command)
    data = orjson.loads(wrapped.read_bytes())
    assert set(data) == {"hooks"}
    assert set(data["hooks"]) == {
        "session_start",
        "pre_tool_use",
        "post_tool_use",
        "stop",
    }


def test_codex_entries_are_claude_codes_shape_in_codex_hooks_json(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".codex" / "hooks.json"
    command = hook_command("/bin/devs", "/data/x.sqlite", "codex")
    install(CODEX, path, command)
    data = orjson.loads(path.read_bytes())
    assert set(data["hooks"]) == {
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "Stop",
    }
    assert data["hooks"]["PostToolUse"][0]["matcher"] == "Bash|apply_patch"
    # Claude Code's entries in the same folder's other file are not Codex's.
    assert status(CLAUDE_CODE, path).events == ()


@pytest.mark.parametrize(
    ("argv", "call"),
    [
        (["hook", "claude-code"], ("claude-code", None)),
        (["--db", "/d/x.sqlite", "hook", "codex"], ("codex", "/d/x.sqlite")),
        (["--db=/d/x.sqlite", "hook", "openhands"], ("openhands", "/d/x.sqlite")),
        (["hook", "aider"], None),
        (["-v", "hook", "claude-code"], None),
        (["--db", "", "hook", "codex"], None),
        (["hooks", "install", "codex"], None),
        (["status"], None),
        ([], None),
    ],
)
def test_only_an_installed_hook_call_takes_the_fast_path(
    argv: list[str], call: tuple[str, str | None] | None
) -> None:
    assert hook_call(argv) == call
