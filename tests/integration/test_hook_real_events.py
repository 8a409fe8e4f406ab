"""The breaker on the events the real binaries sent (``real-*.json``,
captured by tests/agents; tests/fixtures/hooks/README.md says how), one test
per thing the binaries showed; the agents lane checks the same in the real
processes, these without them. And the registry: every agent it lists is
one the launcher, the CLI and docs/agents.md know."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from devs.adapters.hooks import registry
from devs.adapters.launch import hook_call
from devs.domain.chart import TaskState
from tests.integration.test_hook_loops import claude, codex
from tests.integration.test_hooks import Agent, fixture

__all__ = ["claude", "codex"]  # the fixtures, shared

DOCS = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def real(agent: str, name: str, **fields: Any) -> dict[str, Any]:
    event = copy.deepcopy(fixture(agent, f"real-{name}"))
    event.update(fields)
    return event


def escalate(agent: Agent) -> None:
    agent.service.start_task(agent.task_id, agent=agent.agent)
    for n in range(3):
        agent.service.record_gate(agent.task_id, 1, gate="pytest", error=f"E {n}")


def test_claude_codes_batch_end_and_prompt_halt_a_stopped_task(
    claude: Agent,
) -> None:
    assert claude.send(real("claude-code", "PostToolBatch-Bash")) == (None, 0)
    escalate(claude)
    for name in ("PostToolBatch-Bash", "PostToolBatch-Write", "UserPromptSubmit"):
        body, code = claude.send(real("claude-code", name))
        assert code == 0
        assert body["continue"] is False, name
        assert body["systemMessage"] == body["stopReason"]
        assert "devs-recovery stopped task" in body["stopReason"]


def test_claude_codes_real_failure_is_counted_with_its_exit_code(
    claude: Agent,
) -> None:
    claude.send(real("claude-code", "PostToolUse-Write"))
    claude.send(real("claude-code", "PostToolUseFailure-Bash"))
    failure = claude.service.task(claude.task_id).failure_history[-1]
    assert failure.exit_code == 1
    assert failure.error_message.startswith("E ")


def test_codex_shell_patch_and_failure_as_the_binary_sent_them(codex: Agent) -> None:
    assert codex.send(real("codex", "PreToolUse-Bash-apply_patch")) == (None, 0)
    codex.send(real("codex", "PostToolUse-Bash-failed"))
    task = codex.service.task(codex.task_id)
    assert task.failure_history[-1].exit_code == 1
    assert task.failure_history[-1].reason == "NON_ZERO_EXIT"
    (lesson,) = codex.service.lessons(codex.task_id)
    assert lesson.failed_strategy.startswith("edit calc.py:")
    assert "return a * b" in lesson.failed_strategy


def test_codex_prompt_of_a_stopped_task_is_blocked(codex: Agent) -> None:
    escalate(codex)
    body, _ = codex.send(real("codex", "UserPromptSubmit"))
    assert body["decision"] == "block"
    assert "devs-recovery stopped task" in body["reason"]
    after = real("codex", "PostToolUse-Bash-failed")
    body, _ = codex.send(after)
    assert body == {"decision": "block", "reason": body["reason"]}
    assert codex.service.task(codex.task_id).state is TaskState.ESCALATION


@pytest.mark.parametrize("name", list(registry.AGENTS))
def test_every_registered_agent_is_known_everywhere(name: str) -> None:
    agent = registry.load(name)
    assert agent.name == name
    assert agent.layout.agent == name
    assert agent.dialect.agent == name
    assert agent.docs.startswith("https://")
    assert hook_call(["--db", "/x.sqlite", "hook", name]) == (name, "/x.sqlite")
    text = DOCS.read_text()
    assert f"devs hooks install {name}" in text
    assert agent.title in text


def test_a_task_the_hook_starts_links_the_transcript_and_the_branch(
    claude: Agent,
) -> None:
    """Claude Code's events name the session's transcript: the task the
    breaker starts links it, with the branch, for the people who answer it."""
    event = real("claude-code", "PostToolUseFailure-Bash")
    transcript = "/home/ann/.claude/projects/app/0089.jsonl"
    claude.send({**event, "transcript_path": transcript})
    links = claude.service.task(claude.task_id).links
    assert links is not None
    assert links["transcript"] == transcript
    assert links["branch"]  # the repository's branch, whatever its name
