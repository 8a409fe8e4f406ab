"""The real Codex (``codex exec``) with the breaker installed as a user
installs it, its hooks trusted as ``/hooks`` trusts them, against a scripted
model on loopback.

Nothing halts Codex within a turn (docs/agents.md): the strongest it honours
is a refusal of every tool call, the reason in place of the failing run's
output (and on stderr), and a prompt refused before the model is asked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from devs.domain.chart import TaskState
from tests.agents.codex import CodexHandler, patch_command, run_codex, trust_hooks
from tests.agents.codex import write_config as codex_config
from tests.agents.conftest import agent_binary
from tests.agents.lane import RIGHT, WRONG, Project, attempt, calc, loop
from tests.agents.script import Say, Script, Shell, Write, serving

PROMPT = "Make the tests pass."


@pytest.fixture
def project(tmp_path: Path) -> Project:
    agent_binary("codex")
    made = Project(tmp_path, "codex")
    made.install()
    return made


def trusted(project: Project, url: str) -> None:
    codex_config(project.home, url, trusted=[project.repo])
    assert trust_hooks(project.home, project.repo)


def untrusted(project: Project) -> bool:
    """Whether ``devs hooks status`` says Codex has not trusted the hooks."""
    shown = project.devs("hooks", "status", "--dir", str(project.repo)).stdout
    return "not trusted by Codex yet" in shown


def test_untrusted_hooks_are_skipped_and_devs_says_so(project: Project) -> None:
    script = Script(loop(WRONG[0]))
    with serving(CodexHandler, script) as fake:
        codex_config(project.home, fake.url, trusted=[project.repo])
        assert untrusted(project)
        run_codex(project.repo, PROMPT, project.home)
        # Codex ran the test, and no hook at all: nothing was recorded.
        assert script.furthest() == 2
        assert project.devs("status").stdout.count(project.task_id) == 0
        assert trust_hooks(project.home, project.repo)
        assert not untrusted(project)


class ShellPatches(CodexHandler):
    """A model without Codex's ``apply_patch`` tool: it edits with
    ``apply_patch <<'EOF'`` in the shell."""

    def call_for(self, step: Shell | Write, tools: Sequence[str]) -> dict[str, Any]:
        if isinstance(step, Write):
            step = Shell(patch_command(step.path, step.content))
        return super().call_for(step, tools)


def test_every_tool_is_refused_after_the_third_failure_until_a_human_answers(
    project: Project,
) -> None:
    script = Script([*loop(*WRONG[:4]), *attempt(RIGHT)])
    with serving(CodexHandler, script) as fake:
        trusted(project, fake.url)
        first = run_codex(project.repo, PROMPT, project.home)
        assert first.returncode == 0, first.stderr
        task = project.task()
        assert task.state is TaskState.ESCALATION
        assert task.consecutive_failures == 3
        assert task.failure_history[-1].exit_code == 1
        # Every later tool call was refused: the fourth fix never reached
        # the tree, no test ran again; the user reads why on stderr.
        assert (project.repo / "calc.py").read_text() == calc(WRONG[2])
        assert f"devs-recovery stopped task {project.task_id}" in first.stderr
        # Continued without a human's answer: the prompt is refused.
        before = len(script.turns)
        again = run_codex(project.repo, "Go on.", project.home, resume=True)
        assert len(script.turns) == before, again.stderr
        # A human resumes: the session goes on (every refused call is in its
        # history: the script's next steps come after them) and passes.
        project.resume()
        script.steps = [*script.steps, *attempt(RIGHT)]
        run_codex(project.repo, "Go on.", project.home, resume=True)
    assert project.task().state is TaskState.COMPLETED


def test_edits_through_the_shell_are_recorded_and_the_same_patch_refused(
    project: Project,
) -> None:
    script = Script(loop(WRONG[0], WRONG[1], WRONG[0]))
    with serving(ShellPatches, script) as fake:
        trusted(project, fake.url)
        done = run_codex(project.repo, PROMPT, project.home)
        assert done.returncode == 0, done.stderr
    lessons = project.lessons()
    assert len(lessons) == 2
    assert all(x.startswith("edit calc.py:") for x in lessons)
    task = project.task()
    assert task.consecutive_failures == 3  # two runs, and the refusal
    assert [f.kind for f in task.failure_history].count("gate") == 2
    assert "already failed" in done.stderr


def test_a_red_stop_is_refused_once(project: Project) -> None:
    script = Script([*attempt(WRONG[0]), Say("Done.")])
    with serving(CodexHandler, script) as fake:
        trusted(project, fake.url)
        done = run_codex(project.repo, PROMPT, project.home)
        assert done.returncode == 0, done.stderr
    # Refused once (asked again, told the gate is red), then let go.
    final = [r for r in script.turns if r.results == 2]
    assert len(final) == 2
    assert "the gate is red" in json.dumps(final[1].body)
    assert project.task().consecutive_failures == 1


def test_the_hand_off_comes_at_the_fifth_failure(project: Project) -> None:
    """The model stops after each failing run; a human resumes; the
    session goes on with the next wrong fix."""
    script = Script([*loop(*WRONG[:3]), Say("Stopping.")])
    with serving(CodexHandler, script) as fake:
        trusted(project, fake.url)
        run_codex(project.repo, PROMPT, project.home)
        assert project.task().consecutive_failures == 3
        for n in (3, 4):
            project.resume()
            script.steps = [
                *script.steps[: 2 * n],
                *attempt(WRONG[n]),
                Say("Stopping."),
            ]
            run_codex(project.repo, "Go on.", project.home, resume=True)
            assert project.task().consecutive_failures == n + 1
    assert project.task().state is TaskState.HAND_OFF


def test_a_budget_spent_refuses_every_tool_until_a_person_raises_it(
    project: Project,
) -> None:
    """The hooks read the session's usage from Codex's rollout (a record per
    response): past the budget the task pauses and every tool call is
    refused; a raise and a resume let the session go on."""
    notes = [Write(f"note{n}.txt", f"step {n}\n") for n in range(8)]
    script = Script([*notes, *attempt(RIGHT)])
    budget = {"DEVS_TASK_BUDGET_TOKENS": "300"}  # 110 tokens a response
    with serving(CodexHandler, script) as fake:
        trusted(project, fake.url)
        first = run_codex(project.repo, PROMPT, project.home, env=budget)
        assert first.returncode == 0, first.stderr
        task = project.task()
        assert task.state is TaskState.PAUSED, first.stderr[-2_000:]
        assert task.pending_session is not None
        assert task.pending_session.reason == "budget_exhausted"
        assert task.spend is not None
        assert task.spend.tokens >= 300
        # The third response's record (330 tokens) is on disk by the time its
        # tool call's PreToolUse runs: that call and every later one refused.
        written = sorted(p.name for p in project.repo.glob("note*.txt"))
        assert written == ["note0.txt", "note1.txt"], first.stderr
        assert f"budget {project.task_id} --usd N" in first.stderr
        # Continued without a raise: the prompt is refused.
        before = len(script.turns)
        run_codex(project.repo, "Go on.", project.home, env=budget, resume=True)
        assert len(script.turns) == before
        raised = project.devs(
            "budget", project.task_id, "--tokens", "100000", "--reason", "more"
        )
        assert raised.returncode == 0, raised.stdout + raised.stderr
        project.resume()
        script.steps = [*script.steps, *notes[2:], *attempt(RIGHT)]
        run_codex(project.repo, "Go on.", project.home, env=budget, resume=True)
    assert project.task().state is TaskState.COMPLETED
    report = json.loads(project.devs("spend", project.task_id, "--json").stdout)
    # Each response of the rollouts once: 100 tokens in (none cached), 10 out.
    responses = {
        json.loads(line)["payload"]["response_id"]
        for rollout in (project.home / ".codex" / "sessions").rglob("*.jsonl")
        for line in rollout.read_text().splitlines()
        if '"token_usage_record"' in line
    }
    assert len(responses) >= 3
    assert (report["input_tokens"], report["output_tokens"]) == (
        100 * len(responses),
        10 * len(responses),
    )
    assert report["cache_read_tokens"] == 0
