"""The LangGraph adapter with a real compiled graph, a real SqliteSaver, a
scripted model and real test commands: in process and over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langgraph.types import Command

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.config import Settings, open_service
from devs.adapters.http import create_app
from devs.adapters.langgraph import Backend, Referee
from devs.domain import InvalidInput, RecoveryService
from tests.langgraph_agent import (
    IDEAS,
    ScriptedModel,
    Turn,
    build,
    config,
    make_repo,
    referee_for,
    saver,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["in-process", "http"])
def backend(
    request: pytest.FixtureRequest, service: RecoveryService
) -> Iterator[Backend]:
    """What the referee talks to: the service itself, or the HTTP API over
    the same service (FastAPI's TestClient, through HttpRecoveryClient)."""
    if request.param == "in-process":
        yield service
        return
    with TestClient(create_app(service)) as client:
        yield HttpRecoveryClient(client)


def events(service: RecoveryService, task_id: str) -> Counter[str]:
    return Counter(entry.event for entry in service.history(task_id))


def gates(counts: Counter[str]) -> int:
    return counts["GatePassed"] + counts["GateFailed"]


def interrupt_of(result: dict[str, Any]) -> dict[str, Any]:
    interrupts = result.get("__interrupt__")
    assert interrupts, f"the graph was not suspended: {result}"
    assert len(interrupts) == 1
    value: dict[str, Any] = interrupts[0].value
    return value


def test_entropy_above_threshold_suspends_and_resuming_resolves_the_session(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {"rewrite everything": Turn(fixes=True, entropy=0.9)})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(
            referee_for(backend, repo), model, ["rewrite everything"], checkpointer
        )
        result = graph.invoke({"task_id": "t1"}, config("a"))
        payload = interrupt_of(result)
        assert payload["devs"] == "suspended"
        assert payload["reason"] == "entropy_limit"
        assert payload["where"] == "entropy"
        assert payload["entropy_score"] == 0.9
        assert payload["answers"] == ["resume", "rewind", "skip", "claim"]
        assert payload["version"] == service.task("t1").version
        pending = service.pending_sessions()
        assert [(s.task_id, s.session_id) for s in pending] == [
            ("t1", payload["session_id"])
        ]
        assert service.task("t1").state == "PAUSED"

        resumed = graph.invoke(
            Command(
                resume={"action": "resume", "actor": "ann", "reason": "looks fine"}
            ),
            config("a"),
        )
    assert "__interrupt__" not in resumed
    assert resumed["devs"]["route"] == "end"  # the gate passed: task complete
    assert resumed["devs"]["passed"] is True
    assert service.pending_sessions() == []
    task = service.task("t1")
    assert task.state == "COMPLETED"
    counts = events(service, "t1")
    assert counts["Resumed"] == 1
    assert counts["Paused"] == 1
    assert gates(counts) == 1
    assert model.calls == ["rewrite everything"]  # resuming did not call it again
    resumes = [e for e in service.history("t1") if e.event == "Resumed"]
    assert resumes[0].changes["actor"] == "ann"


def test_a_strategy_that_failed_is_blocked_before_the_model_is_called(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {"fix the sign": Turn(fixes=True)})
    service.start_task("t1")
    strategies = ["patch the test", "patch the test", "fix the sign"]
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, strategies, checkpointer)
        payload = interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
        assert payload["reason"] == "blacklisted_strategy"
        assert payload["where"] == "attempt"
        assert payload["blocked_strategy"] == "patch the test"
        assert model.calls == ["patch the test"]  # the second never reached it
        assert payload["matched_strategy"] == "patch the test"
        assert "patch the test" in payload["directive"]

        result = graph.invoke(
            Command(
                resume={"action": "resume", "actor": "bob", "reason": "try another"}
            ),
            config("a"),
        )
    assert result["devs"]["route"] == "end"
    assert model.calls == ["patch the test", "fix the sign"]
    assert "patch the test" in result["prompt"]  # the directive reached the prompt
    counts = events(service, "t1")
    assert counts["BlacklistedStrategyAttempted"] == 1
    assert counts["LessonLogged"] == 1
    assert service.task("t1").state == "COMPLETED"


