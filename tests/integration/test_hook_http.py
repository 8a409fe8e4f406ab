"""``POST /hooks/AGENT`` of ``devs serve`` (Claude Code's ``http`` hooks):
the same decisions as ``devs hook AGENT``, behind the API token."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from devs.adapters.config import Settings, open_service
from devs.adapters.hooks.breaker import Place, task_base
from devs.adapters.hooks.claude_code import CLAUDE_CODE
from devs.adapters.hooks.install import hook_command, install, status, uninstall
from devs.adapters.http import create_app
from devs.domain.chart import TaskState
from tests.integration.test_hooks import fixture, git_repo, red

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEVS = str(Path(sys.executable).with_name("devs"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return git_repo(tmp_path / "repo")


@pytest.fixture
def client(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    monkeypatch.setenv("DEVS_HOOK_STATE_DIR", str(tmp_path / "hooks"))
    service = open_service(Settings(db=str(tmp_path / "store.sqlite")))
    app = create_app(service, token=TOKEN, hook_store="sqlite:test")
    with TestClient(app, headers=AUTH) as test_client:
        yield test_client
    service.close()


def event(name: str, repo: Path, **fields: Any) -> dict[str, Any]:
    loaded = copy.deepcopy(fixture("claude-code", f"real-{name}"))
    loaded["cwd"] = str(repo)
    loaded.update(fields)
    return loaded


def test_a_loop_posted_by_http_hooks_is_stopped(client: TestClient, repo: Path) -> None:
    answers = []
    for n in range(1, 4):
        edit = event("PostToolUse-Write", repo)
        edit["tool_input"] = {"file_path": str(repo / "calc.py"), "content": f"x = {n}"}
        assert client.post("/hooks/claude-code", json=edit).json() == {}
        failed = event(
            "PostToolUseFailure-Bash",
            repo,
            tool_input={"command": "pytest -q"},
            error=red(n),
        )
        answers.append(client.post("/hooks/claude-code", json=failed))
    assert answers[0].status_code == 200
    assert "1 in a row" in answers[0].json()["hookSpecificOutput"]["additionalContext"]
    halted = answers[2].json()
    assert halted["continue"] is False
    # Claude Code ends the turn at the batch's end: the halt is said there.
    batch = client.post("/hooks/claude-code", json=event("PostToolBatch-Bash", repo))
    assert batch.json()["continue"] is False
    task = client.get(
        f"/tasks/{task_base(Place(top=str(repo), branch='main', cwd=str(repo)))}"
    ).json()
    assert task["state"] == TaskState.ESCALATION.value


def test_only_agents_with_http_hooks_and_only_with_the_token(
    client: TestClient, repo: Path
) -> None:
    start = event("PreToolUse-Bash", repo)
    refused = client.post("/hooks/codex", json=start)
    assert refused.status_code == 422
    assert "no http hooks for agent 'codex'" in refused.text
    anonymous = client.post(
        "/hooks/claude-code", json=start, headers={"Authorization": ""}
    )
    assert anonymous.status_code == 401
    broken = client.post(
        "/hooks/claude-code",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert broken.status_code == 503
    assert broken.json()["error"].startswith("devs hook: error: malformed hook event")


def test_install_with_a_url_writes_http_hooks_and_back(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    command = hook_command("/bin/devs", "/x.sqlite", "claude-code")
    assert install(CLAUDE_CODE, path, command)
    assert install(CLAUDE_CODE, path, command, url="https://devs.example.com/")
    hooks = orjson.loads(path.read_bytes())["hooks"]
    assert "SessionStart" not in hooks  # Claude Code sends it no http hook
    entry = hooks["PreToolUse"][0]["hooks"][0]
    assert entry == {
        "type": "http",
        "url": "https://devs.example.com/hooks/claude-code",
        "headers": {"Authorization": "Bearer $DEVS_API_TOKEN"},
        "allowedEnvVars": ["DEVS_API_TOKEN"],
        "timeout": 30,
    }
    found = status(CLAUDE_CODE, path)
    assert found.commands == ("https://devs.example.com/hooks/claude-code",)
    assert found.missing == ()
    assert not install(CLAUDE_CODE, path, command, url="https://devs.example.com/")
    # Back to the command: the http entries are the breaker's, replaced.
    assert install(CLAUDE_CODE, path, command)
    assert status(CLAUDE_CODE, path).commands == (command,)
    assert uninstall(CLAUDE_CODE, path)
    assert orjson.loads(path.read_bytes()) == {}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["codex", "--url", "http://127.0.0.1:8000"], "codex has no http hooks"),
        (["claude-code", "--url", "ftp://x"], "--url must be the http://"),
        (["claude-code", "--url", "http://a b"], "--url must be the http://"),
    ],
)
def test_install_refuses_a_url_it_cannot_use(
    tmp_path: Path, args: list[str], said: str
) -> None:
    done = subprocess.run(
        [DEVS, "hooks", "install", *args, "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert done.returncode != 0
    assert said in done.stdout + done.stderr
    assert not (tmp_path / ".claude").exists()
    assert not (tmp_path / ".codex").exists()


def test_a_users_own_http_hook_to_some_hooks_path_is_not_the_breakers(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    theirs = {
        "type": "http",
        "url": "https://audit.internal.example/hooks/claude-code",
        "headers": {"X-Key": "$AUDIT_KEY"},
        "allowedEnvVars": ["AUDIT_KEY"],
    }
    path.write_text(orjson.dumps({"hooks": {"Stop": [{"hooks": [theirs]}]}}).decode())
    command = hook_command("/bin/devs", "/x.sqlite", "claude-code")
    install(CLAUDE_CODE, path, command, url="https://devs.example.com")
    uninstall(CLAUDE_CODE, path)
    assert orjson.loads(path.read_bytes()) == {"hooks": {"Stop": [{"hooks": [theirs]}]}}


def test_install_refuses_credentials_in_the_url(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            DEVS,
            "hooks",
            "install",
            "claude-code",
            "--dir",
            str(tmp_path),
            "--url",
            "https://alice:s3cr3tP4ssw0rd@devs.example.com",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert done.returncode != 0
    assert "must not carry credentials" in done.stdout + done.stderr
    assert "s3cr3tP4ssw0rd" not in done.stdout + done.stderr
    assert not (tmp_path / ".claude").exists()


def test_a_value_nested_past_any_limit_is_read_as_text(
    client: TestClient, repo: Path
) -> None:
    """A path nested 400 lists deep (orjson reads it, and cannot write it
    back): read as text, answered, never a 500."""
    pre = event("PreToolUse-Write", repo, tool_input={"file_path": "HERE"})
    deep = b"[" * 400 + b'"x"' + b"]" * 400
    raw = orjson.dumps(pre).replace(b'"HERE"', deep)
    answer = client.post(
        "/hooks/claude-code", content=raw, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 200, answer.text


def test_an_event_from_a_folder_the_server_does_not_have_is_refused(
    client: TestClient, tmp_path: Path
) -> None:
    for folder in (str(tmp_path / "elsewhere" / "app"), None):
        failed = event("PostToolUseFailure-Bash", tmp_path, error="Exit code 1\nE x")
        failed["cwd"] = folder
        answer = client.post("/hooks/claude-code", json=failed)
        assert answer.status_code == 503
        assert "is not on this server" in answer.json()["error"]
    assert client.get("/tasks").json() == []
