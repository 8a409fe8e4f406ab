"""GitHub Copilot CLI's and Cursor's dialects of the circuit breaker on a real
SQLite store: Copilot's events as its real binary (1.0.102) sent them
(tests/fixtures/hooks/copilot/real-compat-*.json, the permission event
real-compat-PermissionRequest-bash.json), Cursor's as its documentation shows
them (tests/fixtures/hooks/cursor/doc-*.json); then ``devs hooks
install|status|uninstall`` for both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from devs.domain.chart import TaskState
from tests.integration.test_hooks import TRIES, Agent, fixture

PYTEST = "python -m pytest -q"
DEVS = str(Path(sys.executable).with_name("devs"))


def red_output(n: int, shell: int = 0) -> str:
    return (
        "F" + " " * 40 + "[100%]\n=== FAILURES ===\n"
        f"E       assert {n} == 5\n1 failed in 0.03s\n"
        f"<shellId: {shell} completed with exit code 1>"
    )


class Copilot(Agent):
    """Copilot's hook calls, from the events its binary sent."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__("copilot", tmp_path)

    def event(self, name: str) -> dict[str, Any]:
        return fixture("copilot", f"real-compat-{name}")

    def start(self) -> Any:
        return self.send(self.event("SessionStart"))

    def prompt(self) -> Any:
        return self.send(self.event("UserPromptSubmit"))

    def edit(self, path: str, text: str) -> Any:
        event = self.event("PostToolUse-Edit")
        event["tool_input"]["path"] = str(self.repo / path)
        event["tool_input"]["new_str"] = text
        return self.send(event)

    def write(self, path: str, text: str) -> Any:
        event = self.event("PostToolUse-Write")
        event["tool_input"] = {"path": str(self.repo / path), "file_text": text}
        return self.send(event)

    def pre(self, command: str | None = None, tool: str = "Bash") -> Any:
        event = self.event("PreToolUse-Bash")
        event["tool_name"] = tool
        event["tool_input"] = (
            {"command": command} if command else {"path": str(self.repo)}
        )
        return self.send(event)

    def pre_edit(self) -> Any:
        return self.send(self.event("PreToolUse-Edit"))

    def permission(self, command: str = PYTEST) -> Any:
        event = self.event("PermissionRequest-bash")
        event["toolInput"] = {"command": command}
        return self.send(event)

    def ran(self, command: str, output: str) -> Any:
        event = self.event("PostToolUse-Bash-failed")
        event["tool_input"] = {"command": command, "description": "Run tests"}
        event["tool_result"]["text_result_for_llm"] = output
        return self.send(event)

    def stop(self, active: bool = False) -> Any:
        event = self.event("Stop")
        event["stop_hook_active"] = active
        return self.send(event)


@pytest.fixture
def copilot(tmp_path: Path) -> Iterator[Copilot]:
    agent = Copilot(tmp_path)
    yield agent
    agent.service.close()


def test_copilot_stops_the_loop_and_ends_the_turn_at_the_permission_request(
    copilot: Copilot,
) -> None:
    assert copilot.start() == (None, 0)
    assert copilot.prompt() == (None, 0)
    answers = []
    for n in range(1, 4):
        assert copilot.edit(f"calc{n}.py", TRIES[n]) == (None, 0)
        assert copilot.pre(PYTEST) == (None, 0)
        assert copilot.permission() == (None, 0)
        answers.append(copilot.ran(PYTEST, red_output(n, n)))
    first, _, third = answers
    # The exit code is the shellId line's: the first failure is a nudge,
    # appended to the tool's output.
    assert first[1] == 0
    assert "1 in a row" in first[0]["additionalContext"]
    body, code = third
    assert code == 0
    reason = body["additionalContext"]
    assert "escalated" in reason
    assert "Failures: 3" in reason
    assert "E assert 3 == 5" in reason
    assert "<shellId" not in reason
    assert f"devs resume {copilot.task_id} --actor NAME --reason WHY" in reason
    task = copilot.service.task(copilot.task_id)
    assert task.state is TaskState.ESCALATION
    lessons = copilot.service.lessons(copilot.task_id)
    assert [lesson.rca_summary for lesson in lessons] == [
        f"E assert {n} == 5" for n in (1, 2, 3)
    ]
    assert "edit calc1.py" in lessons[0].failed_strategy

    # Shell and edit tools: nothing on PreToolUse, so that PermissionRequest
    # fires; it refuses and ends the turn.
    assert copilot.pre("ls") == (None, 0)
    assert copilot.pre(PYTEST) == (None, 0)
    assert copilot.pre_edit() == (None, 0)
    body, code = copilot.permission("ls")
    assert code == 0
    assert body == {"behavior": "deny", "message": reason, "interrupt": True}
    # A tool that only reads asks no permission: refused on PreToolUse.
    body, code = copilot.pre(tool="view")
    assert code == 0
    assert body == {"permissionDecision": "deny", "permissionDecisionReason": reason}
    # A prompt is refused before the model is asked.
    body, code = copilot.prompt()
    assert (body, code) == ({"decision": "block", "reason": reason}, 0)
    # The stopped task does not hold the agent at Stop.
    assert copilot.stop() == (None, 0)

    copilot.service.resume(copilot.task_id, actor="alice", reason="look again")
    assert copilot.pre(tool="view") == (None, 0)
    assert copilot.permission("ls") == (None, 0)
    assert copilot.prompt() == (None, 0)


