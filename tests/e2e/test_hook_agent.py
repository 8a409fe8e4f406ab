"""A scripted "agent" that loops as coding agents do — edit, run pytest, fail,
edit again — with the breaker installed as a user installs it (``devs hooks
install claude-code``), every hook call the command Claude Code would run from
the settings file, through the real ``devs`` binary and a real pytest."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_hooks import fixture, git_repo

DEVS = str(Path(sys.executable).with_name("devs"))

TEST = """\
from calc import add


def test_add():
    assert add(2, 3) == 5
"""
WRONG_FIXES = [
    "def add(a, b):\n    return a - b\n",
    "import operator\n\nadd = operator.mul\n",
    "def add(*numbers):\n    return max(numbers) if numbers else None\n",
    "add = lambda a, b: str(a) + str(b)\n",
]
"""Wrong, and far enough apart not to be the same strategy again (two
changes within 20 % edit distance of each other are: a one-character tweak
of a failed patch is refused)."""
RIGHT_FIX = "def add(a, b):\n    return a + b\n"
GATE = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider"
GATE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""The gate's pytest runs as a project without plugins would: this
environment's (hypothesis, schemathesis, locust, langsmith, ...) are this
project's test tools, not the agent's project's, and loading them took some
1.7 s of CPU in every gate run."""


