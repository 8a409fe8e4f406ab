"""What every agent's test in this lane shares: the project the scripted
model works on (``calc.py`` and its failing test), the breaker installed as a
user installs it (``devs hooks install AGENT``), the store it writes, and the
human's commands."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from devs.adapters.config import Settings, open_service
from devs.adapters.hooks.breaker import Place, task_base
from devs.domain.decisions import TaskSummary
from tests.agents.script import Shell, Step, Write

DEVS = str(Path(sys.executable).with_name("devs"))
PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider"
"""The test command the model runs (a gate: it matches the gate pattern)."""

TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
WRONG = [
    "return a - b",
    "return a * b",
    "return a ** b",
    "return b - a",
    "return a // b",
]
"""Wrong one-line fixes: each a different fix (and not the same strategy)."""
RIGHT = "return a + b"


def calc(body: str) -> str:
    return f"def add(a, b):\n    {body}\n"


def attempt(body: str) -> list[Step]:
    """Write ``calc.py`` with ``body``, then run the tests."""
    return [Write("calc.py", calc(body)), Shell(PYTEST)]


def loop(*bodies: str) -> list[Step]:
    return [step for body in bodies for step in attempt(body)]


class Project:
    """A git repository with the failing test, a private home, and a store
    the breaker was installed on (``devs hooks install AGENT --dir``)."""

    def __init__(self, root: Path, agent: str) -> None:
        self.agent = agent
        self.repo = root / "repo"
        self.home = root / "home"
        self.store = root / "store"
        for folder in (self.repo, self.home, self.store):
            folder.mkdir(parents=True)
        self.db = self.store / "devs.sqlite"
        (self.repo / "test_calc.py").write_text(TEST)
        (self.repo / "calc.py").write_text(calc("pass"))
        git = ["git", "-C", str(self.repo), "-c", "user.email=t@t", "-c", "user.name=t"]
        subprocess.run(["git", "init", "-q", "-b", "main", str(self.repo)], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
        self.task_id = task_base(
            Place(top=str(self.repo), branch="main", cwd=str(self.repo))
        )

    def environ(self) -> dict[str, str]:
        """The environment ``devs`` commands run with here (no ``DEVS_*`` of
        the test's own, the project's home)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVS_")}
        env["HOME"] = str(self.home)
        env["XDG_STATE_HOME"] = str(self.home / ".local/state")
        return env

    def devs(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [DEVS, "--db", str(self.db), *args],
            env=self.environ(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def install(self, *extra: str) -> str:
        done = self.devs(
            "hooks", "install", self.agent, "--dir", str(self.repo), *extra
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def task(self) -> TaskSummary:
        service = open_service(Settings(db=str(self.db)))
        try:
            return service.task(self.task_id)
        finally:
            service.close()

    def lessons(self) -> list[str]:
        service = open_service(Settings(db=str(self.db)))
        try:
            return [x.failed_strategy for x in service.lessons(self.task_id)]
        finally:
            service.close()

    def resume(self) -> None:
        done = self.devs(
            "resume", self.task_id, "--actor", "alice", "--reason", "try again"
        )
        assert done.returncode == 0, done.stdout + done.stderr
