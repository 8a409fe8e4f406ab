"""The real Claude Code (``claude -p``) with the breaker installed as a user
installs it, against a scripted model on loopback: the loop is stopped at the
third failing test run, the user sees why, tools stay refused until a human
answers, the same patch is refused, the hand-off comes at five, and Stop is
blocked once while the tests are red."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devs.domain.chart import TaskState
from tests.agents.claude_code import ClaudeHandler, run_claude, write_config
from tests.agents.conftest import agent_binary
from tests.agents.lane import RIGHT, WRONG, Project, attempt, calc, loop
from tests.agents.script import Say, Script, Step, Write, serving
from tests.e2e.test_serve import TOKEN, Server

PROMPT = "Make the tests pass."
STREAM = ("--output-format", "stream-json", "--verbose")
HOOK_EVENTS = (*STREAM, "--include-hook-events")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    agent_binary("claude-code")
    made = Project(tmp_path, "claude-code")
    made.install()
    return made


def system_messages(stdout: str) -> list[str]:
    """What stream-json shows the user of the hooks' ``systemMessage``."""
    said = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "system" and isinstance(event.get("content"), str):
            said.append(event["content"])
    return said


def stopping_answer(stdout: str) -> str:
    """The answer of the hook that ended the turn (``continue: false``), as
    stream-json with ``--include-hook-events`` shows it; the run's result
    must say a hook stopped it."""
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert events[-1].get("terminal_reason") == "hook_stopped", events[-1]
    stops = [
        event["output"]
        for event in events
        if event.get("subtype") == "hook_response"
        and '"continue":false' in (event.get("output") or "")
    ]
    assert stops, "no hook answered continue: false"
    return str(stops[-1])


def test_the_loop_stops_at_the_third_failure_until_a_human_answers(
    project: Project,
) -> None:
    script = Script([*loop(*WRONG[:5]), *attempt(RIGHT)])
    with serving(ClaudeHandler, script) as fake:
        env = write_config(project.home, project.repo, fake.url)
        first = run_claude(project.repo, PROMPT, env, STREAM)
        assert first.returncode == 0, first.stderr
        # The third failing run ends the turn: no model request carries its
        # result (six tool calls ran: three writes, three test runs).
        assert script.furthest() == 5
        task = project.task()
        assert task.state is TaskState.ESCALATION
        assert task.consecutive_failures == 3
        # The user is shown why, and the command that lets it go on.
        shown = "\n".join(system_messages(first.stdout))
        assert f"devs-recovery stopped task {project.task_id}" in shown
        assert f"resume {project.task_id} --actor NAME --reason WHY" in shown

        # A session continued without a human's answer is stopped at once:
        # in plain text mode too, the user reads the reason.
        before = len(script.turns)
        again = run_claude(project.repo, "Go on.", env, ("--continue",))
        assert again.returncode == 0, again.stderr
        assert "devs-recovery stopped task" in again.stdout
        assert len(script.turns) == before  # the model was not asked

        # A human resumes: the session goes on, and stops at the fourth.
        project.resume()
        run_claude(project.repo, "Go on.", env, ("--continue",))
        assert script.furthest() == 7
        assert project.task().consecutive_failures == 4
        assert project.task().state is TaskState.ESCALATION
        project.resume()
        run_claude(project.repo, "Go on.", env, ("--continue",))
        assert script.furthest() == 9
        # The fifth failure hands the task off.
        assert project.task().state is TaskState.HAND_OFF
        assert project.task().consecutive_failures == 5


def test_the_same_patch_again_is_refused_before_the_tests_run(
    project: Project,
) -> None:
    script = Script(loop(WRONG[0], WRONG[1], WRONG[0]))
    with serving(ClaudeHandler, script) as fake:
        env = write_config(project.home, project.repo, fake.url)
        done = run_claude(project.repo, PROMPT, env, STREAM)
        assert done.returncode == 0, done.stderr
    # The third test run was refused: its result is the refusal, and the turn
    # ended there.
    assert script.furthest() == 5
    task = project.task()
    assert task.state in (TaskState.PAUSED, TaskState.ESCALATION)
    assert [f.kind for f in task.failure_history][-1] != "gate"
    shown = "\n".join(system_messages(done.stdout))
    assert "devs-recovery stopped task" in shown


def test_stop_is_blocked_once_while_the_tests_are_red(project: Project) -> None:
    script = Script([*attempt(WRONG[0]), Say("Done.")])
    with serving(ClaudeHandler, script) as fake:
        env = write_config(project.home, project.repo, fake.url)
        done = run_claude(project.repo, PROMPT, env)
        assert done.returncode == 0, done.stderr
    final = [r for r in script.turns if r.results == 2]
    # Refused once (the model was asked again, told the gate is red), then
    # let go: two requests after the failing run, no more.
    assert len(final) == 2
    assert "the gate is red" in json.dumps(final[1].body)
    assert project.task().consecutive_failures == 1


def told(text: str, step: Step) -> Step:
    """A model that changes course when told what failed: once the
    blacklist's directive is in its conversation, its next edit is the
    right fix instead of another variation of the wrong idea."""
    if "MUST NOT be used" in text and isinstance(step, Write):
        return Write(step.path, calc(RIGHT))
    return step