class ScriptedAgent:
    """Claude Code's side of the hooks: the events it sends, the commands it
    runs from .claude/settings.json, and what it does with the answers."""

    def __init__(self, tmp_path: Path) -> None:
        self.repo = git_repo(tmp_path / "project")
        (self.repo / "test_calc.py").write_text(TEST)
        (self.repo / "calc.py").write_text("def add(a, b):\n    pass\n")
        self.env = {
            **os.environ,
            "HOME": str(tmp_path / "home"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "DEVS_HOOK_SERVER_IDLE": "30",
        }
        for name in ("DEVS_DB", "DEVS_DATABASE_URL", "DEVS_URL", "DEVS_TASK_ID"):
            self.env.pop(name, None)
        installed = self.devs(
            "hooks", "install", "claude-code", "--dir", str(self.repo)
        )
        assert installed.returncode == 0, installed.stderr
        settings = json.loads((self.repo / ".claude" / "settings.json").read_text())
        self.hooks = settings["hooks"]
        self.calls = 0

    def devs(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [DEVS, *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.repo,
            timeout=60,
            check=False,
        )

    def hook(self, event: dict[str, Any], tool: str | None = None) -> Any:
        """Run the hook command the settings give for this event and tool, as
        Claude Code does (matcher: an exact list of tool names, or "*")."""
        event["cwd"] = str(self.repo)
        name = event["hook_event_name"]
        commands = [
            hook["command"]
            for group in self.hooks.get(name, [])
            if group.get("matcher") in (None, "*")
            or (tool is not None and tool in group["matcher"].split("|"))
            for hook in group["hooks"]
        ]
        if not commands:
            return None
        (command,) = commands
        self.calls += 1
        done = subprocess.run(
            shlex.split(command),
            input=json.dumps(event),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.repo,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (done.returncode, done.stderr)
        assert done.stderr == "", done.stderr
        return json.loads(done.stdout) if done.stdout else None

    def start(self) -> Any:
        return self.hook(fixture("claude-code", "SessionStart"))

    def write(self, text: str) -> Any:
        (self.repo / "calc.py").write_text(text)
        event = fixture("claude-code", "PostToolUse-Write")
        event["tool_input"] = {"file_path": str(self.repo / "calc.py"), "content": text}
        return self.hook(event, "Write")

    def before(self, tool: str, tool_input: dict[str, Any]) -> Any:
        event = fixture("claude-code", "PreToolUse-Bash")
        event["tool_name"] = tool
        event["tool_input"] = tool_input
        return self.hook(event, tool)

    def run_tests(self) -> tuple[Any, Any]:
        """PreToolUse, then (if allowed) the real pytest and its PostToolUse
        or PostToolUseFailure, as Claude Code writes them."""
        pre = self.before("Bash", {"command": GATE, "description": "Run tests"})
        if (
            pre is not None
            and pre["hookSpecificOutput"]["permissionDecision"] == "deny"
        ):
            return pre, None
        ran = subprocess.run(
            shlex.split(GATE),
            capture_output=True,
            text=True,
            cwd=self.repo,
            env={**self.env, **GATE_ENV},
            timeout=120,
            check=False,
        )
        output = ran.stdout + ran.stderr
        if ran.returncode == 0:
            event = fixture("claude-code", "PostToolUse-Write")
            event["tool_name"] = "Bash"
            event["tool_input"] = {"command": GATE}
            event["tool_response"] = {
                "stdout": output,
                "stderr": "",
                "interrupted": False,
                "isImage": False,
            }
            return pre, self.hook(event, "Bash")
        event = fixture("claude-code", "PostToolUseFailure-Bash")
        event["tool_input"] = {"command": GATE}
        event["error"] = f"Exit code {ran.returncode}\n{output}"
        return pre, self.hook(event, "Bash")


def test_the_breaker_stops_a_looping_agent_until_a_human_resumes_it(
    tmp_path: Path,
) -> None:
    agent = ScriptedAgent(tmp_path)
    assert agent.start() is None

    halted = None
    tries = 0
    for fix in WRONG_FIXES:
        agent.write(fix)
        tries += 1
        _, after = agent.run_tests()
        if after is not None and after.get("continue") is False:
            halted = after
            break
    # The third red gate reaches the escalation threshold: the agent halts.
    assert tries == 3
    assert halted is not None
    reason = halted["stopReason"]
    assert "escalated to a human: 3 failed gates in a row" in reason
    assert "assert" in reason  # the last error line, from the real pytest

    # Restarted, it may not do anything: every tool is refused.
    assert agent.start() is not None  # told at start that the task is stopped
    for tool, tool_input in (
        ("Bash", {"command": "git status"}),
        ("Write", {"file_path": str(agent.repo / "calc.py"), "content": RIGHT_FIX}),
        ("Bash", {"command": GATE}),
    ):
        denied = agent.before(tool, tool_input)
        assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert denied["hookSpecificOutput"]["permissionDecisionReason"] == reason

    # The human runs the command the reason gives (NAME and WHY filled in).
    command = re.search(r"with: (devs .*? --reason WHY)", reason)
    assert command is not None
    words = shlex.split(command.group(1).replace("NAME", "alice"))
    words[-1] = "the test wants addition"
    resumed = agent.devs(*words[1:])
    assert resumed.returncode == 0, resumed.stderr

    assert agent.before("Bash", {"command": "git status"}) is None
    agent.write(RIGHT_FIX)
    pre, after = agent.run_tests()
    assert (pre, after) == (None, None)

    task = re.search(r"stopped task (\S+):", reason)
    assert task is not None
    db = words[words.index("--db") + 1]
    history = agent.devs("--db", db, "history", task.group(1), "--json")
    assert history.returncode == 0, history.stderr
    events = [entry["event"] for entry in json.loads(history.stdout)]
    assert events[0] == "Started"
    assert events.count("GateFailed") == 3
    assert events.count("LessonLogged") == 3
    assert "Escalated" in events
    assert "Resumed" in events
    assert events[-1] == "GatePassed"
    states = [entry["state"] for entry in json.loads(history.stdout)]
    assert states[-1] == "COMPLETED"


@pytest.mark.parametrize("agent", ["claude-code", "codex", "openhands"])
def test_install_twice_status_and_uninstall_through_the_cli(
    tmp_path: Path, agent: str
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home")}

    def devs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [DEVS, *args], capture_output=True, text=True, env=env, check=False
        )

    first = devs("hooks", "install", agent, "--dir", str(project))
    assert first.returncode == 0, first.stderr
    assert "installed in" in first.stdout
    again = devs("hooks", "install", agent, "--dir", str(project))
    assert "already installed" in again.stdout
    shown = json.loads(devs("hooks", "status", "--dir", str(project), "--json").stdout)
    mine = [s for s in shown if s["agent"] == agent and s["installed"]]
    assert len(mine) == 1
    assert mine[0]["commands"][0].startswith(DEVS)
    assert mine[0]["missing"] == []
    removed = devs("hooks", "uninstall", agent, "--dir", str(project))
    assert "removed" in removed.stdout
    shown = json.loads(devs("hooks", "status", "--dir", str(project), "--json").stdout)
    assert not any(s["installed"] for s in shown)


def test_the_hooks_ask_a_teams_devs_serve_when_devs_url_is_set(tmp_path: Path) -> None:
    """DEVS_URL and DEVS_API_TOKEN in the agent's environment: the count, the
    stop and the answer live on the server; nothing is written locally."""
    from tests.e2e.test_serve import TOKEN, Server

    served = Server(tmp_path / "server.sqlite")
    try:
        agent = ScriptedAgent(tmp_path)
        agent.env["DEVS_URL"] = served.url
        agent.env["DEVS_API_TOKEN"] = TOKEN
        assert agent.start() is None
        halted = None
        for fix in WRONG_FIXES[:3]:
            agent.write(fix)
            _, halted = agent.run_tests()
        assert halted is not None
        assert halted["continue"] is False
        assert served.url in halted["stopReason"]
        task = re.search(r"stopped task (\S+):", halted["stopReason"])
        assert task is not None
        shown = served.client.get(f"/tasks/{task.group(1)}").json()
        assert shown["state"] == "ESCALATION"
        assert shown["agent"] == "claude-code"
        denied = agent.before("Bash", {"command": "ls"})
        assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
        answer = served.client.post(
            f"/tasks/{task.group(1)}/resume", json={"actor": "ann", "reason": "go"}
        )
        assert answer.status_code == 200, answer.text
        assert agent.before("Bash", {"command": "ls"}) is None
        assert not (tmp_path / "state" / "devs" / "devs_state.sqlite").exists()
    finally:
        served.stop()
