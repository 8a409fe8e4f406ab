"""A plain ``pip install .`` has no PostgreSQL driver and no LangGraph: every
module on the SQLite path imports, and a service, the demo and a hook call
work, in a process where ``psycopg``, ``psycopg_pool``,
``eventsourcing.postgres`` and ``langgraph`` cannot be imported.

CI installs ``.[test]``, which brings psycopg; these tests take it away again
so that the seam a plain install crosses (README's "Run it") is crossed in the
suite too. ``.ci/run`` also runs README's first command in a fresh venv with
no extras.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {
    "devs.domain": ROOT / "domain",
    "devs.projections": ROOT / "projections",
    "devs.adapters": ROOT / "adapters",
    "devs.testing": ROOT / "testing",
}

# The modules that exist for an optional extra, and so may need it: the
# ``postgres`` extra's three and the ``langgraph`` extra's adapter; the pytest
# plugin needs pytest (loaded by pytest only).
OPTIONAL = {
    "devs.adapters.store.postgres",
    "devs.projections.pg",
    "devs.projections.postgres",
    "devs.adapters.langgraph",
    "devs.testing.plugin",
}

BLOCKER = """
import importlib.abc, sys
BLOCKED = ("psycopg", "psycopg_pool", "psycopg_binary", "eventsourcing.postgres",
           "langgraph")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r} (plain install)")
        return None
sys.meta_path.insert(0, Block())
"""


def every_module() -> list[str]:
    names = []
    for package, folder in LAYERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join((package, *parts)))
    return names


def run_blocked(code: str, cwd: Path, timeout: float = 240) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVS_")}
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    return done.stdout


def test_the_blocker_blocks(tmp_path: Path) -> None:
    """The test would prove nothing if psycopg stayed importable."""
    out = run_blocked(
        """
        for name in ("psycopg", "eventsourcing.postgres", "langgraph"):
            try:
                __import__(name)
            except ImportError:
                print("blocked", name)
        """,
        tmp_path,
    )
    assert out.split("\n")[:3] == [
        "blocked psycopg",
        "blocked eventsourcing.postgres",
        "blocked langgraph",
    ]


def test_every_module_but_the_extras_imports_without_them(tmp_path: Path) -> None:
    modules = [m for m in every_module() if m not in OPTIONAL]
    assert len(modules) > 80
    out = run_blocked(
        f"""
        import importlib, json
        failed = {{}}
        for name in {modules!r}:
            try:
                importlib.import_module(name)
            except ImportError as error:
                failed[name] = str(error)
        print(json.dumps(failed))
        """,
        tmp_path,
    )
    assert json.loads(out.strip().splitlines()[-1]) == {}


def test_the_optional_list_is_no_wider_than_it_must_be(tmp_path: Path) -> None:
    """Each module left out above does need its extra: the list cannot grow
    into a hiding place for a module the SQLite path reaches."""
    out = run_blocked(
        f"""
        import importlib, json
        imported = []
        for name in {sorted(OPTIONAL - {"devs.testing.plugin"})!r}:
            try:
                importlib.import_module(name)
            except ImportError:
                continue
            imported.append(name)
        print(json.dumps(imported))
        """,
        tmp_path,
    )
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_a_sqlite_service_and_a_hook_call_work_without_the_extras(
    tmp_path: Path,
) -> None:
    """What README's first command and an installed hook do, in process: open
    the default store, record a failing gate, answer a Claude Code hook."""
    out = run_blocked(
        """
        import io, json, sys
        from devs.adapters.config import Settings, open_service
        app = open_service(Settings(db="s.sqlite"))
        app.start_task("t1", agent="coder")
        app.begin_attempt("t1", "patch it")
        gate = app.record_gate("t1", 1, gate="tests", output="E assert 1 == 2")
        print("gate", gate.outcome, gate.consecutive_failures)
        print("outbox", len(app.outbox_messages()))
        app.close()
        import os
        from devs.adapters import launch
        os.environ["DEVS_HOOK_SERVER"] = "off"  # answered in this process
        sys.argv = ["devs", "--db", "h.sqlite", "hook", "claude-code"]
        sys.stdin = io.TextIOWrapper(io.BytesIO(json.dumps({
            "hook_event_name": "SessionStart", "session_id": "s-1",
            "cwd": ".", "source": "startup"}).encode()))
        try:
            launch.main()
        except SystemExit as stop:
            print("hook exit", stop.code)
        mods = sorted(m for m in sys.modules if m.startswith(("psycopg", "langgraph")))
        print("loaded", mods)
        """,
        tmp_path,
    )
    assert "gate " in out
    assert " 1\n" in out
    assert "loaded []" in out
    assert "hook exit 0" in out or "hook exit None" in out


@pytest.mark.slow
def test_devs_demo_runs_without_the_extras(tmp_path: Path) -> None:
    """README's main job, with the extras taken away (``.ci/run`` runs it from
    a real plain install too)."""
    out = run_blocked(
        """
        import sys
        from devs.adapters import launch
        sys.argv = ["devs", "demo"]
        try:
            launch.main()
        except SystemExit as stop:
            assert not stop.code, stop.code
        """,
        tmp_path,
        timeout=600,
    )
    assert "hand" in out.lower()