def test_three_failing_gates_escalate_and_five_hand_off(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {})  # nothing fixes the bug
    service.start_task("t1")
    strategies = list(IDEAS[:7])
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, strategies, checkpointer)
        payload = interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
        assert payload["reason"] == "max_retries"
        assert payload["where"] == "gate"
        assert payload["consecutive_failures"] == 3
        assert payload["report"]["failure_count"] == 3
        assert payload["report"]["failed_strategies"] == list(IDEAS[:3])
        assert service.task("t1").state == "ESCALATION"

        resume = {"action": "resume", "actor": "ann", "reason": "one more go"}
        payload = interrupt_of(graph.invoke(Command(resume=resume), config("a")))
        assert payload["reason"] == "max_retries"  # asked again at 4
        assert payload["consecutive_failures"] == 4
        payload = interrupt_of(graph.invoke(Command(resume=resume), config("a")))
        assert payload["reason"] == "hand_off_required"
        assert payload["answers"] == ["claim", "resolve"]
        assert payload["handoff"]["failure_count"] == 5
        assert [e.payload.task_id for e in service.handoff_queue()] == ["t1"]

        done = {
            "action": "resolve",
            "actor": "cy",
            "resolution": "complete",
            "reason": "fixed by hand",
        }
        result = graph.invoke(Command(resume=done), config("a"))
    assert result["devs"]["route"] == "end"
    assert result["devs"]["decided_by"] == "cy"
    assert service.task("t1").state == "COMPLETED"
    assert model.calls == strategies[:5]
    counts = events(service, "t1")
    assert gates(counts) == 5
    assert "HandoffClaimed" not in counts  # an unclaimed hand-off is resolved as is
    assert counts["HandoffResolved"] == 1


def test_a_resumed_graph_never_counts_twice(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    """Every suspension reruns its node on resume: one event per decision."""
    repo = make_repo(tmp_path / "repo")
    script = {IDEAS[3]: Turn(entropy=0.95), IDEAS[4]: Turn(fixes=True)}
    model = ScriptedModel(repo, script)
    service.start_task("t1")
    strategies = list(IDEAS[:5])
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, strategies, checkpointer)
        first = interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
        assert first["reason"] == "max_retries"
        resume = {"action": "resume", "actor": "ann", "reason": "go on"}
        second = interrupt_of(graph.invoke(Command(resume=resume), config("a")))
        assert second["reason"] == "entropy_limit"
        assert second["session_id"] != first["session_id"]
        third = interrupt_of(graph.invoke(Command(resume=resume), config("a")))
        assert third["reason"] == "max_retries"  # its gate: failure 4
        result = graph.invoke(Command(resume=resume), config("a"))
    assert result["devs"]["route"] == "end"
    counts = events(service, "t1")
    assert counts["AttemptBegan"] == 5
    assert gates(counts) == 5
    assert counts["LessonLogged"] == 4
    assert counts["Escalated"] == 2
    assert counts["EntropyMeasured"] == 4  # the fifth score paused the task
    assert counts["Paused"] == 1
    assert counts["Resumed"] == 3
    assert model.calls == strategies
    assert service.task("t1").state == "COMPLETED"