@pytest.mark.parametrize("nudge", ["on", "off"])
def test_the_nudge_keeps_a_model_that_listens_from_reaching_a_human(
    project: Project, nudge: str
) -> None:
    """The measurement of the nudge: the same model, told what failed
    (``DEVS_HOOK_NUDGE=on``, the default) or only that a gate failed."""
    script = Script([*loop(*WRONG[:4]), *attempt(RIGHT)], heed=told)
    with serving(ClaudeHandler, script) as fake:
        env = write_config(
            project.home, project.repo, fake.url, extra_env={"DEVS_HOOK_NUDGE": nudge}
        )
        done = run_claude(project.repo, PROMPT, env)
        assert done.returncode == 0, done.stderr
    task = project.task()
    failures = len(project.lessons())  # each failed run after a change
    if nudge == "on":
        # Told after the first failure, it wrote the right fix: one failure,
        # and no human was asked.
        assert task.state is TaskState.COMPLETED
        assert failures == 1
    else:
        # Never told, it looped into the escalation.
        assert task.state is TaskState.ESCALATION
        assert failures == 3


def test_http_hooks_posted_to_devs_serve_stop_the_loop_the_same(
    project: Project,
) -> None:
    """``devs hooks install claude-code --url``: Claude Code POSTs each event
    to a running ``devs serve`` (no process per call), the same decisions."""
    server = Server(project.db, env={"DEVS_HOOK_STATE_DIR": str(project.store / "h")})
    try:
        shown = project.install("--url", server.url)
        assert f"posting to: {server.url}/hooks/claude-code" in shown
        settings = json.loads((project.repo / ".claude/settings.json").read_text())
        assert "SessionStart" not in settings["hooks"]  # no http hook there
        assert TOKEN not in json.dumps(settings)
        script = Script([*loop(*WRONG[:4]), *attempt(RIGHT)])
        with serving(ClaudeHandler, script) as fake:
            env = write_config(
                project.home,
                project.repo,
                fake.url,
                extra_env={"DEVS_API_TOKEN": TOKEN},
            )
            done = run_claude(project.repo, PROMPT, env, STREAM)
            assert done.returncode == 0, done.stderr
        assert script.furthest() == 5
        task = server.client.get(f"/tasks/{project.task_id}").json()
        assert task["state"] == TaskState.ESCALATION.value
        assert task["consecutive_failures"] == 3
        assert f"devs-recovery stopped task {project.task_id}" in "\n".join(
            system_messages(done.stdout)
        )
    finally:
        server.stop()


def test_a_budget_spent_stops_the_session_until_a_person_raises_it(
    project: Project,
) -> None:
    """The hooks read the session's usage from its transcript (each message
    written once per content block, counted once): past the budget the
    task pauses and the turn ends; a raise and a resume let it go on."""
    notes = [Write(f"note{n}.txt", f"step {n}\n") for n in range(10)]
    script = Script([*notes, *attempt(RIGHT)])
    with serving(ClaudeHandler, script) as fake:
        budget = {"DEVS_TASK_BUDGET_TOKENS": "100"}  # 20 tokens a message
        env = write_config(project.home, project.repo, fake.url, extra_env=budget)
        first = run_claude(project.repo, PROMPT, env, HOOK_EVENTS)
        assert first.returncode == 0, first.stderr
        task = project.task()
        assert task.state is TaskState.PAUSED, first.stdout[-2_000:]
        assert task.pending_session is not None
        assert task.pending_session.reason == "budget_exhausted"
        assert task.spend is not None
        assert task.spend.tokens >= 100
        # Claude Code writes a message's rows 100 ms later: the stop comes a
        # message or two past the budget, never at the end of the script.
        stopped_at = script.furthest()
        assert stopped_at < len(notes)
        # The hook that saw the budget crossed ends the turn with the pause
        # and the raise that lets it go on. Which hook that is depends on
        # when Claude Code writes the usage: PreToolUse (with its denial)
        # or PostToolUse. stream-json shows the first's systemMessage as a
        # system message and not the second's (2.1.332): the answer is read
        # from the hook events.
        stopped = stopping_answer(first.stdout)
        assert "budget pause" in stopped
        assert f"budget {project.task_id} --usd N" in stopped
        shown = system_messages(first.stdout)
        assert all("budget pause" in said for said in shown if "devs" in said)

        # Resuming while over the budget is refused, naming the raise.
        refused = project.devs(
            "resume", project.task_id, "--actor", "a", "--reason", "r"
        )
        assert refused.returncode == 8, refused.stdout + refused.stderr
        assert "budget" in refused.stdout + refused.stderr
        raised = project.devs(
            "budget", project.task_id, "--tokens", "100000", "--reason", "more"
        )
        assert raised.returncode == 0, raised.stdout + raised.stderr
        project.resume()
        again = run_claude(project.repo, "Go on.", env, ("--continue",))
        assert again.returncode == 0, again.stderr
        assert script.furthest() > stopped_at
    done = project.task()
    assert done.state is TaskState.COMPLETED
    spent = project.devs("spend", project.task_id, "--json")
    report = json.loads(spent.stdout)
    assert report["budget_tokens"] == 100_000
    # Every message of the transcript once (a message is a row per content
    # block): 10 tokens in and 10 out each.
    messages = set()
    for transcript in (project.home / ".claude" / "projects").rglob("*.jsonl"):
        for line in transcript.read_text().splitlines():
            row = json.loads(line)
            if row.get("type") == "assistant":
                messages.add(row["message"]["id"])
    assert len(messages) >= stopped_at
    assert (report["input_tokens"], report["output_tokens"]) == (
        10 * len(messages),
        10 * len(messages),
    )
