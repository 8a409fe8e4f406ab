"""What the real agents showed the breaker must do (tests/agents runs them):
a stopped task's next tool call ends the agent's turn, a refused patch left
in the working tree is still that patch, commands that only look are no
strategy, a Codex failure has an exit code, Codex's shell ``apply_patch`` is
an edit, and a failed gate tells the agent what failed so far."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devs.adapters.hooks.breaker import looks_only
from devs.domain.chart import TaskState
from tests.integration.test_hooks import Agent, fixture, red


@pytest.fixture
def claude(tmp_path: Path) -> Iterator[Agent]:
    agent = Agent("claude-code", tmp_path)
    yield agent
    agent.service.close()


@pytest.fixture
def codex(tmp_path: Path) -> Iterator[Agent]:
    agent = Agent("codex", tmp_path)
    yield agent
    agent.service.close()


FIXES = ["return a * b", "return b - a", "return a ** b"]


def write(agent: Agent, body: str) -> None:
    """The agent writes calc.py: on disk (the tree the breaker asks git
    about), and the event its agent sends."""
    (agent.repo / "calc.py").write_text(calc_text(body))
    agent.edit("calc.py", calc_text(body))


def refusal(agent: Agent) -> str:
    """Why the next test run is refused (a KeyError if it is not)."""
    body, _ = agent.pre("pytest -q")
    reason: str = body["hookSpecificOutput"]["permissionDecisionReason"]
    return reason


def looked(agent: Agent, command: str) -> Any:
    """A command that ran and passed (Claude Code's PostToolUse of Bash)."""
    return agent.passed(command, stdout=" M calc.py")


def test_a_stopped_tasks_next_tool_call_is_refused_and_ends_the_turn(
    claude: Agent,
) -> None:
    claude.start()
    for n, fix in enumerate(FIXES, 1):
        write(claude, fix)
        claude.pre("pytest -q")
        claude.failed("pytest -q", red(n))
    assert claude.service.task(claude.task_id).state is TaskState.ESCALATION
    body, code = claude.pre("ls")
    assert code == 0
    # Claude Code goes on after a halt on PostToolUseFailure; on PreToolUse
    # it honours one: the call is denied and the turn ends.
    assert body["continue"] is False
    assert body["stopReason"].startswith("devs-recovery stopped task")
    assert body["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert (
        body["hookSpecificOutput"]["permissionDecisionReason"] == (body["stopReason"])
    )


def test_codex_is_only_denied_on_pre_tool_use(codex: Agent) -> None:
    """Codex counts a hook that answers ``continue`` on PreToolUse as failed
    and runs the tool: it gets the denial alone."""
    codex.service.start_task(codex.task_id, agent="codex")
    for n in range(3):
        codex.service.record_gate(codex.task_id, 1, gate="pytest", error=f"E {n}")
    body, _ = codex.send(fixture("codex", "PreToolUse-Bash"))
    assert set(body) == {"hookSpecificOutput"}
    assert body["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_a_refused_patch_left_in_the_tree_is_still_that_patch_after_a_resume(
    claude: Agent,
) -> None:
    claude.start()
    write(claude, FIXES[0])
    claude.failed("pytest -q", red(1))
    write(claude, FIXES[1])
    claude.failed("pytest -q", red(2))
    write(claude, FIXES[0])  # the first fix again
    body, _ = claude.pre("pytest -q")
    reason = body["hookSpecificOutput"]["permissionDecisionReason"]
    assert "already failed" in reason
    assert "still in the working tree (calc.py)" in reason
    assert "revert" in reason
    # refused, and counted: the third failure escalates
    assert claude.service.task(claude.task_id).state is TaskState.ESCALATION
    claude.service.resume(claude.task_id, actor="alice", reason="go on")
    # The agent looks, then runs the tests over the same tree: the same
    # strategy, refused again, not a new one called "ran: git status".
    assert claude.pre("git status --short") == (None, 0)
    assert looked(claude, "git status --short") == (None, 0)
    assert "already failed" in refusal(claude)
    strategies = [x.failed_strategy for x in claude.service.lessons(claude.task_id)]
    assert not any("git status" in s for s in strategies)


def test_a_revert_and_a_new_fix_after_a_refusal_is_a_new_strategy(
    claude: Agent,
) -> None:
    claude.start()
    write(claude, FIXES[0])
    claude.failed("pytest -q", red(1))
    write(claude, FIXES[0])
    assert "already failed" in refusal(claude)
    claude.service.resume(claude.task_id, actor="alice", reason="go on")
    write(claude, FIXES[2])
    assert claude.pre("pytest -q") == (None, 0)
    claude.failed("pytest -q", red(3))
    newest = claude.service.lessons(claude.task_id)[-1].failed_strategy
    assert FIXES[2] in newest


@pytest.mark.parametrize(
    ("command", "only"),
    [
        ("git status --short", True),
        ("git -C repo diff", True),
        ("ls -la", True),
        ("cat calc.py", True),
        ("/usr/bin/grep -n add calc.py", True),
        ("git diff --output=calc.py", False),
        ("git log -p --output x", False),
        ("git diff --ext-diff", False),
        ("git -c diff.external=x diff", False),
        ("git branch -D main", False),
        ("find . -delete", False),
        ("tree -o calc.py", False),
        ("./cat --apply-fix", False),
        ("tools/grep x", False),
        ("git checkout -- calc.py", False),
        ("git stash", False),
        ("cat calc.py > other.py", False),
        ("ls; rm -rf build", False),
        ("sed -i s/a/b/ calc.py", False),
        ("echo $(rm x)", False),
        ("git", False),
        ("cat 'unclosed", False),
        ("", False),
    ],
)
def test_commands_that_only_look_are_no_change(command: str, only: bool) -> None:
    assert looks_only(command) is only


def test_a_failure_codex_reads_from_the_runners_summary_has_exit_code_1(
    codex: Agent,
) -> None:
    failed = fixture("codex", "PostToolUse-Bash")
    failed["tool_input"] = {"command": "python -m pytest -q"}
    failed["tool_response"] = "F\nE   assert 0 == 5\n1 failed in 0.02s\n"
    codex.send(failed)
    failure = codex.service.task(codex.task_id).failure_history[-1]
    assert failure.exit_code == 1
    assert failure.reason == "NON_ZERO_EXIT"


PATCH = (
    "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: calc.py\n@@\n"
    "-    pass\n+    return a * b\n*** End Patch\nEOF\n"
)


def test_codex_apply_patch_through_the_shell_is_an_edit(codex: Agent) -> None:
    pre = fixture("codex", "PreToolUse-Bash")
    pre["tool_input"] = {"command": PATCH}
    assert codex.send(dict(pre)) == (None, 0)
    after = fixture("codex", "PostToolUse-Bash")
    after["tool_input"] = {"command": PATCH}
    after["tool_response"] = "Success. Updated the following files:\nM calc.py\n"
    assert codex.send(after) == (None, 0)  # counted once, when announced
    failed = fixture("codex", "PostToolUse-Bash")
    failed["tool_input"] = {"command": "pytest -q"}
    failed["tool_response"] = "E   assert 6 == 5\n1 failed in 0.02s\n"
    codex.send(failed)
    (lesson,) = codex.service.lessons(codex.task_id)
    assert lesson.failed_strategy == "edit calc.py:     return a * b"
    # The same patch again is refused before the tests run.
    codex.send(dict(pre))
    gate = fixture("codex", "PreToolUse-Bash")
    gate["tool_input"] = {"command": "pytest -q"}
    body, _ = codex.send(gate)
    assert "already failed" in body["hookSpecificOutput"]["permissionDecisionReason"]


def test_a_failed_gate_tells_the_agent_every_strategy_that_failed(
    claude: Agent,
) -> None:
    claude.start()
    write(claude, FIXES[0])
    claude.failed("pytest -q", red(1))
    write(claude, FIXES[1])
    body, _ = claude.failed("pytest -q", red(2))
    context = body["hookSpecificOutput"]["additionalContext"]
    assert "gate failed (2 in a row; a human is asked at 3)" in context
    assert "MUST NOT be used" in context
    assert FIXES[0] in context
    assert FIXES[1] in context


def test_two_different_one_line_fixes_are_not_the_same_strategy(
    claude: Agent,
) -> None:
    claude.start()
    for n, fix in enumerate(FIXES[:2], 1):
        write(claude, fix)
        claude.failed("pytest -q", red(n))
    stuck = claude.service.task(claude.task_id).stuck
    assert stuck is not None
    assert stuck.strategy_revisits == 0
    assert "same strategy" not in stuck.summary


def test_the_nudge_can_be_turned_off_and_a_wrong_switch_is_said(
    tmp_path: Path,
) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "wrong").mkdir()
    quiet = Agent("claude-code", tmp_path / "off", DEVS_HOOK_NUDGE="off")
    quiet.start()
    write(quiet, FIXES[0])
    quiet.failed("pytest -q", red(1))
    write(quiet, FIXES[1])
    body, _ = quiet.failed("pytest -q", red(2))
    context = body["hookSpecificOutput"]["additionalContext"]
    assert "gate failed (2 in a row" in context
    assert "MUST NOT be used" not in context
    quiet.service.close()
    wrong = Agent("claude-code", tmp_path / "wrong", DEVS_HOOK_NUDGE="maybe")
    assert wrong.start() == (None, 1)  # one error line on stderr, exit 1
    wrong.service.close()