def test_copilot_reads_edits_from_edit_write_and_the_apply_patch_string(
    copilot: Copilot,
) -> None:
    copilot.start()
    assert copilot.write("notes.txt", "hello notes\n") == (None, 0)
    assert copilot.send(copilot.event("PostToolUse-Edit")) == (None, 0)
    patch = copilot.event("PreToolUse-Edit-apply_patch")
    assert copilot.send(patch) == (None, 0)
    posted = copilot.event("PostToolUse-Edit")
    posted["tool_input"] = patch["tool_input"]
    assert copilot.send(posted) == (None, 0)
    # A failed edit (not applied) is no change.
    assert copilot.send(copilot.event("PostToolUseFailure-Edit")) == (None, 0)
    copilot.ran(PYTEST, red_output(1))
    [lesson] = copilot.service.lessons(copilot.task_id)
    assert "edit notes.txt" in lesson.failed_strategy
    assert "hello notes" in lesson.failed_strategy
    assert "return a - b  # try 1" in lesson.failed_strategy
    assert "edit calc.py" in lesson.failed_strategy


def test_copilot_reads_the_exit_code_from_the_shell_id_line(copilot: Copilot) -> None:
    copilot.start()
    passed = copilot.event("PostToolUse-Bash-passed")
    failed = copilot.event("PostToolUse-Bash-failed")
    assert copilot.send(failed) != (None, 0)
    task = copilot.service.task(copilot.task_id)
    assert task.consecutive_failures == 1
    assert task.failure_history[-1].exit_code == 1
    assert copilot.send(passed) == (None, 0)
    assert copilot.service.task(copilot.task_id).state is TaskState.COMPLETED
    seen = copilot.dialect.read(failed)
    assert seen.exit_code == 1
    assert seen.failed
    assert seen.output.endswith("1 failed in 0.03s")
    # No shellId line: the runner's summary says, else it is not judged.
    quiet = copilot.event("PostToolUse-Bash-failed")
    quiet["tool_result"]["text_result_for_llm"] = "(still running)"
    assert copilot.dialect.read(quiet).unjudged


def test_copilot_refuses_the_same_patch_again_on_pre_tool_use(
    copilot: Copilot,
) -> None:
    copilot.start()
    patch = "def parse(text):\n    return json.loads(text.strip())\n"
    copilot.edit("parse.py", patch)
    copilot.ran(PYTEST, red_output(1))
    copilot.edit("parse.py", patch)
    body, code = copilot.pre(PYTEST)
    assert code == 0
    assert body["permissionDecision"] == "deny"
    assert "already failed" in body["permissionDecisionReason"]
    assert "json.loads(text.strip())" in body["permissionDecisionReason"]
    assert copilot.service.task(copilot.task_id).state is TaskState.PAUSED
    # The next call asks permission, which ends the turn.
    assert copilot.pre("ls") == (None, 0)
    body, _ = copilot.permission("ls")
    assert body["interrupt"] is True
    assert "tried again a strategy that already failed" in body["message"]


def test_copilot_blocks_stop_once_while_red_and_refuses_the_guarded_commands(
    copilot: Copilot,
) -> None:
    copilot.start()
    copilot.edit("a.py", "x = 1")
    copilot.ran(PYTEST, red_output(1))
    body, code = copilot.stop()
    assert code == 0
    assert body["decision"] == "block"
    assert "the gate is red" in body["reason"]
    assert copilot.send(copilot.event("Stop-stop_hook_active")) == (None, 0)
    assert copilot.stop() == (None, 0)
    body, code = copilot.pre(f"devs resume {copilot.task_id} --actor me --reason x")
    assert code == 0
    assert body["permissionDecision"] == "deny"
    assert "refuses this tool call" in body["permissionDecisionReason"]