def test_claim_then_resolve_in_two_answers(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        referee = referee_for(backend, repo)
        graph = build(referee, model, list(IDEAS), checkpointer)
        interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
        go_on = {"action": "resume", "actor": "ann", "reason": "go on"}
        interrupt_of(graph.invoke(Command(resume=go_on), config("a")))
        handoff = interrupt_of(graph.invoke(Command(resume=go_on), config("a")))
        assert handoff["claimed_by"] is None
        claimed = interrupt_of(
            graph.invoke(
                Command(resume={"action": "claim", "actor": "dee"}), config("a")
            )
        )
        assert claimed["reason"] == "hand_off_required"
        assert claimed["claimed_by"] == "dee"
        back = {
            "action": "resolve",
            "actor": "dee",
            "resolution": "return",
            "reason": "hint: it is the sign",
        }
        model.script = {IDEAS[5]: Turn(fixes=True)}
        result = graph.invoke(Command(resume=back), config("a"))
    # returned to the agent, which planned again and passed
    assert result["devs"]["route"] == "end"
    assert result["devs"]["passed"] is True
    assert model.calls[-1] == IDEAS[5]
    assert service.task("t1").state == "COMPLETED"
    counts = events(service, "t1")
    assert counts["HandoffClaimed"] == 1
    assert counts["HandoffResolved"] == 1


def hand_off(graph: Any) -> dict[str, Any]:
    """Run a graph whose model fixes nothing up to its hand-off (the fifth
    failing gate): the hand-off's suspension payload."""
    interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
    go_on = {"action": "resume", "actor": "ann", "reason": "go on"}
    interrupt_of(graph.invoke(Command(resume=go_on), config("a")))
    payload = interrupt_of(graph.invoke(Command(resume=go_on), config("a")))
    assert payload["reason"] == "hand_off_required"
    return payload


def test_a_second_humans_claim_is_refused_and_the_claimer_resolves(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    """Once claimed, the hand-off offers only ``resolve``; another human's
    claim suspends the graph again with the reason, and records nothing."""
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, list(IDEAS), checkpointer)
        assert hand_off(graph)["answers"] == ["claim", "resolve"]
        claim = {"action": "claim", "actor": "dee"}
        claimed = interrupt_of(graph.invoke(Command(resume=claim), config("a")))
        assert claimed["claimed_by"] == "dee"
        assert claimed["answers"] == ["resolve", "release", "take_over"]
        assert "error" not in claimed
        before = service.task("t1").version
        other = {"action": "claim", "actor": "eve"}
        refused = interrupt_of(graph.invoke(Command(resume=other), config("a")))
        assert refused["reason"] == "hand_off_required"
        assert refused["error"]["field"] == "action"
        assert "'dee'" in refused["error"]["detail"]
        assert refused["claimed_by"] == "dee"
        assert refused["answers"] == ["resolve", "release", "take_over"]
        assert service.task("t1").version == before
        assert service.task("t1").claimed_by == "dee"
        done = {
            "action": "resolve",
            "actor": "dee",
            "resolution": "complete",
            "reason": "fixed by hand",
        }
        result = graph.invoke(Command(resume=done), config("a"))
        assert graph.get_state(config("a")).next == ()
    assert "__interrupt__" not in result
    assert result["devs"]["route"] == "end"
    assert result["devs"]["decided_by"] == "dee"
    assert service.task("t1").state == "COMPLETED"
    counts = events(service, "t1")
    assert counts["HandoffClaimed"] == 1
    assert counts["HandoffResolved"] == 1


def test_the_claimers_repeated_claim_changes_nothing(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    """The same human claiming twice (a double click) is no error: the graph
    suspends again as after the first claim."""
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, list(IDEAS), checkpointer)
        hand_off(graph)
        claim = {"action": "claim", "actor": "dee"}
        interrupt_of(graph.invoke(Command(resume=claim), config("a")))
        again = interrupt_of(graph.invoke(Command(resume=claim), config("a")))
        assert "error" not in again
        assert again["claimed_by"] == "dee"
        assert again["answers"] == ["resolve", "release", "take_over"]
        done = {"action": "resolve", "actor": "dee", "resolution": "skip"}
        result = graph.invoke(Command(resume=done), config("a"))
        assert graph.get_state(config("a")).next == ()
    assert result["devs"]["route"] == "end"
    assert service.task("t1").state == "SKIPPED"
    counts = events(service, "t1")
    assert counts["HandoffClaimed"] == 1
    assert counts["HandoffResolved"] == 1


def test_a_handoff_resolved_outside_the_graph_ends_it(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    """``devs resolve`` while the graph waits: the next resume ends the graph
    with the answer the log holds, whatever it carries, and records nothing."""
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, list(IDEAS), checkpointer)
        hand_off(graph)
        claim = {"action": "claim", "actor": "dee"}
        interrupt_of(graph.invoke(Command(resume=claim), config("a")))
        service.resolve_handoff(
            "t1", actor="dee", resolution="complete", reason="done in the CLI"
        )
        late = {"action": "resolve", "actor": "dee", "resolution": "complete"}
        result = graph.invoke(Command(resume=late), config("a"))
        assert graph.get_state(config("a")).next == ()
    assert "__interrupt__" not in result
    assert result["devs"]["route"] == "end"
    assert result["devs"]["outside"] is True
    assert result["devs"]["decided_by"] == "dee"
    assert result["devs"]["reason"] == "done in the CLI"
    assert service.task("t1").state == "COMPLETED"
    counts = events(service, "t1")
    assert counts["HandoffClaimed"] == 1
    assert counts["HandoffResolved"] == 1


def test_a_pause_resumed_outside_the_graph_goes_on(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    """``devs resume`` while the graph waits: running the graph on, even
    without an answer (``invoke(None, ...)``), routes as the answer the log
    holds (an entropy pause resumed: this turn's gate)."""
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {"x": Turn(fixes=True, entropy=0.99)})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, ["x"], checkpointer)
        interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
        service.resume("t1", actor="ann", reason="from the CLI")
        result = graph.invoke(None, config("a"))
        assert graph.get_state(config("a")).next == ()
    assert result["devs"]["route"] == "end"  # the gate passed
    assert result["devs"]["passed"] is True
    assert service.task("t1").state == "COMPLETED"
    counts = events(service, "t1")
    assert counts["Resumed"] == 1
    assert gates(counts) == 1