def test_a_shell_command_is_a_patch_only_when_it_is_exactly_one(
    codex: Agent, tmp_path: Path
) -> None:
    """A command that opens like ``apply_patch`` but does more is a command:
    the guard reads it, and a gate in it is recorded."""
    store = str(codex.db)
    pre = fixture("codex", "PreToolUse-Bash")
    pre["tool_input"] = {"command": f"{PATCH}rm {store}"}
    body, _ = codex.send(dict(pre))
    assert (
        "refuses this tool call"
        in body["hookSpecificOutput"]["permissionDecisionReason"]
    )
    gate = fixture("codex", "PostToolUse-Bash")
    gate["tool_input"] = {"command": "apply_patch --help; pytest -q # *** Begin Patch"}
    gate["tool_response"] = "E   assert 6 == 5\n1 failed in 0.02s\n"
    codex.send(gate)
    assert codex.service.task(codex.task_id).consecutive_failures == 1


def test_every_file_of_a_patch_is_guarded(codex: Agent) -> None:
    state = codex.environ["DEVS_HOOK_STATE_DIR"]
    for patch in (
        "*** Begin Patch\n*** Update File: calc.py\n@@\n+x\n"
        f"*** Add File: {state}/evil.json\n+{{}}\n*** End Patch",
        f"*** Begin Patch\n*** Delete File: {codex.db}\n*** End Patch",
        f"*** Begin Patch\n*** Update File: calc.py\n*** Move to: {codex.db}\n"
        "*** End Patch",
    ):
        pre = fixture("codex", "PreToolUse-Bash")
        pre["tool_name"] = "apply_patch"
        pre["tool_input"] = {"command": patch}
        body, _ = codex.send(pre)
        reason = body["hookSpecificOutput"]["permissionDecisionReason"]
        assert "refuses this tool call" in reason, patch


