"""The hooks read an agent's usage from its session files (issue 39 point
4): Claude Code's transcript and its subagents', Codex's rollout; each
message counted once, a budget spent halting the agent, a raise and a resume
letting it go on; hostile paths read nothing. The real agents: tests/agents."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from devs.adapters.config import Settings, open_service
from devs.adapters.hooks.registry import load
from devs.adapters.hooks.runner import over_http, respond
from devs.domain import RecoveryService
from devs.domain.chart import TaskState
from devs.domain.names import SessionReason
from devs.domain.policy import load_policy
from tests.integration.test_hooks import fixture, git_repo
from tests.unit.test_hook_usage import assistant, lines, token_count, turn

SONNET = "claude-sonnet-4-5"
"""$3 in and $15 out per million tokens: a message of 100 in, 10 out costs
$0.00045."""


class Session:
    """One agent's hook calls with its session file, as the agent makes them."""

    def __init__(self, agent: str, tmp_path: Path, **env: str) -> None:
        self.agent = load(agent)
        self.repo = git_repo(tmp_path / "repo")
        self.db = tmp_path / "state.sqlite"
        self.transcript = tmp_path / "projects" / "session-1.jsonl"
        self.transcript.parent.mkdir()
        self.transcript.write_bytes(b"")
        self.environ = {"DEVS_HOOK_STATE_DIR": str(tmp_path / "hooks")}
        self.service: RecoveryService = open_service(
            Settings(db=str(self.db)), policy=load_policy(env)
        )

    @property
    def task_id(self) -> str:
        [entry] = self.service.tasks()
        return entry.task_id

    def write(self, rows: list[dict[str, Any]], path: Path | None = None) -> None:
        with (path or self.transcript).open("ab") as file:
            file.write(lines(rows))

    def send(self, name: str, **fields: Any) -> tuple[Any, int]:
        folder = "claude-code" if self.agent.name == "claude-code" else "codex"
        event = fixture(folder, name) if folder == "claude-code" else {}
        event.update(
            {
                "hook_event_name": name.split("-")[0],
                "cwd": str(self.repo),
                "transcript_path": str(self.transcript),
                "session_id": "s1",
                **fields,
            }
        )
        text, code = respond(
            self.agent.dialect,
            orjson.dumps(event),
            self.environ,
            lambda: self.service,
            f"sqlite:{self.db}",
            usage=self.agent.usage,
        )
        return (orjson.loads(text) if text is not None else None), code

    def start(self) -> tuple[Any, int]:
        return self.send("SessionStart")

    def look(self) -> tuple[Any, int]:
        """A tool call about to run (not a gate)."""
        return self.send(
            "PreToolUse-Bash", tool_name="Bash", tool_input={"command": "ls"}
        )

    def looked(self) -> tuple[Any, int]:
        """A tool call that ran (not a gate)."""
        return self.send(
            "PostToolUse-Write",
            tool_name="Bash",
            tool_input={"command": "ls"},
            tool_response={"stdout": "calc.py", "stderr": ""},
        )


@pytest.fixture
def claude(tmp_path: Path) -> Session:
    return Session("claude-code", tmp_path, DEVS_TASK_BUDGET_USD="0.002")


def test_each_message_is_counted_once_as_the_transcript_grows(claude: Session) -> None:
    claude.write([assistant("m1", SONNET), assistant("m1", SONNET)])
    claude.start()
    spent = claude.service.task_spend(claude.task_id)
    assert (spent.input_tokens, spent.output_tokens) == (100, 10)
    claude.look()  # nothing new
    claude.write([assistant("m1", SONNET), assistant("m2", SONNET, out=20)])
    claude.look()
    spent = claude.service.task_spend(claude.task_id)
    assert (spent.input_tokens, spent.output_tokens) == (200, 30)
    assert [m.usages for m in spent.by_model] == [2]  # one per read
    assert claude.service.task(claude.task_id).state is TaskState.RUNNING


def test_a_subagents_transcript_counts_for_the_task(claude: Session) -> None:
    claude.start()
    folder = claude.transcript.with_suffix("") / "subagents"
    folder.mkdir(parents=True)
    claude.write(
        [assistant("s1", "claude-haiku-4-5", inp=50, out=5)], folder / "agent-x.jsonl"
    )
    claude.look()
    spent = claude.service.task_spend(claude.task_id)
    assert [(m.model, m.input_tokens) for m in spent.by_model] == [
        ("claude-haiku-4-5", 50)
    ]


def test_a_budget_spent_halts_the_agent_until_a_person_raises_it(
    claude: Session,
) -> None:
    claude.start()
    for number in range(4):  # $0.0018 of $0.002: the warning, said once
        claude.write([assistant(f"m{number}", SONNET)])
    answer, _ = claude.look()
    assert answer is None  # a PreToolUse shows the agent no warning
    answer, _ = claude.looked()
    warning = answer["hookSpecificOutput"]["additionalContext"]
    assert "has spent most of its budget (USD 0.0018 of 0.002)" in warning
    assert claude.looked()[0] is None  # said once
    claude.write([assistant("m4", SONNET)])
    answer, code = claude.look()
    assert code == 0
    assert answer["continue"] is False
    assert "budget pause: it spent USD 0.0022" in answer["stopReason"]
    assert "budget " in answer["stopReason"]
    assert "--usd N" in answer["stopReason"]
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    task = claude.service.task(claude.task_id)
    assert task.state is TaskState.PAUSED
    assert task.pending_session is not None
    assert task.pending_session.reason is SessionReason.BUDGET_EXHAUSTED
    # Still stopped: every tool refused, the next prompt halted.
    assert claude.look()[0]["hookSpecificOutput"]["permissionDecision"] == "deny"
    claude.service.raise_budget(claude.task_id, usd=0.01, actor="ana", reason="ok")
    claude.service.resume(claude.task_id, actor="ana", reason="go on")
    assert claude.look()[0] is None
    claude.write([assistant("m5", SONNET)])
    claude.look()
    spent = claude.service.task_spend(claude.task_id)
    # m0 to m5, each once, in three reads: m0-m3, m4, m5.
    assert (spent.input_tokens, spent.by_model[0].usages) == (600, 3)


