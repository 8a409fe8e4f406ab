"""The circuit breaker (``devs hook AGENT``) on a real SQLite store, driven by
the agents' recorded events (tests/fixtures/hooks), answered as each agent
reads answers. The same through the real binary: tests/e2e/test_hook_agent.py."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from devs.adapters.config import Settings, open_service
from devs.adapters.hooks.breaker import Place, task_base
from devs.adapters.hooks.dialect import judged_by_output
from devs.adapters.hooks.registry import load
from devs.adapters.hooks.runner import respond
from devs.domain import RecoveryService
from devs.domain.chart import TaskState

FIXTURES = Path(__file__).parent.parent / "fixtures" / "hooks"
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def fixture(agent: str, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(
        (FIXTURES / agent / f"{name}.json").read_bytes()
    )
    return loaded


def git_repo(path: Path) -> Path:
    path.mkdir()
    run = ["git", "-C", str(path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    subprocess.run([*run, "commit", "-q", "--allow-empty", "-m", "start"], check=True)
    return path


class Agent:
    """One agent's hook calls against one store, as the agent makes them."""

    def __init__(self, agent: str, tmp_path: Path, **env: str) -> None:
        self.agent = agent
        self.dialect = load(agent).dialect
        self.repo = git_repo(tmp_path / "repo")
        self.db = tmp_path / "state.sqlite"
        self.environ = {"DEVS_HOOK_STATE_DIR": str(tmp_path / "hooks"), **env}
        self.service: RecoveryService = open_service(Settings(db=str(self.db)))

    @property
    def task_id(self) -> str:
        return task_base(Place(top=str(self.repo), branch="main", cwd=str(self.repo)))

    def send(self, event: dict[str, Any]) -> tuple[Any, int]:
        key = "working_dir" if self.agent == "openhands" else "cwd"
        event[key] = str(self.repo)
        text, code = respond(
            self.dialect,
            orjson.dumps(event),
            self.environ,
            lambda: self.service,
            f"sqlite:{self.db}",
        )
        return (orjson.loads(text) if text is not None else None), code

    # Claude Code's events, from the recorded ones

    def start(self) -> Any:
        return self.send(fixture("claude-code", "SessionStart"))

    def edit(self, path: str, text: str) -> Any:
        event = fixture("claude-code", "PostToolUse-Write")
        event["tool_name"] = "Edit"
        event["tool_input"] = {
            "file_path": str(self.repo / path),
            "old_string": "pass",
            "new_string": text,
            "replace_all": False,
        }
        return self.send(event)

    def pre(self, command: str | None = None, tool: str = "Bash") -> Any:
        event = fixture("claude-code", "PreToolUse-Bash")
        event["tool_name"] = tool
        event["tool_input"] = {"command": command} if command else {"file_path": "x"}
        return self.send(event)

    def failed(self, command: str, error: str) -> Any:
        event = fixture("claude-code", "PostToolUseFailure-Bash")
        event["tool_input"] = {"command": command}
        event["error"] = error
        return self.send(event)

    def passed(self, command: str, stdout: str = "3 passed") -> Any:
        event = fixture("claude-code", "PostToolUse-Write")
        event["tool_name"] = "Bash"
        event["tool_input"] = {"command": command}
        event["tool_response"] = {
            "stdout": stdout,
            "stderr": "",
            "interrupted": False,
            "isImage": False,
        }
        return self.send(event)

    def stop(self, active: bool = False) -> Any:
        event = fixture("claude-code", "Stop")
        event["stop_hook_active"] = active
        return self.send(event)


@pytest.fixture
def claude(tmp_path: Path) -> Iterator[Agent]:
    agent = Agent("claude-code", tmp_path)
    yield agent
    agent.service.close()


TRIES = {
    1: "def add(a, b):\n    return a + b",
    2: "import operator\nadd = operator.add",
    3: "add = lambda *xs: sum(xs)",
}
"""Three changes far enough apart not to be the same strategy again."""


def red(n: int) -> str:
    return f"Exit code 1\n===== test session starts\nE   assert {n} == 2\n1 failed"


