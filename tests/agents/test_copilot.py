"""The real GitHub Copilot CLI (``copilot -p``) with the breaker installed as
a user installs it (``devs hooks install copilot``: the project's
``.github/hooks/devs-recovery.json``, the folder trusted), against a scripted
model on loopback.

What halts Copilot is a denial on PermissionRequest with ``interrupt``: the
third failing test run is answered with the stop's reason, and the next
tool call is refused there, which ends the turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devs.domain.chart import TaskState
from tests.agents.conftest import agent_binary
from tests.agents.copilot import CopilotHandler, run_copilot, session_id
from tests.agents.lane import RIGHT, WRONG, Project, attempt, calc, loop
from tests.agents.script import Say, Script, Write, serving

PROMPT = "Make the tests pass."


@pytest.fixture
def project(tmp_path: Path) -> Project:
    agent_binary("copilot")
    made = Project(tmp_path, "copilot")
    made.install()
    assert (made.repo / ".github/hooks/devs-recovery.json").is_file()
    return made


def test_the_third_failure_ends_the_turn_until_a_human_answers(
    project: Project,
) -> None:
    script = Script([*loop(*WRONG[:4]), *attempt(RIGHT)])
    with serving(CopilotHandler, script) as fake:
        first = run_copilot(project.repo, PROMPT, project.home, fake.url)
        assert first.returncode == 0, first.stderr
        task = project.task()
        assert task.state is TaskState.ESCALATION
        assert task.consecutive_failures == 3
        # The model was told the reason with the third run's output, and its
        # next call (the fourth write) was refused where the turn ended: no
        # request carried more results.
        assert script.furthest() == 6
        assert "devs-recovery stopped task" in json.dumps(script.turns[-1].body)
        assert (project.repo / "calc.py").read_text() == calc(WRONG[2])
        # The user reads why, and the command that lets it go on.
        # Copilot wraps what it shows at its width: a long store path moves
        # the breaks (pytest's temporary folder grows a digit past pytest-999).
        shown = " ".join(first.stdout.split())
        assert "Permission denied by a PermissionRequest hook" in shown
        assert f"devs-recovery stopped task {project.task_id}" in shown
        assert f"resume {project.task_id} --actor NAME --reason WHY" in shown
        session = session_id(first)
        assert session is not None

        # Without a human's answer, the session is refused at its prompt.
        before = len(script.turns)
        again = run_copilot(
            project.repo, "Go on.", project.home, fake.url, resume=session
        )
        assert again.returncode == 1
        assert "devs-recovery stopped task" in " ".join(again.stderr.split())
        assert len(script.turns) == before  # the model was not asked

        # A human resumes: the session goes on.
        project.resume()
        going = run_copilot(
            project.repo, "Go on.", project.home, fake.url, resume=session
        )
        assert going.returncode == 0, going.stderr
        assert len(script.turns) > before
        assert script.furthest() > 6
        assert project.task().consecutive_failures >= 3


def test_the_same_patch_again_is_refused_before_the_tests_run(
    project: Project,
) -> None:
    script = Script(loop(WRONG[0], WRONG[1], WRONG[0]))
    with serving(CopilotHandler, script) as fake:
        done = run_copilot(project.repo, PROMPT, project.home, fake.url)
        assert done.returncode == 0, done.stderr
    # The third test run was refused: its result is the refusal.
    assert script.furthest() == 6
    refused = json.dumps(script.turns[-1].body)
    assert "This strategy already failed" in refused
    task = project.task()
    assert task.state in (TaskState.PAUSED, TaskState.ESCALATION)
    assert [f.kind for f in task.failure_history][-1] != "gate"
    assert len([f for f in task.failure_history if f.kind == "gate"]) == 2
    assert "Denied by preToolUse hook" in " ".join(done.stdout.split())


def test_stop_is_blocked_once_while_the_tests_are_red(project: Project) -> None:
    script = Script([*attempt(WRONG[0]), Say("Done.")])
    with serving(CopilotHandler, script) as fake:
        done = run_copilot(project.repo, PROMPT, project.home, fake.url)
        assert done.returncode == 0, done.stderr
    final = [r for r in script.turns if r.results == 2]
    # Refused once (the model was asked again, told the gate is red), then
    # let go: two requests after the failing run, no more.
    assert len(final) == 2
    assert "the gate is red" in json.dumps(final[1].body)
    # The failing run's output carried the nudge.
    assert "1 in a row" in json.dumps(final[0].body)
    assert project.task().consecutive_failures == 1


def test_the_hand_off_comes_at_the_fifth_failure(project: Project) -> None:
    script = Script([*loop(*WRONG[:5]), *attempt(RIGHT)])
    with serving(CopilotHandler, script) as fake:
        first = run_copilot(project.repo, PROMPT, project.home, fake.url)
        session = session_id(first)
        assert session is not None
        assert project.task().consecutive_failures == 3
        for _ in range(2):  # a human resumes; the session goes on and fails
            project.resume()
            run_copilot(project.repo, "Go on.", project.home, fake.url, resume=session)
    task = project.task()
    assert task.consecutive_failures == 5
    assert task.state is TaskState.HAND_OFF


def test_usage_counts_late_and_never_twice(project: Project) -> None:
    """Copilot writes its session's usage records late: a call's record a
    call or more after it, the last ones after ``sessionEnd`` (a fast
    session's all of them then; docs/agents.md#spend). The hooks count each
    record once when they find it, a later session's hooks included: the
    finished task's spend grows as the records come, never past them."""
    notes = [Write(f"note{n}.txt", f"step {n}\n") for n in range(3)]
    script = Script([*notes, *attempt(RIGHT), Say("Done.")])
    with serving(CopilotHandler, script) as fake:
        first = run_copilot(project.repo, PROMPT, project.home, fake.url)
        assert first.returncode == 0, first.stderr
        assert project.task().state is TaskState.COMPLETED
        session = session_id(first)
        assert session is not None
        for prompt in ("Thanks.", "Bye."):
            script.steps = [*script.steps, Say("You are welcome.")]
            run_copilot(project.repo, prompt, project.home, fake.url, resume=session)
    report = json.loads(project.devs("spend", project.task_id, "--json").stdout)
    records = {
        json.loads(line)["data"]["usage"]["accounting"]["usageId"]
        for events in (project.home / ".copilot").rglob("events.jsonl")
        for line in events.read_text().splitlines()
        if '"session.usage_record"' in line
    }
    # The fake's every call: 100 tokens in, 10 out. The first session's six
    # calls were all on disk by the third session's start.
    calls = report["output_tokens"] // 10
    assert report["input_tokens"] == 100 * calls
    assert 6 <= calls <= len(records), (report, sorted(records))