def test_usage_waits_for_the_task_to_start(claude: Session) -> None:
    claude.write([assistant("m1", SONNET)])
    claude.look()  # no task yet: nothing read
    assert claude.service.tasks() == []
    claude.start()
    assert claude.service.task_spend(claude.task_id).input_tokens == 100


def test_a_lost_state_file_counts_nothing_twice(
    claude: Session, tmp_path: Path
) -> None:
    claude.start()
    claude.write([assistant("m1", SONNET)])
    claude.look()
    for state in (tmp_path / "hooks").iterdir():
        state.unlink()
    claude.write([assistant("m2", SONNET)])
    claude.look()  # read on from the files' ends
    claude.write([assistant("m3", SONNET)])
    claude.look()
    spent = claude.service.task_spend(claude.task_id)
    assert spent.input_tokens == 200  # m1 and m3: m2 fell in the gap


def test_codex_usage_comes_from_its_rollout(tmp_path: Path) -> None:
    codex = Session("codex", tmp_path, DEVS_TASK_BUDGET_TOKENS="100000")
    codex.write([turn("gpt-5-codex"), token_count(1_000, 400, 50)])
    codex.send("SessionStart", source="startup", model="gpt-5-codex")
    codex.write([token_count(1_000, 400, 50), token_count(3_000, 900, 80)])
    codex.send(
        "PreToolUse",
        tool_name="Bash",
        tool_input={"command": "ls"},
        tool_use_id="c1",
        turn_id="t1",
    )
    spent = codex.service.task_spend(codex.task_id)
    assert (spent.input_tokens, spent.cache_read_tokens, spent.output_tokens) == (
        2_100,
        900,
        80,
    )
    assert [m.model for m in spent.by_model] == ["gpt-5-codex"]


def test_a_fifo_or_the_store_named_as_the_transcript_reads_nothing(
    claude: Session,
) -> None:
    claude.start()
    fifo = claude.transcript.parent / "fifo.jsonl"
    os.mkfifo(fifo)
    done = threading.Event()

    def call() -> None:
        claude.send(
            "PreToolUse-Bash",
            tool_name="Bash",
            tool_input={"command": "ls"},
            transcript_path=str(fifo),
        )
        done.set()

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    assert done.wait(20), "a FIFO named as the transcript held the hook"
    claude.send(
        "PreToolUse-Bash",
        tool_name="Bash",
        tool_input={"command": "ls"},
        transcript_path=str(claude.db),
    )
    assert claude.service.task_spend(claude.task_id).tokens == 0


def test_devs_serve_reads_no_file_an_event_names(claude: Session) -> None:
    claude.start()
    claude.write([assistant("m1", SONNET)])
    event = fixture("claude-code", "PreToolUse-Bash")
    event.update(cwd=str(claude.repo), transcript_path=str(claude.transcript))
    status, _ = over_http(
        "claude-code",
        orjson.dumps(event),
        claude.service,
        f"sqlite:{claude.db}",
        claude.environ,
    )
    assert status == 200
    assert claude.service.task_spend(claude.task_id).tokens == 0


def test_a_call_that_fails_midway_counts_nothing_twice(
    claude: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a call read is kept unsent before it is recorded: the next call
    records what the failed one did not, under the same ids."""
    claude.start()
    claude.write(
        [assistant("m1", SONNET), assistant("m2", "claude-haiku-4-5", inp=50, out=5)]
    )
    real = claude.service.record_usage
    calls: list[str] = []

    def failing(task_id: str, **given: Any) -> Any:
        calls.append(given["model"])
        if len(calls) == 2:
            msg = "the store went away"
            raise RuntimeError(msg)
        return real(task_id, **given)

    monkeypatch.setattr(claude.service, "record_usage", failing)
    _, code = claude.look()
    assert code == 1  # failed, after recording the first model's usage
    monkeypatch.setattr(claude.service, "record_usage", real)
    claude.write([assistant("m3", SONNET)])
    claude.look()
    spent = claude.service.task_spend(claude.task_id)
    by_model = {m.model: (m.input_tokens, m.output_tokens) for m in spent.by_model}
    assert by_model == {SONNET: (200, 20), "claude-haiku-4-5": (50, 5)}


def test_a_model_name_the_service_refuses_counts_as_unknown(claude: Session) -> None:
    claude.start()
    claude.write([assistant("m1", "bell\x07model", inp=7, out=3)])
    claude.look()
    spent = claude.service.task_spend(claude.task_id)
    assert [(m.model, m.tokens) for m in spent.by_model] == [("unknown", 10)]


def test_a_run_budget_stop_names_the_runs_raise(tmp_path: Path) -> None:
    session = Session("claude-code", tmp_path, DEVS_RUN_BUDGET_USD="0.0005")
    session.environ["DEVS_TASK_ID"] = "t1"
    session.service.start_run("r", {"t1": []})
    session.service.start_task("t1", run_id="r", agent="claude-code")
    session.write([assistant("m1", SONNET), assistant("m2", SONNET)])
    answer, _ = session.look()
    reason = answer["stopReason"]
    assert "its run r's tasks spent USD 0.0009" in reason
    assert "budget --run r --usd N" in reason
