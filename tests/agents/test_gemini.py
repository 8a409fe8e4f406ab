"""The real Gemini CLI (``gemini --prompt``) with the breaker installed as a
user installs it (``devs hooks install gemini``), against a scripted model on
loopback: the third failing test run ends the session, the user reads why,
tools stay refused until a human answers, the same patch is refused, and the
agent is kept going once while the tests are red."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devs.domain.chart import TaskState
from tests.agents.conftest import agent_binary
from tests.agents.gemini import GeminiHandler, configure, run
from tests.agents.lane import RIGHT, WRONG, Project, attempt, calc, loop
from tests.agents.script import Say, Script, Write, serving

PROMPT = "Make the tests pass."


@pytest.fixture
def project(tmp_path: Path) -> Project:
    agent_binary("gemini")
    made = Project(tmp_path, "gemini")
    made.install()
    return made


def test_the_loop_ends_at_the_third_failure_until_a_human_answers(
    project: Project,
) -> None:
    script = Script([*loop(*WRONG[:5]), *attempt(RIGHT)])
    with serving(GeminiHandler, script) as fake:
        env = configure(project.home, project.repo, fake.url)
        first = run(project.repo, PROMPT, env)
        assert first.returncode == 0, first.stderr
        # The session ended with the third run: no request carried its result.
        assert script.furthest() == 5
        task = project.task()
        assert task.state is TaskState.ESCALATION
        assert task.consecutive_failures == 3
        assert task.failure_history[-1].exit_code == 1
        # The user reads why, with the command that lets it go on.
        assert f"devs-recovery stopped task {project.task_id}" in first.stderr
        assert f"resume {project.task_id} --actor NAME" in first.stderr
        # A session continued without a human's answer: no model request.
        before = len(script.turns)
        run(project.repo, "Go on.", env, args=("--resume", "latest"))
        assert len(script.turns) == before
        assert (project.repo / "calc.py").read_text() == calc(WRONG[2])
        project.resume()
        run(project.repo, "Go on.", env, args=("--resume", "latest"))
        assert project.task().consecutive_failures == 4
        assert project.task().state is TaskState.ESCALATION
        project.resume()
        run(project.repo, "Go on.", env, args=("--resume", "latest"))
    # The fifth failure hands the task off.
    assert project.task().consecutive_failures == 5
    assert project.task().state is TaskState.HAND_OFF


def test_the_same_patch_again_is_refused(project: Project) -> None:
    script = Script(loop(WRONG[0], WRONG[1], WRONG[0]))
    with serving(GeminiHandler, script) as fake:
        env = configure(project.home, project.repo, fake.url)
        done = run(project.repo, PROMPT, env)
        assert done.returncode == 0, done.stderr
    assert script.furthest() == 5
    assert "already failed" in done.stderr
    task = project.task()
    assert [f.kind for f in task.failure_history].count("gate") == 2


def test_the_agent_is_kept_going_once_while_the_tests_are_red(
    project: Project,
) -> None:
    script = Script([*attempt(WRONG[0]), Say("Done.")])
    with serving(GeminiHandler, script) as fake:
        env = configure(project.home, project.repo, fake.url)
        done = run(project.repo, PROMPT, env)
        assert done.returncode == 0, done.stderr
    final = [r for r in script.turns if r.results == 2]
    assert len(final) == 2
    assert "the gate is red" in json.dumps(final[1].body)


def test_a_budget_spent_ends_the_session_until_a_person_raises_it(
    project: Project,
) -> None:
    """The hooks read the session's usage from Gemini CLI's chat recording
    (each answer once, however often it is written): past the budget the
    task pauses and the session ends; a raise and a resume let it go on."""
    notes = [Write(f"note{n}.txt", f"step {n}\n") for n in range(8)]
    script = Script([*notes, *attempt(RIGHT)])
    with serving(GeminiHandler, script) as fake:
        env = configure(project.home, project.repo, fake.url)
        env["DEVS_TASK_BUDGET_TOKENS"] = "40"  # 15 tokens an answer
        first = run(project.repo, PROMPT, env)
        assert first.returncode == 0, first.stderr
        task = project.task()
        assert task.state is TaskState.PAUSED, first.stderr[-2_000:]
        assert task.pending_session is not None
        assert task.pending_session.reason == "budget_exhausted"
        written = len(list(project.repo.glob("note*.txt")))
        assert written < len(notes)
        assert f"budget {project.task_id} --usd N" in first.stderr
        raised = project.devs(
            "budget", project.task_id, "--tokens", "100000", "--reason", "more"
        )
        assert raised.returncode == 0, raised.stdout + raised.stderr
        project.resume()
        run(project.repo, "Go on.", env, args=("--resume", "latest"))
    assert project.task().state is TaskState.COMPLETED
    report = json.loads(project.devs("spend", project.task_id, "--json").stdout)
    # Each answer of the chat recordings once (an answer is written again
    # when its tool calls are attached): 10 tokens in, 5 out.
    answers = set()
    for chat in (project.home / ".gemini").rglob("*.jsonl"):
        for line in chat.read_text().splitlines():
            row = json.loads(line)
            if row.get("type") == "gemini" and row.get("tokens"):
                answers.add(row["id"])
    assert len(answers) >= 3
    assert (report["input_tokens"], report["output_tokens"]) == (
        10 * len(answers),
        5 * len(answers),
    )