def test_a_reverted_refusal_is_no_longer_pending(claude: Agent) -> None:
    claude.start()
    write(claude, FIXES[0])
    claude.failed("pytest -q", red(1))
    write(claude, FIXES[0])
    assert "already failed" in refusal(claude)
    claude.service.resume(claude.task_id, actor="alice", reason="go on")
    # Still in the tree: the same strategy, refused again.
    assert "already failed" in refusal(claude)
    claude.service.resume(claude.task_id, actor="alice", reason="go on")
    # The agent (or a human) undoes it: the tree is as committed again.
    (claude.repo / "calc.py").unlink()
    assert claude.pre("pytest -q") == (None, 0)  # the refusal left the tree


def test_two_long_files_that_differ_near_their_end_are_two_changes(
    claude: Agent,
) -> None:
    claude.start()
    body = "# padding line to make a long module\n" * 60
    claude.edit("calc.py", body + "return a * b\n")
    claude.failed("pytest -q", red(1))
    claude.edit("calc.py", body + "return b - a\n")
    assert claude.pre("pytest -q") == (None, 0)  # not the same patch
    claude.failed("pytest -q", red(2))
    claude.edit("calc.py", body + "return a * b\n")
    answer, _ = claude.pre("pytest -q")
    assert "already failed" in answer["hookSpecificOutput"]["permissionDecisionReason"]


def calc_text(body: str) -> str:
    return f"def add(a, b):\n    {body}\n"