def test_copilot_answers_other_and_unreadable_events_with_nothing(
    copilot: Copilot,
) -> None:
    for name in ("SessionEnd", "ErrorOccurred"):
        assert copilot.send(copilot.event(name)) == (None, 0)
    # camelCase events (no event name): nothing, exit 0 (a failing hook
    # would refuse the tool).
    assert copilot.send(fixture("copilot", "real-preToolUse-bash")) == (None, 0)


# ---------------------------------------------------------------- Cursor


class Cursor(Agent):
    def __init__(self, tmp_path: Path) -> None:
        super().__init__("cursor", tmp_path)

    def event(self, name: str) -> dict[str, Any]:
        event = fixture("cursor", f"doc-{name}")
        event["workspace_roots"] = [str(self.repo)]
        return event

    def start(self) -> Any:
        return self.send(self.event("sessionStart"))

    def prompt(self) -> Any:
        return self.send(self.event("beforeSubmitPrompt"))

    def edit(self, path: str, text: str) -> Any:
        event = self.event("afterFileEdit")
        event["file_path"] = str(self.repo / path)
        event["edits"] = [{"old_string": "pass", "new_string": text}]
        return self.send(event)

    def pre(self, command: str | None = None, tool: str = "Shell") -> Any:
        event = self.event("preToolUse")
        event["tool_name"] = tool
        event["tool_input"] = (
            {"command": command, "working_directory": str(self.repo)}
            if command
            else {"file_path": str(self.repo / "calc.py")}
        )
        return self.send(event)

    def ran(self, command: str, code: int, stdout: str) -> Any:
        event = self.event("postToolUse")
        event["tool_input"] = {"command": command}
        event["tool_output"] = json.dumps({"exitCode": code, "stdout": stdout})
        return self.send(event)

    def stop(self, loops: int = 0) -> Any:
        event = self.event("stop")
        event["loop_count"] = loops
        return self.send(event)


@pytest.fixture
def cursor(tmp_path: Path) -> Iterator[Cursor]:
    agent = Cursor(tmp_path)
    yield agent
    agent.service.close()


def test_cursor_refuses_every_tool_and_prompt_once_the_loop_is_stopped(
    cursor: Cursor,
) -> None:
    assert cursor.start() == (None, 0)
    answers = []
    for n in range(1, 4):
        assert cursor.edit(f"calc{n}.py", TRIES[n]) == (None, 0)
        assert cursor.pre(PYTEST) == (None, 0)
        answers.append(cursor.ran(PYTEST, 1, f"E   assert {n} == 5\n1 failed"))
    first, _, third = answers
    assert "1 in a row" in first[0]["additional_context"]
    reason = third[0]["additional_context"]
    assert "escalated" in reason
    assert f"devs resume {cursor.task_id}" in reason
    assert cursor.service.task(cursor.task_id).state is TaskState.ESCALATION
    for denied in (cursor.pre("ls"), cursor.pre(tool="Read"), cursor.pre(PYTEST)):
        assert denied == (
            {"permission": "deny", "user_message": reason, "agent_message": reason},
            0,
        )
    assert cursor.prompt() == ({"continue": False, "user_message": reason}, 0)
    assert cursor.start() == ({"additional_context": reason}, 0)
    cursor.service.resume(cursor.task_id, actor="alice", reason="look again")
    assert cursor.pre("ls") == (None, 0)
    assert cursor.prompt() == (None, 0)


def test_cursor_stop_follows_up_once_while_red_and_reads_the_exit_code(
    cursor: Cursor,
) -> None:
    cursor.start()
    cursor.edit("a.py", "x = 1")
    cursor.ran(PYTEST, 2, "boom")
    task = cursor.service.task(cursor.task_id)
    assert task.failure_history[-1].exit_code == 2
    body, code = cursor.stop()
    assert code == 0
    assert "the gate is red" in body["followup_message"]
    assert cursor.stop(loops=1) == (None, 0)
    assert cursor.stop() == (None, 0)
    cursor.edit("a.py", "x = 2")
    assert cursor.ran(PYTEST, 0, "1 passed") == (None, 0)
    assert cursor.service.task(cursor.task_id).state is TaskState.COMPLETED