def test_a_bad_answer_is_refused_and_records_nothing(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    """A refused answer suspends the graph again, the payload's error naming
    what was wrong; nothing is recorded; a good answer then goes on."""
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {"x": Turn(entropy=0.99)})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, ["x"], checkpointer)
        interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
        before = service.task("t1").version
        for bad, field in (
            ({"action": "approve", "actor": "ann"}, "action"),
            ({"action": "resume"}, "actor"),
            ("yes", "resume"),
            ({"action": "resolve", "actor": "ann"}, "action"),
            ({"action": "resume", "actor": "ann", "if_version": 1}, None),
            ({"action": "resume", "actor": " ann"}, "actor"),
            ({"action": "resume", "actor": "ann", "extra": 1}, "extra"),
        ):
            again = interrupt_of(graph.invoke(Command(resume=bad), config("a")))
            assert again["reason"] == "entropy_limit"
            assert again["error"]["field"] == field, (bad, again["error"])
            assert again["error"]["detail"]
            assert service.task("t1").version == before
            assert service.task("t1").state == "PAUSED"
        # still suspended: a good answer goes on
        good = {"action": "skip", "actor": "ann", "reason": "not worth it"}
        result = graph.invoke(Command(resume=good), config("a"))
    assert result["devs"]["route"] == "end"
    assert service.task("t1").state == "SKIPPED"


