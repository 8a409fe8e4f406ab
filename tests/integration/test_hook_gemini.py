"""``devs hook gemini`` on the events Gemini CLI 0.61.0 sent (captured by
tests/agents; tests/fixtures/hooks/README.md)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from devs.adapters.hooks.gemini import GEMINI
from devs.adapters.hooks.install import hook_command, install, status
from devs.domain.chart import TaskState
from tests.integration.test_hooks import Agent, fixture


@pytest.fixture
def gemini(tmp_path: Path) -> Iterator[Agent]:
    agent = Agent("gemini", tmp_path)
    yield agent
    agent.service.close()


def event(name: str) -> dict[str, Any]:
    return copy.deepcopy(fixture("gemini", f"real-{name}"))


def failing(n: int) -> dict[str, Any]:
    after = event("AfterTool-run_shell_command-failed")
    after["tool_input"] = {"command": "python -m pytest -q"}
    after["tool_response"]["llmContent"] = (
        f"<untrusted_context>\nOutput: E   assert {n} == 5\n1 failed in 0.1s\n"
        "Exit Code: 1\nProcess Group PGID: 7\n</untrusted_context>"
    )
    after["tool_response"]["returnDisplay"] = f"E   assert {n} == 5\n1 failed"
    return after


def write(n: int) -> dict[str, Any]:
    after = event("AfterTool-write_file")
    after["tool_input"] = {"file_path": "calc.py", "content": f"return {n}\n"}
    return after


def test_a_loop_is_recorded_with_its_exit_codes_and_ends_the_session(
    gemini: Agent,
) -> None:
    assert gemini.send(event("SessionStart")) == (None, 0)
    for n in range(1, 4):
        gemini.send(write(n))
        body, code = gemini.send(failing(n))
    assert code == 0
    assert body["continue"] is False
    assert body["systemMessage"] == body["stopReason"]
    assert "devs-recovery stopped task" in body["stopReason"]
    task = gemini.service.task(gemini.task_id)
    assert task.state is TaskState.ESCALATION
    assert [f.exit_code for f in task.failure_history] == [1, 1, 1]
    assert gemini.service.lessons(gemini.task_id)[0].failed_strategy == (
        "edit calc.py: return 1\n"
    )
    # Every tool is refused, and the session ends again at once.
    body, _ = gemini.send(event("BeforeTool-run_shell_command"))
    assert body["decision"] == "deny"
    assert body["continue"] is False
    # A prompt is not sent to the model.
    body, _ = gemini.send(event("BeforeAgent"))
    assert body["continue"] is False


def test_a_passing_run_has_no_exit_code_line_and_completes_the_task(
    gemini: Agent,
) -> None:
    gemini.send(write(1))
    passed = event("AfterTool-run_shell_command-passed")
    passed["tool_input"] = {"command": "python -m pytest -q"}
    assert gemini.send(passed) == (None, 0)
    assert gemini.service.task(gemini.task_id).state is TaskState.COMPLETED


def test_a_failed_gate_nudges_and_a_red_stop_is_refused_once(gemini: Agent) -> None:
    gemini.send(write(1))
    body, _ = gemini.send(failing(1))
    context = body["hookSpecificOutput"]["additionalContext"]
    assert "gate failed (1 in a row" in context
    body, _ = gemini.send(event("AfterAgent"))
    assert body == {"decision": "block", "reason": body["reason"]}
    assert gemini.send(event("AfterAgent-stop_hook_active")) == (None, 0)


def test_an_edit_that_failed_to_apply_is_no_change(gemini: Agent) -> None:
    gemini.send(event("AfterTool-replace-error"))
    gemini.send(failing(1))
    assert gemini.service.lessons(gemini.task_id) == []


def test_install_gives_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"security": {"auth": {"selectedType": "gemini-api-key"}}}')
    install(GEMINI, path, hook_command("/bin/devs", "/x.sqlite", "gemini"))
    data = orjson.loads(path.read_bytes())
    assert data["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    entry = data["hooks"]["BeforeTool"][0]["hooks"][0]
    assert entry["timeout"] == 30_000
    assert set(status(GEMINI, path).events) == {e for e, _ in GEMINI.events}