def test_cursor_reads_the_documented_events(cursor: Cursor) -> None:
    dialect = cursor.dialect
    pre = dialect.read(fixture("cursor", "doc-preToolUse"))
    assert (pre.kind, pre.command, pre.cwd) == ("pre_tool", "npm install", "/project")
    post = dialect.read(fixture("cursor", "doc-postToolUse"))
    assert (post.kind, post.exit_code, post.output) == (
        "post_tool",
        0,
        "All tests passed",
    )
    edit = dialect.read(fixture("cursor", "doc-afterFileEdit"))
    assert edit.edits == (("<absolute path>", "<replace>"),)
    assert dialect.read(fixture("cursor", "doc-stop")).kind == "stop"
    assert dialect.read(fixture("cursor", "doc-sessionStart")).cwd == "<path>"
    for other in ("afterShellExecution", "sessionEnd", "postToolUseFailure"):
        assert dialect.read(fixture("cursor", f"doc-{other}")).kind == "other"


# ------------------------------------------------------- install round trip


def devs(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVS_")}
    env["HOME"] = str(home)
    return subprocess.run(
        [DEVS, "--db", str(home / "s.sqlite"), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def installed(home: Path, project: Path, agent: str) -> list[dict[str, Any]]:
    shown = devs(home, "hooks", "status", "--dir", str(project), "--json")
    assert shown.returncode == 0, shown.stderr
    return [
        item
        for item in orjson.loads(shown.stdout)
        if item["agent"] == agent and item["installed"]
    ]


def test_copilot_hooks_file_is_our_own_and_round_trips(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "p"
    home.mkdir()
    project.mkdir()
    other = project / ".github/hooks/team.json"
    other.parent.mkdir(parents=True)
    other.write_text('{"version": 1, "hooks": {"preToolUse": []}}\n')
    first = devs(home, "hooks", "install", "copilot", "--dir", str(project))
    assert first.returncode == 0, first.stderr
    path = project / ".github/hooks/devs-recovery.json"
    data = orjson.loads(path.read_bytes())
    assert data["version"] == 1
    assert list(data["hooks"]) == [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PermissionRequest",
        "PostToolUse",
        "Stop",
    ]
    [entry] = data["hooks"]["PreToolUse"]
    assert entry["type"] == "command"
    assert entry["bash"].endswith("hook copilot")
    assert entry["timeoutSec"] == 30
    before = path.read_bytes()
    again = devs(home, "hooks", "install", "copilot", "--dir", str(project))
    assert "already installed" in again.stdout
    assert path.read_bytes() == before
    [item] = installed(home, project, "copilot")
    assert item["path"] == str(path)
    assert item["missing"] == []
    removed = devs(home, "hooks", "uninstall", "copilot", "--dir", str(project))
    assert "removed" in removed.stdout
    assert not path.exists()
    assert other.read_text() == '{"version": 1, "hooks": {"preToolUse": []}}\n'
    assert installed(home, project, "copilot") == []
    user = devs(home, "hooks", "install", "copilot", "--user")
    assert user.returncode == 0, user.stderr
    assert (home / ".copilot/hooks/devs-recovery.json").is_file()


def test_cursor_hooks_are_merged_into_the_shared_file(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "p"
    home.mkdir()
    path = project / ".cursor/hooks.json"
    path.parent.mkdir(parents=True)
    theirs = {"command": "./hooks/format.sh"}
    path.write_text(
        json.dumps({"version": 1, "hooks": {"afterFileEdit": [theirs]}, "x": 1})
    )
    first = devs(home, "hooks", "install", "cursor", "--dir", str(project))
    assert first.returncode == 0, first.stderr
    data = orjson.loads(path.read_bytes())
    assert data["x"] == 1
    assert data["version"] == 1
    edits = data["hooks"]["afterFileEdit"]
    assert edits[0] == theirs
    assert edits[1]["command"].endswith("hook cursor")
    assert edits[1]["timeout"] == 30
    assert "type" not in edits[1]
    assert set(data["hooks"]) == {
        "sessionStart",
        "beforeSubmitPrompt",
        "preToolUse",
        "postToolUse",
        "afterFileEdit",
        "stop",
    }
    before = path.read_bytes()
    devs(home, "hooks", "install", "cursor", "--dir", str(project))
    assert path.read_bytes() == before
    [item] = installed(home, project, "cursor")
    assert item["missing"] == []
    devs(home, "hooks", "uninstall", "cursor", "--dir", str(project))
    assert orjson.loads(path.read_bytes()) == {
        "version": 1,
        "hooks": {"afterFileEdit": [theirs]},
        "x": 1,
    }
    assert installed(home, project, "cursor") == []