def test_two_graphs_never_see_each_others_lessons(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    repo_a, repo_b = make_repo(tmp_path / "a"), make_repo(tmp_path / "b")
    service.start_task("task-a")
    service.start_task("task-b")
    model_a = ScriptedModel(repo_a, {"fix": Turn(fixes=True)})
    model_b = ScriptedModel(repo_b, {"shared idea": Turn(fixes=True)})
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph_a = build(
            referee_for(backend, repo_a), model_a, ["shared idea", "fix"], checkpointer
        )
        graph_b = build(
            referee_for(backend, repo_b), model_b, ["shared idea"], checkpointer
        )
        done_a = graph_a.invoke({"task_id": "task-a"}, config("thread-a"))
        done_b = graph_b.invoke({"task_id": "task-b"}, config("thread-b"))
    assert done_a["devs"]["route"] == "end"
    assert [lesson.failed_strategy for lesson in service.lessons("task-a")] == [
        "shared idea"
    ]
    assert service.lessons("task-b") == []
    assert "shared idea" not in done_b.get("directive", "")
    assert model_b.calls == ["shared idea"]  # not blocked by task-a's lesson
    assert done_b["devs"]["route"] == "end"


def test_route_needs_a_referee_node_first() -> None:
    with pytest.raises(InvalidInput, match="no referee route"):
        Referee.route({"task_id": "t1"})


# ------------------------------------------------------------------ crashes

CRASH_SCRIPT = """
import os, signal, sys
from pathlib import Path
from devs.adapters.config import Settings, open_service
from tests.langgraph_agent import (
    IDEAS, ScriptedModel, Turn, build, config, referee_for, saver
)

base = Path(sys.argv[1])
crash_after = sys.argv[2]  # "record_gate:N", "begin_attempt:N" or "none"
service = open_service(Settings(db=str(base / "devs.sqlite")))

class Crashing:
    '''The service, killed right after its Nth call of one command returns:
    the devs event is saved, LangGraph's checkpoint of the step is not.'''
    def __init__(self, inner, name, after):
        self.inner, self.name, self.after, self.calls = inner, name, after, 0
    def __getattr__(self, attr):
        found = getattr(self.inner, attr)
        if attr != self.name:
            return found
        def call(*args, **kwargs):
            answer = found(*args, **kwargs)
            self.calls += 1
            if self.calls == self.after:
                os.kill(os.getpid(), signal.SIGKILL)
            return answer
        return call

backend = service
if crash_after != "none":
    name, after = crash_after.split(":")
    backend = Crashing(service, name, int(after))
if not (base / "started").exists():
    service.start_task("t1")
    (base / "started").write_text("")
    first = {"task_id": "t1"}
else:
    first = None  # resume from the last checkpoint
model = ScriptedModel(base / "repo", {IDEAS[2]: Turn(fixes=True)})
with saver(base / "graph.sqlite") as checkpointer:
    ideas = list(IDEAS[:3])
    graph = build(referee_for(backend, base / "repo"), model, ideas, checkpointer)
    result = graph.invoke(first, config("crash"), durability="sync")
print(result["devs"]["route"])
"""


@pytest.mark.parametrize("crash", ["record_gate:2", "begin_attempt:2", "log_lesson:1"])
def test_a_graph_killed_after_a_devs_command_resumes_without_a_duplicate(
    tmp_path: Path, crash: str
) -> None:
    make_repo(tmp_path / "repo")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("DEVS_ESCALATION_THRESHOLD", "DEVS_HANDOFF_THRESHOLD", "DEVS_DB"):
        env.pop(name, None)

    def run(crash_after: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", CRASH_SCRIPT, str(tmp_path), crash_after],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
            check=False,
        )

    killed = run(crash)
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = run("none")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert resumed.stdout.strip() == "end"
    with open_service(Settings(db=str(tmp_path / "devs.sqlite"))) as service:
        counts = events(service, "t1")
        assert service.task("t1").state == "COMPLETED"
    assert counts["AttemptBegan"] == 3, counts
    assert gates(counts) == 3, counts
    assert counts["LessonLogged"] == 2, counts


def test_a_gate_run_again_with_another_result_keeps_the_first(
    service: RecoveryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a crash that lost LangGraph's record of the test run, the tests
    run again; if they now say otherwise, the first recorded gate stands and
    the step routes from the task's state."""
    import devs.adapters.langgraph as adapter

    monkeypatch.setattr(adapter, "_key", lambda op: f"langgraph/fixed/{op}")
    referee = Referee(service, test_command=["true"])
    service.start_task("t1")
    for _ in range(2):
        service.record_gate("t1", 1)
    first = referee._once_or_recorded(
        "gate.0", lambda: service.record_gate("t1", 1, output="run 1"), ("run 1",)
    )
    assert first is not None
    assert first.outcome == "escalate"
    again = referee._once_or_recorded(
        "gate.0", lambda: service.record_gate("t1", 0, output="run 2"), ("run 2",)
    )
    assert again is None
    recorded = referee._recorded_gate("t1")
    assert recorded.outcome == "escalate"
    assert recorded.session_id == first.session_id
    assert gates(events(service, "t1")) == 3


def test_a_secret_in_the_test_output_reaches_neither_log(
    tmp_path: Path, service: RecoveryService
) -> None:
    """The gate runner redacts the output before anything sees it: LangGraph's
    checkpoint (the test run's task result), the suspension payload and the
    devs-recovery log never hold the secret."""
    secret = "sk-live-" + "abcdefghij" + "klmnop1234"
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {})
    service.start_task("t1")
    command = [sys.executable, "-c", f"print('api_key={secret}'); raise SystemExit(1)"]
    referee = referee_for(service, repo, test_command=command)
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee, model, list(IDEAS), checkpointer)
        payload = interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
    assert payload["reason"] == "max_retries"
    assert "api_key=" in payload["output_tail"]
    assert secret not in str(payload)
    for path in tmp_path.glob("*.sqlite*"):
        assert secret.encode() not in path.read_bytes(), path
    assert secret not in str(service.history("t1"))


