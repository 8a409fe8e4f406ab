"""An agent's own tools turned on the referee: a coding agent's shell runs as
the user, outside any sandbox of ours, so its ``PreToolUse`` is where the
breaker refuses the plain ways to answer for a person (``devs resume``,
``devs operator add``) or to write the referee's store (a planted
``-journal``, ``sqlite3 devs_state.sqlite``), through the real ``devs hook``
command. What this cannot stop (a call hidden in a script the agent wrote) is
said in docs/security.md, "Threat model"."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from devs.adapters.hooks.breaker import Seen, person_command, reaches_referee

DEVS = Path(sys.executable).with_name("devs")


def git_repo(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    return path


def hook(repo: Path, event: dict[str, Any]) -> Any:
    """One ``devs hook claude-code`` call, as Claude Code makes it, in the
    repository whose default store (``devs_state.sqlite``) it guards; the
    hooks' state beside it (``state/``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVS_", "XDG_"))}
    env["DEVS_HOOK_STATE_DIR"] = str(repo.parent / "state")
    env["DEVS_HOOK_SERVER"] = "off"
    done = subprocess.run(
        [str(DEVS), "hook", "claude-code"],
        input=orjson.dumps({"session_id": "s1", "cwd": str(repo), **event}),
        cwd=repo,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return orjson.loads(done.stdout) if done.stdout.strip() else None


def bash(command: str) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command},
    }


def denied(answer: Any) -> str | None:
    if not answer:
        return None
    specific = answer.get("hookSpecificOutput", {})
    if specific.get("permissionDecision") == "deny":
        reason: str = specific.get("permissionDecisionReason", "")
        return reason
    return None


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One session for the module's tests: each refusal writes nothing (each
    test checks), and what goes through only reaches the agent's tools."""
    repo = git_repo(tmp_path_factory.mktemp("guarded") / "repo")
    hook(repo, {"hook_event_name": "SessionStart", "source": "startup"})
    assert (repo / "devs_state.sqlite").exists()
    return repo


@pytest.mark.parametrize(
    "command",
    [
        "devs --db devs_state.sqlite operator add mallory | rev",
        "devs resume 'repo@main' --actor alice --reason ok",
        "cd /x && .venv/bin/devs --json skip T --actor bob",
        "python -m devs.adapters.launch rewind T --commit abc --actor a",
        "sqlite3 devs_state.sqlite 'DELETE FROM stored_events'",
        "cp /tmp/forged devs_state.sqlite-journal",
        "devs hooks uninstall claude-code",
        # a person's claim: take it over, or let it go, in their name
        "devs take-over T --actor mallory --reason mine",
        "devs release T --actor alice",
        "devs claim T --actor mallory",
        # its own budget: only a person raises it
        "devs budget T --usd 1000 --reason more",
        # the shell's own ways of spelling a word
        "d\\evs resume T --actor alice",
        "de''vs resume T --actor alice",
        "devs 'res''ume' T --actor alice",
        "devs re\\sume T --actor alice",
        '"devs" resume T',
        "env DEVS_DB=x /usr/bin/env devs resume T",
        "exec devs.exe resume T",
        "devs --db=devs_state.sqlite status",
        # words chosen as it runs
        "echo resume T | xargs devs",
        "devs $(echo resume) T --actor alice",
        "devs `echo resume` T",
    ],
)
def test_the_agent_cannot_run_a_persons_command_nor_touch_the_store(
    repo: Path, command: str
) -> None:
    reason = denied(hook(repo, bash(command)))
    assert reason is not None, command
    assert "devs-recovery refuses this tool call" in reason
    assert not (repo / "devs_state.sqlite-journal").exists()


def test_an_edit_of_the_store_is_refused_before_it_is_made(
    repo: Path,
) -> None:
    event = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {
            "file_path": str(repo / "devs_state.sqlite-journal"),
            "content": "forged pages",
        },
    }
    reason = denied(hook(repo, event))
    assert reason is not None
    assert "devs_state.sqlite-journal" in reason
    event["tool_input"] = {
        "file_path": str(repo.parent / "state" / "x"),
        "content": "x",
    }
    assert denied(hook(repo, event)) is not None


@pytest.mark.parametrize(
    "command",
    [
        "pytest -q",
        "devs status",
        "devs --db devs_state2.db task show T",
        "git commit -m 'skip the flaky test; resume later'",
        "ssh -p 22 host devs",
        "echo resume devs",
        "ls .git/hooks",
        "grep -r 'devs resume' docs",
        'git commit -m "fix the devs resume message"',
        "git log -- hooks",
        "echo $(devs status)",
        "devs task show $(git rev-parse --abbrev-ref HEAD)",
    ],
)
def test_ordinary_commands_go_through(repo: Path, command: str) -> None:
    assert denied(hook(repo, bash(command))) is None


@pytest.mark.timing  # a ratio of two timings: in one process
@pytest.mark.parametrize(
    "unit",
    ["devs -x ", "'a'\"b\"\\c ", '"\\x', "'", "devs $(", "xargs ", "d'e'v's' "],
)
def test_the_guard_reads_hostile_commands_in_linear_time(unit: str) -> None:
    """A megabyte of hostile words costs about ten times a tenth of it, not a
    hundred (one pass over the words; every piece of the tokenizer is
    possessive)."""

    def cost(size: int) -> float:
        command = unit * (size // len(unit))
        seen = Seen(kind="pre_tool", name="PreToolUse", command=command)
        start = time.perf_counter()
        for _ in range(3):
            person_command(command)
            reaches_referee(seen, ("/s/devs_state.sqlite",), "/")
        return time.perf_counter() - start

    small, large = cost(100_000), cost(1_000_000)
    assert large / small < 30, (small, large)
