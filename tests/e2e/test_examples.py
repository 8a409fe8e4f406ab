"""Every script in examples/ runs as it is, as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        check=False,
    )


AUDITS = {"langgraph_audit.py"}  # read a log another example wrote
PYTEST_FILES = {"test_orchestrator_properties.py"}  # run by pytest (below)


@pytest.mark.parametrize(
    "script",
    sorted(p for p in EXAMPLES.glob("*.py") if p.name not in AUDITS | PYTEST_FILES),
    ids=lambda p: p.name,
)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    result = run(script.name, "--db", str(tmp_path / "example.sqlite"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "example.sqlite").exists()


def test_the_demo_example_is_the_devs_demo(tmp_path: Path) -> None:
    result = run("demo.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in (
        "$ devs attempt build 'patch the tokenizer with regexes'",
        "[exit 4: PAUSED]",
        "[exit 3: ESCALATED]",
        "[exit 5: HANDED_OFF]",
        "⚠ ENTROPY PAUSE — Max retry threshold reached",
    ):
        assert expected in out
    assert "sk-live-abcdefghijklmnop1234" not in out
    assert not list(tmp_path.iterdir()), "the default run must not litter the cwd"


def test_quickstart_suspends_for_a_human_and_then_passes(tmp_path: Path) -> None:
    result = run("quickstart.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "suspended: max_retries" in out
    assert "a human reads: 3 failures" in out
    assert "'recursive descent parser': tests exit 0 -> complete" in out
    assert out.rstrip().endswith("state: completed")
    assert not list(tmp_path.iterdir()), "the default run must not litter the cwd"


def test_the_langgraph_agent_is_suspended_resumed_and_audited(tmp_path: Path) -> None:
    """The agent leaves a log in which a human resumed a suspended task and
    real test runs judged the gates; the audit replays it."""
    db = tmp_path / "agent.sqlite"
    agent = run("langgraph_agent.py", "--db", str(db), cwd=tmp_path)
    assert agent.returncode == 0, agent.stderr
    assert "suspended (attempt): blacklisted_strategy" in agent.stdout
    assert "suspended (entropy): entropy_limit" in agent.stdout
    assert "suspended (gate): max_retries" in agent.stdout
    assert "done: complete after 4 turns" in agent.stdout
    assert "calc.py: return a + b" in agent.stdout
    again = run("langgraph_agent.py", "--db", str(db), cwd=tmp_path)
    assert again.returncode == 2  # refuses an existing file
    assert "exists" in again.stderr

    audit = run("langgraph_audit.py", "--db", str(db), "--json", cwd=tmp_path)
    assert audit.returncode == 0, audit.stderr
    found = json.loads(audit.stdout)
    assert found["problems"] == []
    decisions = found["decisions"]
    humans = [(d["event"], d["actor"]) for d in decisions if "actor" in d]
    assert humans == [("Resumed", "ann"), ("Resumed", "bob"), ("Rewound", "cy")]
    assert all(d["waited_seconds"] >= 0 for d in decisions if "actor" in d)
    gates = [d for d in decisions if d["event"] in ("GateFailed", "GatePassed")]
    assert [d["exit_code"] for d in gates] == [1, 1, 0]
    # real unittest runs: their own error line (the one rule: the first
    # FAIL line, not the summary), hashed
    assert all("exited with code 1: FAIL: " in d["error"] for d in gates[:2])
    assert all(len(d["error_hash"]) == 64 for d in gates[:2])

    text = run("langgraph_audit.py", "--db", str(db), cwd=tmp_path)
    assert text.returncode == 0
    assert "3 human answers by ann, bob, cy" in text.stdout

    missing = run("langgraph_audit.py", "--db", str(tmp_path / "none"), cwd=tmp_path)
    assert missing.returncode == 2
    assert "no log at" in missing.stderr


def test_the_langgraph_agent_drives_devs_serve(tmp_path: Path) -> None:
    """The same agent with the referee over HTTP: `devs serve` keeps the
    log, which the audit then replays."""
    from tests.e2e.test_serve import TOKEN, Server

    served = tmp_path / "served.sqlite"
    server = Server(served, "--workers", "2")
    try:
        agent = subprocess.run(
            [
                sys.executable,
                str(EXAMPLES / "langgraph_agent.py"),
                *("--db", str(tmp_path / "checkpoints.sqlite")),
                *("--url", server.url),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
            env={**os.environ, "DEVS_API_TOKEN": TOKEN},
            check=False,
        )
    finally:
        server.stop()
    assert agent.returncode == 0, agent.stderr
    assert "done: complete after 4 turns" in agent.stdout
    audit = run("langgraph_audit.py", "--db", str(served), cwd=tmp_path)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "3 human answers by ann, bob, cy" in audit.stdout


def test_the_orchestrator_properties_example_passes_under_pytest(
    tmp_path: Path,
) -> None:
    """examples/test_orchestrator_properties.py, run as a user runs it: pytest
    with the plugin the installed package brings (its ``devs_service``)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(EXAMPLES / "test_orchestrator_properties.py"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "3 passed" in result.stdout