def test_session_start_starts_the_task_of_the_repository_and_branch(
    claude: Agent,
) -> None:
    assert claude.start() == (None, 0)
    task = claude.service.task(claude.task_id)
    assert task.agent == "claude-code"
    head = subprocess.run(
        ["git", "-C", str(claude.repo), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert task.last_commit == head
    assert claude.start() == (None, 0)  # started once


def test_a_loop_of_failing_gates_is_stopped_and_every_tool_refused_until_resumed(
    claude: Agent,
) -> None:
    claude.start()
    answers = []
    for n in range(1, 4):
        claude.edit(f"calc{n}.py", TRIES[n])
        assert claude.pre("pytest -q") == (None, 0)
        answers.append(claude.failed("pytest -q", red(n)))
    first, _, third = answers
    assert first[1] == 0
    context = first[0]["hookSpecificOutput"]
    assert context["hookEventName"] == "PostToolUseFailure"
    assert "1 in a row" in context["additionalContext"]
    # The third failure reaches the escalation threshold: the agent is halted.
    halted, code = third
    assert code == 0
    assert halted["continue"] is False
    reason = halted["stopReason"]
    assert "escalated" in reason
    assert "Failures: 3" in reason
    assert "E assert 3 == 2" in reason
    assert f"devs resume {claude.task_id} --actor NAME --reason WHY" in reason

    task = claude.service.task(claude.task_id)
    assert task.state is TaskState.ESCALATION
    lessons = claude.service.lessons(claude.task_id)
    assert len(lessons) == 3
    assert lessons[0].rca_summary == "E assert 1 == 2"
    assert "edit calc1.py" in lessons[0].failed_strategy
    assert "pytest" not in lessons[0].failed_strategy

    # Every tool call is refused now, gate or not, with the same reason.
    for denied in (claude.pre("ls"), claude.pre(tool="Read"), claude.pre("pytest")):
        body, code = denied
        assert code == 0
        assert body["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert body["hookSpecificOutput"]["permissionDecisionReason"] == reason
    # A human lets it go on: tools are allowed again.
    claude.service.resume(claude.task_id, actor="alice", reason="look again")
    assert claude.pre("ls") == (None, 0)


def test_the_same_patch_again_is_refused_with_what_failed_before(
    claude: Agent,
) -> None:
    claude.start()
    patch = "def parse(text):\n    return json.loads(text.strip())\n"
    claude.edit("parse.py", patch)
    claude.pre("pytest")
    claude.failed("pytest", red(1))
    claude.edit("parse.py", patch)
    body, code = claude.pre("pytest")
    assert code == 0
    denial = body["hookSpecificOutput"]
    assert denial["permissionDecision"] == "deny"
    assert "already failed" in denial["permissionDecisionReason"]
    assert "MUST NOT be used" in denial["permissionDecisionReason"]
    assert "json.loads(text.strip())" in denial["permissionDecisionReason"]
    assert body["continue"] is False  # the blacklist pause stops the agent
    assert "tried again a strategy that already failed" in body["stopReason"]
    assert claude.service.task(claude.task_id).state is TaskState.PAUSED


def test_a_rerun_without_changes_is_counted_but_not_a_lesson(claude: Agent) -> None:
    claude.start()
    claude.failed("pytest", red(1))
    assert claude.pre("pytest") == (None, 0)  # nothing changed: no strategy
    claude.failed("pytest", red(1))
    assert claude.service.task(claude.task_id).consecutive_failures == 2
    assert claude.service.lessons(claude.task_id) == []


def test_stop_is_refused_once_per_red_gate(claude: Agent) -> None:
    claude.start()
    assert claude.stop() == (None, 0)  # no gate yet
    claude.edit("a.py", "x = 1")
    claude.failed("pytest", red(1))
    body, code = claude.stop()
    assert code == 0
    assert body["decision"] == "block"
    assert "the gate is red" in body["reason"]
    assert claude.stop(active=True) == (None, 0)
    assert claude.stop() == (None, 0)  # once for this failing gate
    claude.edit("a.py", "x = 2")
    claude.failed("pytest", red(2))
    assert claude.stop()[0]["decision"] == "block"  # a new failing gate


def test_a_green_gate_completes_the_task_and_the_next_red_one_starts_another(
    claude: Agent,
) -> None:
    claude.start()
    claude.edit("a.py", "x = 1")
    claude.failed("pytest", red(1))
    assert claude.passed("pytest") == (None, 0)
    assert claude.service.task(claude.task_id).state is TaskState.COMPLETED
    assert claude.stop() == (None, 0)
    claude.edit("b.py", "y = 1")
    claude.failed("pytest", red(5))
    second = claude.service.task(f"{claude.task_id}.2")
    assert second.consecutive_failures == 1
    assert second.state is TaskState.GATE_FAILED
    # A lost state file finds the series' task in the log again.
    for path in (claude.repo.parent / "hooks").glob("*.json"):
        path.unlink()
    claude.edit("b.py", "y = 2")
    claude.failed("pytest", red(6))
    assert claude.service.task(f"{claude.task_id}.2").consecutive_failures == 2


def test_devs_task_id_names_the_task(tmp_path: Path) -> None:
    agent = Agent("claude-code", tmp_path, DEVS_TASK_ID="ticket-42")
    agent.start()
    agent.failed("cargo test", "Exit code 101\ntest result: FAILED")
    task = agent.service.task("ticket-42")
    assert task.failure_history[-1].exit_code == 101
    assert task.last_commit is not None  # the commit at HEAD all the same
    agent.service.close()


def test_a_run_in_the_background_or_interrupted_is_not_judged(claude: Agent) -> None:
    """Claude Code answers a background run at once (its tests have not run)
    and an interrupted one did not end on its own: neither passes nor fails."""
    claude.start()
    claude.edit("a.py", "x = 1")
    event = fixture("claude-code", "PostToolUse-Write")
    event["tool_name"] = "Bash"
    event["tool_input"] = {"command": "pytest", "run_in_background": True}
    event["tool_response"] = {"stdout": "", "stderr": "", "interrupted": False}
    assert claude.send(event) == (None, 0)
    interrupted = fixture("claude-code", "PostToolUseFailure-Bash")
    interrupted["tool_input"] = {"command": "pytest"}
    interrupted["is_interrupt"] = True
    assert claude.send(interrupted) == (None, 0)
    task = claude.service.task(claude.task_id)
    assert task.state is TaskState.RUNNING
    assert task.failure_history == ()
    assert claude.service.history(claude.task_id)[-1].event == "Started"


def test_stop_is_refused_after_a_resume_while_the_gate_is_still_red(
    claude: Agent,
) -> None:
    claude.start()
    for n in range(1, 4):
        claude.edit(f"calc{n}.py", TRIES[n])
        claude.failed("pytest", red(n))
    assert claude.stop() == (None, 0)  # stopped: the stop reason said it all
    claude.service.resume(claude.task_id, actor="alice", reason="one more go")
    body, _ = claude.stop()
    assert body["decision"] == "block"


def test_a_call_no_one_answered_still_refuses_a_stopped_tasks_tools(
    claude: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    from devs.adapters.hooks.runner import refusal

    claude.start()
    for n in range(1, 4):
        claude.edit(f"calc{n}.py", TRIES[n])
        claude.failed("pytest", red(n))
    event = fixture("claude-code", "PreToolUse-Bash")
    event["cwd"] = str(claude.repo)
    text, errors, code = refusal(
        "claude-code", str(claude.db), orjson.dumps(event), claude.environ, "timed out"
    )
    assert code == 0
    assert (
        orjson.loads(text or "")["hookSpecificOutput"]["permissionDecision"] == "deny"
    )
    assert "timed out" in errors
    # Not a tool call, or not stopped: the error alone.
    stop = fixture("claude-code", "Stop")
    stop["cwd"] = str(claude.repo)
    assert refusal(
        "claude-code", str(claude.db), orjson.dumps(stop), claude.environ, "timed out"
    )[::2] == (None, 1)


def test_secrets_in_commands_and_outputs_are_not_stored(claude: Agent) -> None:
    claude.start()
    claude.edit("cfg.py", f"TOKEN = '{SECRET}'")
    claude.failed(
        f"GITHUB_TOKEN={SECRET} pytest", f"Exit code 1\nauth failed for {SECRET}"
    )
    claude.service.close()
    assert SECRET.encode() not in claude.db.read_bytes()
    for path in (claude.repo.parent / "hooks").glob("*"):
        assert SECRET.encode() not in path.read_bytes()


def test_a_malformed_event_is_one_line_and_exit_1(
    claude: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    for raw in (b"{not json", b"[1]", b'{"no": "event name"}', b"\xff\xfe"):
        text, code = respond(
            claude.dialect, raw, claude.environ, lambda: claude.service, "s"
        )
        assert (text, code) == (None, 1)
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("devs hook: error: malformed hook event")


def test_a_store_that_fails_refuses_tools_only_when_the_task_was_stopped(
    claude: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    claude.start()

    def broken() -> RecoveryService:
        raise OSError("disk on fire")

    event = fixture("claude-code", "PreToolUse-Bash")
    event["cwd"] = str(claude.repo)
    raw = orjson.dumps(event)
    assert respond(
        claude.dialect, raw, claude.environ, broken, f"sqlite:{claude.db}"
    ) == (
        None,
        1,
    )
    assert "disk on fire" in capsys.readouterr().err
    # Once seen stopped, a failing store does not let a tool through.
    for n in range(3):
        claude.edit(f"a{n}.py", TRIES[n + 1])
        claude.failed("pytest", red(n))
    text, code = respond(
        claude.dialect, raw, claude.environ, broken, f"sqlite:{claude.db}"
    )
    assert code == 0
    assert text is not None
    assert orjson.loads(text)["hookSpecificOutput"]["permissionDecision"] == "deny"


# ---------------------------------------------------------------- Codex


def test_codex_reads_the_result_from_the_output_and_answers_only_what_it_reads(
    tmp_path: Path,
) -> None:
    codex = Agent("codex", tmp_path)
    patch = fixture("codex", "PostToolUse-apply_patch")
    failed = fixture("codex", "PostToolUse-Bash")
    unknown = fixture("codex", "PostToolUse-Bash")  # "BYE": says neither
    unknown["tool_input"] = {"command": "pytest -q"}
    assert codex.send(unknown) == (None, 0)
    with pytest.raises(Exception, match="unknown task"):
        codex.service.task(codex.task_id)  # not judged, not recorded
    for n in range(3):
        patch["tool_input"]["command"] = (
            f"*** Begin Patch\n*** Update File: src/app.py\n@@\n-    return 1\n"
            f"+    return {n} * 1000 + {n * 7}\n*** End Patch"
        )
        codex.send(dict(patch))
        failed["tool_input"] = {"command": "pytest -q"}
        failed["tool_response"] = (
            f"E  assert {n} == 1\n===== {n + 1} failed in 0.1s ====="
        )
        body, code = codex.send(dict(failed))
    # Nothing halts Codex within a turn: the model gets the reason in place
    # of the output (a block, which Codex also prints on stderr).
    assert body == {"decision": "block", "reason": body["reason"]}
    task = codex.service.task(codex.task_id)
    assert task.state is TaskState.ESCALATION
    assert task.agent == "codex"
    assert "src/app.py" in codex.service.lessons(codex.task_id)[0].failed_strategy
    # PreToolUse: exactly the deny shape, nothing Codex would refuse to read.
    pre = fixture("codex", "PreToolUse-Bash")
    body, code = codex.send(pre)
    assert code == 0
    assert body == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": body["hookSpecificOutput"][
                "permissionDecisionReason"
            ],
        }
    }
    codex.service.close()


@pytest.mark.parametrize(
    ("output", "judged"),
    [
        ("Exit code: 0\nWall time: 1s\nOutput:\n", (False, 0)),
        ("Process exited with code 7\nFinal output:\n", (True, 7)),
        ("==== 2 failed, 1 passed in 0.3s ====", (True, None)),
        ("==== 3 passed in 0.3s ====", (False, 0)),
        ("test result: FAILED. 1 passed; 1 failed", (True, None)),
        ("ok  \texample.com/pkg\t0.01s", (False, 0)),
        ("--- FAIL: TestAdd (0.00s)\nFAIL", (True, None)),
        ("Tests:       1 failed, 4 passed, 5 total", (True, None)),
        ("make: *** [Makefile:3: test] Error 1", (True, None)),
        ("BYE\n", None),
        ("svelte-check found 0 errors\n==== 12 passed in 1s ====", (False, 0)),
    ],
)
def test_codex_gate_results_are_read_from_the_output(
    output: str, judged: tuple[bool, int | None] | None
) -> None:
    assert judged_by_output(output) == judged


# ------------------------------------------------------------ OpenHands


def test_openhands_exit_codes_and_answers(tmp_path: Path) -> None:
    hands = Agent("openhands", tmp_path)
    edit = fixture("openhands", "PostToolUse-file_editor")
    gate = fixture("openhands", "PostToolUse-terminal")
    gate["tool_input"]["command"] = "python -m pytest"
    for n in range(3):
        edit["tool_input"]["new_str"] = f"return {n} * 1000 + {n * 13}"
        assert hands.send(dict(edit)) == (None, 0)
        gate["tool_response"]["content"][0]["text"] = f"E   assert {n} == 1\n1 failed"
        body, code = hands.send(dict(gate))
    # PostToolUse cannot stop OpenHands: it is told, and its next tool refused.
    assert code == 0
    assert "escalated" in body["additionalContext"]
    assert hands.service.task(hands.task_id).agent == "openhands"
    body, code = hands.send(fixture("openhands", "PreToolUse-terminal"))
    assert code == 2
    assert body["decision"] == "deny"
    assert "escalated" in body["reason"]
    hands.service.close()