def test_a_claimed_pause_refuses_another_humans_answer_until_taken_over(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    """A claim holds an escalation or a pause too: another human's answer
    suspends the graph again with the refusal (naming the claimer), nothing
    recorded; an explicit take-over is recorded, then their answer goes on."""
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {"x": Turn(entropy=0.99)})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, ["x"], checkpointer)
        paused = interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
        claim = {"action": "claim", "actor": "dee", "if_version": paused["version"]}
        claimed = interrupt_of(graph.invoke(Command(resume=claim), config("a")))
        assert claimed["claimed_by"] == "dee"
        assert claimed["answers"] == [
            "resume",
            "rewind",
            "skip",
            "release",
            "take_over",
        ]
        before = service.task("t1").version
        other = {"action": "skip", "actor": "eve", "reason": "mine"}
        refused = interrupt_of(graph.invoke(Command(resume=other), config("a")))
        assert "claimed by 'dee'" in refused["error"]["detail"]
        assert service.task("t1").version == before
        stale = {"action": "take_over", "actor": "eve", "if_version": before - 1}
        refused = interrupt_of(graph.invoke(Command(resume=stale), config("a")))
        assert f"is at version {before}" in refused["error"]["detail"]
        take = {"action": "take_over", "actor": "eve", "reason": "dee is off"}
        taken = interrupt_of(graph.invoke(Command(resume=take), config("a")))
        assert taken["claimed_by"] == "eve"
        result = graph.invoke(Command(resume=other), config("a"))
    assert result["devs"]["decided_by"] == "eve"
    assert service.task("t1").state == "SKIPPED"
    assert events(service, "t1")["ClaimTakenOver"] == 1


def test_an_answer_refused_for_a_claim_stays_refused_when_the_node_runs_again(
    tmp_path: Path, service: RecoveryService, backend: Backend
) -> None:
    """LangGraph runs the node again on each resume and gives back the
    answers given before: one refused then (someone else held the claim)
    stays refused after the claim was released, and the newest answer is the
    one recorded."""
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {"x": Turn(entropy=0.99)})
    service.start_task("t1")
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(backend, repo), model, ["x"], checkpointer)
        interrupt_of(graph.invoke({"task_id": "t1"}, config("a")))
        service.claim("t1", actor="dee")  # outside the graph: the console, say
        skip = {"action": "skip", "actor": "eve", "reason": "drop it"}
        refused = interrupt_of(graph.invoke(Command(resume=skip), config("a")))
        assert "claimed by 'dee'" in refused["error"]["detail"]
        service.release("t1", actor="dee")
        go_on = {"action": "resume", "actor": "eve", "reason": "go on"}
        result = graph.invoke(Command(resume=go_on), config("a"))
    assert result["devs"]["where"] == "gate"  # resumed: on to the gate
    assert service.task("t1").state != "SKIPPED"
    answers = [
        (entry.event, entry.changes.get("reason"))
        for entry in service.history("t1")
        if entry.event in ("Skipped", "Resumed")
    ]
    assert answers == [("Resumed", "go on")]
