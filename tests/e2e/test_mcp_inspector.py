"""The MCP Inspector's CLI (npm ``@modelcontextprotocol/inspector``, pinned
in tests/agents/install.py and run on the pinned Node 22 there) against
``devs mcp`` over stdio and ``/mcp`` of a real ``devs serve``: a real client
of the MCP contract, as issue 38 asks, beside tests/e2e/test_mcp.py's Python
client.

The Inspector is installed by ``python -m tests.agents.install`` into
``.agents/node22/``; without it these tests are skipped, saying so, and with
``CI`` set they fail instead (CI installs it first). They run in the agents
lane (``pytest -m agents``): like the agents they drive a third-party npm
program, and each Inspector call starts Node and, over stdio, a ``devs mcp``
process (2-3 s on CI's two cores), so a test of one server's contract takes
10-20 s.

What the Inspector really does, pinned here: it turns a string argument into
the type the tool's schema declares before sending it (``"2"`` reaches the
server as ``2``; the refusal of a string on the wire is
tests/integration/test_mcp_contract.py's), answers ``prompts/list`` and
``resources/list`` itself with empty lists when the server advertises neither,
and on a 401 from ``/mcp`` asks for no OAuth unless a person is at a terminal,
where it looks for OAuth metadata (every ``/.well-known`` path answers 404),
tries a client registration that the token check refuses, and stops.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from tests.agents.install import NODE, NODE_TOOLS, node_tool
from tests.e2e.test_mcp import DEVS, TOOLS
from tests.e2e.test_serve import TOKEN, Server

pytestmark = pytest.mark.agents

VERSION = metadata.version("devs-recovery")


def node_tool_or_skip(tool: str) -> list[str]:
    """The command running ``tool`` on the pinned Node 22. Absent, the test
    is skipped, saying how to install it, except with CI set, where it
    fails: CI installs it."""
    found = node_tool(tool)
    if found is not None:
        return found
    pin = NODE_TOOLS[tool]
    why = (
        f"{pin.package}@{pin.version} on node@{NODE.version} is not installed "
        "in .agents/node22/: run `python -m tests.agents.install` (npm)"
    )
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)


@dataclass(frozen=True)
class Inspected:
    """One run of the Inspector's CLI with ``--format json -q``: its exit
    code, the ``result`` and the ``schemaFindings`` (``--strict``'s) it
    printed on stdout, the ``error`` envelope it printed on stderr, and both
    outputs as printed."""

    code: int
    result: Any
    findings: Any
    error: dict[str, Any] | None
    stdout: str
    stderr: str

    def text(self) -> str:
        """A tools/call result's text."""
        return "\n".join(part.get("text", "") for part in self.result["content"])


def _last_json(output: str, key: str) -> Any:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            return json.loads(line).get(key)
    return None


def inspect(home: Path, target: list[str], *args: str, tty: bool = False) -> Inspected:
    """Run ``inspector --cli`` with ``args`` against ``target`` (a stdio
    command line, or ``--server-url`` and its headers), its state in
    ``home``. With ``tty``, its stdin is a terminal: a person is there."""
    command = [*node_tool_or_skip("inspector"), "--cli", *args]
    command += ["--format", "json", "-q", *target]
    environ = {
        **os.environ,
        "HOME": str(home),  # its catalog, client config and OAuth state
        "MCP_INSPECTOR_SECRET_STORE": "memory",  # no keychain, no file
        "MCP_AUTO_OPEN_ENABLED": "false",  # never a browser
        "NO_COLOR": "1",
    }
    home.mkdir(exist_ok=True)
    terminal, stdin = pty.openpty() if tty else (None, subprocess.DEVNULL)
    try:
        done = subprocess.run(
            command,
            stdin=stdin,
            capture_output=True,
            text=True,
            env=environ,
            timeout=90,
            check=False,
        )
    finally:
        if terminal is not None:
            os.close(terminal)
            os.close(stdin)
    return Inspected(
        done.returncode,
        _last_json(done.stdout, "result"),
        _last_json(done.stdout, "schemaFindings"),
        _last_json(done.stderr, "error"),
        done.stdout,
        done.stderr,
    )


def devs_mcp(tmp_path: Path) -> list[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return [DEVS, "--db", str(tmp_path / "state.sqlite"), "mcp", "--workdir", str(work)]


def task_shown(tmp_path: Path, task_id: str) -> dict[str, Any]:
    shown = subprocess.run(
        [
            DEVS,
            "--db",
            str(tmp_path / "state.sqlite"),
            "task",
            "show",
            task_id,
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(shown.stdout))


def assert_listed_strictly(listed: Inspected) -> None:
    """``tools/list --strict`` found no portability problem (it reports them
    on stderr and exits 6), and the schemas are the domain's."""
    assert listed.code == 0, listed.stderr
    assert listed.stderr == ""
    assert not listed.findings
    tools = {tool["name"]: tool for tool in listed.result["tools"]}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        schema = tool["inputSchema"]
        assert schema["additionalProperties"] is False, name
        hints = tool["annotations"]
        assert hints["readOnlyHint"] is (
            name in {"task_status", "lessons", "task_spend"}
        ), name
    assert tools["run_gate"]["annotations"]["destructiveHint"] is True
    exit_code = tools["record_gate"]["inputSchema"]["properties"]["exit_code"]
    assert [branch["type"] for branch in exit_code["anyOf"]] == ["integer", "null"]


def assert_initialized(initialized: Inspected) -> None:
    """The package's version in ``serverInfo``; tools and nothing else."""
    assert initialized.code == 0, initialized.stderr
    assert initialized.result["serverInfo"] == {
        "name": "devs-recovery",
        "version": VERSION,
    }
    assert set(initialized.result["capabilities"]) == {"tools"}


def check_the_calls(
    home: Path,
    target: list[str],
    read: Callable[[str], dict[str, Any]],
    task_id: str,
) -> None:
    """The wrong calls come back as tool errors naming the field and record
    nothing; a string the schema types is converted by the Inspector; a
    valid call is recorded. ``read`` answers the task as the store has it."""
    started = inspect(
        home, target, "--method", "tools/call", "--tool-name", "start_task",
        "--tool-arg", f"task_id={task_id}",
    )  # fmt: skip
    assert started.code == 0, started.stderr
    assert started.result["structuredContent"]["state"] == "RUNNING"
    before = read(task_id)

    wrong_type = inspect(
        home, target, "--method", "tools/call", "--tool-name", "record_gate",
        "--tool-args-json", json.dumps({"task_id": task_id, "exit_code": True}),
    )  # fmt: skip
    assert wrong_type.code == 5, wrong_type.stderr  # the Inspector's tool error
    assert wrong_type.result["isError"] is True
    assert wrong_type.text() == (
        "Error executing tool record_gate: invalid_input (field exit_code): "
        "exit_code must be an integer or None, got bool True"
    )
    assert wrong_type.error is not None
    assert wrong_type.error["code"] == "tool_is_error"

    misspelled = inspect(
        home, target, "--method", "tools/call", "--tool-name", "record_gate",
        "--tool-args-json",
        json.dumps({"task_id": task_id, "exit_code": 2, "outptu": "boom"}),
    )  # fmt: skip
    assert misspelled.code == 5, misspelled.stderr
    assert misspelled.result["isError"] is True
    assert "invalid_input (field outptu): unknown field 'outptu'" in misspelled.text()
    assert "did you mean 'output'?" in misspelled.text()

    assert read(task_id) == before  # nothing recorded

    # The Inspector converts a string to the schema's integer before
    # sending it (convertStringToolArgs in its CLI, even for
    # --tool-args-json): the server receives 2 and records it.
    as_string = inspect(
        home, target, "--method", "tools/call", "--tool-name", "record_gate",
        "--tool-args-json", json.dumps({"task_id": task_id, "exit_code": "2"}),
    )  # fmt: skip
    assert as_string.code == 0, as_string.stderr
    assert as_string.result["structuredContent"]["exit_code"] == 2

    valid = inspect(
        home, target, "--method", "tools/call", "--tool-name", "record_gate",
        "--tool-arg", f"task_id={task_id}", "exit_code=1", "output=boom at line 3",
    )  # fmt: skip
    assert valid.code == 0, valid.stderr
    assert valid.result["isError"] is False
    assert valid.result["structuredContent"]["consecutive_failures"] == 2
    history = read(task_id)["failure_history"]
    assert [entry["exit_code"] for entry in history] == [2, 1]
    assert "boom at line 3" in history[1]["output_excerpt"]


def test_the_inspector_lists_devs_mcps_tools_strictly(tmp_path: Path) -> None:
    home, target = tmp_path / "home", devs_mcp(tmp_path)
    assert_listed_strictly(inspect(home, target, "--method", "tools/list", "--strict"))
    assert_initialized(inspect(home, target, "--method", "initialize"))


TOY_SERVER = """
import json, sys
loose = {"type": "object", "properties": {"x": {"$ref": "https://example.com/x"}}}
for line in sys.stdin:
    asked = json.loads(line)
    if "id" not in asked:
        continue
    if asked["method"] == "initialize":
        result = {
            "protocolVersion": asked["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "toy", "version": "1"},
        }
    else:
        result = {"tools": [{"name": "loose", "inputSchema": loose}]}
    print(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": result}))
    sys.stdout.flush()
"""


def test_the_inspectors_strict_listing_reports_what_a_client_cannot_use(
    tmp_path: Path,
) -> None:
    """The check the tests above pass is live: a tool whose schema points
    at a remote ``$ref`` is reported, on stderr and in ``schemaFindings``."""
    toy = tmp_path / "toy.py"
    toy.write_text(TOY_SERVER)
    target = [sys.executable, str(toy)]
    listed = inspect(tmp_path / "home", target, "--method", "tools/list", "--strict")
    assert listed.code == 0, listed.stderr  # a warning; errors exit 6
    assert 'Warning: tool "loose"' in listed.stderr
    assert "`$ref` points outside this document" in listed.stderr
    [finding] = listed.findings
    assert finding["toolName"] == "loose"
    assert [each["rule"] for each in finding["findings"]] == ["remote-ref"]


def test_every_argument_the_inspector_lists_is_described(tmp_path: Path) -> None:
    """Issue 38: a one-line description per field, in the tool's schema."""
    listed = inspect(tmp_path / "home", devs_mcp(tmp_path), "--method", "tools/list")
    assert listed.code == 0, listed.stderr
    undescribed = [
        f"{tool['name']}.{field}"
        for tool in listed.result["tools"]
        for field, declared in tool["inputSchema"]["properties"].items()
        if not declared.get("description")
    ]
    assert undescribed == []


def test_the_inspector_finds_no_prompts_or_resources_on_devs_mcp(
    tmp_path: Path,
) -> None:
    """Not advertised, so the Inspector lists none without asking; asked
    anyway, the server answers that it has no such method."""
    home, target = tmp_path / "home", devs_mcp(tmp_path)
    for method, key in (("prompts/list", "prompts"), ("resources/list", "resources")):
        listed = inspect(home, target, "--method", method)
        assert (listed.code, listed.result) == (0, {key: []}), listed.stderr
    for asked in (
        ("--method", "prompts/get", "--prompt-name", "start"),
        ("--method", "resources/read", "--uri", "devs://tasks"),
    ):
        refused = inspect(home, target, *asked)
        assert refused.code == 1, refused.stdout
        assert refused.error == {"code": "error", "message": "Method not found"}


def test_the_inspectors_calls_to_devs_mcp(tmp_path: Path) -> None:
    def read(task_id: str) -> dict[str, Any]:
        return task_shown(tmp_path, task_id)

    check_the_calls(tmp_path / "home", devs_mcp(tmp_path), read, "insp-1")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "work").mkdir()
    running = Server(
        tmp_path / "state.sqlite",
        cwd=tmp_path / "work",
        env={"DEVS_ACCESS_LOG": "1"},
    )
    yield running
    if running.process.poll() is None:
        running.stop()


def over_http(served: Server, token: str, *headers: str) -> list[str]:
    return [
        "--server-url",
        f"{served.url}/mcp",
        "--header",
        f"Authorization: Bearer {token}",
        *headers,
    ]


def access_log(served: Server) -> list[str]:
    """Stop the server; the requests it logged ("METHOD path status"), but
    the ``/healthz`` polls of its start."""
    served.client.close()
    served.process.terminate()
    out, _ = served.process.communicate(timeout=30)
    requests = []
    for line in out.splitlines():
        if '"' in line:
            request, status = line.split('"')[1], line.split('"')[2].split()[0]
            method, path, _ = request.split()
            if path != "/healthz":
                requests.append(f"{method} {path} {status}")
    return requests


def test_the_inspector_over_http_with_the_token(served: Server, tmp_path: Path) -> None:
    home, target = tmp_path / "home", over_http(served, TOKEN)
    assert_listed_strictly(inspect(home, target, "--method", "tools/list", "--strict"))
    assert_initialized(inspect(home, target, "--method", "initialize"))

    def read(task_id: str) -> dict[str, Any]:
        return dict(served.client.get(f"/tasks/{task_id}").json())

    check_the_calls(home, target, read, "insp-http")


def test_a_wrong_token_ends_in_an_authentication_failure(
    served: Server, tmp_path: Path
) -> None:
    wrong = "wrong-token-wrong-token"
    home, target = tmp_path / "home", over_http(served, wrong)

    # Nobody at a terminal (CI, a script): the 401 ends it, exit 3.
    alone = inspect(home, target, "--method", "tools/list")
    assert alone.code == 3
    assert alone.error is not None
    assert alone.error["code"] == "auth_required"
    assert "Interactive OAuth requires a TTY" in alone.error["message"]

    # As the Inspector's help advises for CI: the server's own refusal.
    stored_only = inspect(home, target, "--method", "tools/list", "--stored-auth-only")
    assert stored_only.code == 3
    assert stored_only.error is not None
    assert stored_only.error["code"] == "auth_required"
    assert '"error":"unauthorized"' in stored_only.error["message"]
    assert "DEVS_API_TOKEN" in stored_only.error["message"]

    # A person at a terminal: it looks for OAuth, finds none (404s), tries
    # the legacy registration endpoint, is refused by the token check and
    # stops at once: no browser, no prompt, no token asked for.
    person = inspect(home, target, "--method", "tools/list", tty=True)
    assert person.code == 3
    assert person.error is not None
    assert person.error["code"] == "auth_required"
    assert person.error["message"].startswith(
        "Dynamic Client Registration rejected (HTTP 401)"
    )
    assert "navigate" not in person.stderr
    for run in (alone, stored_only, person):
        assert wrong not in run.stdout + run.stderr

    requests = access_log(served)
    assert requests.count("POST /mcp 401") == 3
    discovery = [request for request in requests if "/.well-known/" in request]
    assert discovery, requests
    assert all(request.endswith(" 404") for request in discovery), discovery
    assert "POST /register 401" in requests
    assert not [request for request in requests if request.split()[-1][0] in "23"]


def test_another_sites_origin_is_refused_to_the_inspector(
    served: Server, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    target = over_http(served, TOKEN, "Origin: http://evil.example")
    refused = inspect(home, target, "--method", "tools/list")
    assert refused.code == 3
    assert refused.error is not None
    assert refused.error["status"] == 403
    assert '"error":"cross_site"' in refused.error["message"]
    assert access_log(served) == ["POST /mcp 403"]
