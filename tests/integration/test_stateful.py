"""Model-based test: random command sequences against a plain model of the ladder.

Hypothesis picks the policy too, and the model reads every threshold from it.
Invariants after every step: the aggregate reloaded from the store equals the live
one; every read model equals what the model says; counts and states match. At the
end, every read model rebuilt from position 0 has the same rows as the live one.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from devs.domain import IllegalTransition, Policy, RecoveryService
from devs.domain.blacklist import SIMILARITY_RATIO
from devs.domain.task import Task
from devs.domain.values import ResolutionName
from tests.helpers import levenshtein, table_rows

STRATEGIES = ["alpha approach", "alpha approaches", "beta plan", "gamma route"]
TASKS = ["solo", "n1"]
WORKING = {"RUNNING", "GATE_FAILED"}
WAITING = {"ESCALATION", "PAUSED", "HAND_OFF"}
UNFINISHED = WORKING | WAITING


policies = st.builds(
    Policy,
    escalation_threshold=st.integers(1, 6),
    handoff_threshold=st.integers(1, 8),
    hitl_entropy_threshold=st.floats(0, 1),
    failure_history_cap=st.integers(1, 4),
)


@dataclass
class TaskModel:
    policy: Policy
    state: str = "RUNNING"
    count: int = 0
    lessons: list[str] = field(default_factory=list)
    last_logged: list[str] = field(default_factory=list)
    pending: str | None = None
    claimed: str | None = None

    def blacklisted(self, strategy: str) -> bool:
        cutoff = int(len(strategy) * SIMILARITY_RATIO)
        return any(levenshtein(strategy, lesson) <= cutoff for lesson in self.lessons)

    def fail(self, *, blocked: bool) -> None:
        self.count += 1
        if self.count >= self.policy.handoff_threshold:
            self.state, self.pending, self.claimed = "HAND_OFF", None, None
        elif self.count >= self.policy.escalation_threshold:
            self.state, self.pending = "ESCALATION", "max_retries"
        elif blocked:
            self.state, self.pending = "PAUSED", "blacklisted_strategy"
        else:
            self.state = "GATE_FAILED"


class LadderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.db = str(self.tmp / "state.sqlite")
        self.service: RecoveryService | None = None
        self.models: dict[str, TaskModel] = {}

    @initialize(policy=policies)
    def start(self, policy: Policy) -> None:
        self.policy = policy
        self.service = RecoveryService(env={"SQLITE_DBNAME": self.db}, policy=policy)
        self.app.start_run("r1", {"n1": []})
        self.app.start_task("solo", agent="bot", last_commit="c0")
        self.app.start_task("n1", run_id="r1")
        self.models = {task: TaskModel(policy) for task in TASKS}

    @property
    def app(self) -> RecoveryService:
        assert self.service is not None
        return self.service

    def teardown(self) -> None:
        try:
            if self.service is not None:
                self.app.catch_up()
                live = table_rows(Path(self.db))
                self.app.rebuild_projections()
                assert table_rows(Path(self.db)) == live
        finally:
            if self.service is not None:
                self.app.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _expect_illegal(self, call: Callable[[], object]) -> None:
        try:
            call()
        except IllegalTransition:
            return
        raise AssertionError("expected IllegalTransition")

    # ------------------------------------------------------------------ rules

    @rule(task=st.sampled_from(TASKS), strategy=st.sampled_from(STRATEGIES))
    def begin_attempt(self, task: str, strategy: str) -> None:
        model = self.models[task]
        if model.state not in WORKING:
            self._expect_illegal(lambda: self.app.begin_attempt(task, strategy))
            return
        blocked = model.blacklisted(strategy)
        decision = self.app.begin_attempt(task, strategy)
        assert decision.blacklisted is blocked
        if blocked:
            model.fail(blocked=True)
        else:
            model.state = "RUNNING"

    @rule(task=st.sampled_from(TASKS), code=st.sampled_from([0, 1, 2, None]))
    def record_gate(self, task: str, code: int | None) -> None:
        model = self.models[task]
        if model.state not in WORKING:
            self._expect_illegal(lambda: self.app.record_gate(task, code))
            return
        decision = self.app.record_gate(task, code, error="e", output=f"out {code}")
        if code == 0:
            model.state, model.count = "COMPLETED", 0
        else:
            model.fail(blocked=False)
        assert decision.state == model.state

    @rule(task=st.sampled_from(TASKS), score=st.floats(0, 1))
    def report_entropy(self, task: str, score: float) -> None:
        model = self.models[task]
        threshold = self.policy.hitl_entropy_threshold
        if model.pending is not None:
            decision = self.app.report_entropy(task, score)
            assert decision.triggered is (score >= threshold)
            return
        if model.state not in WORKING:
            self._expect_illegal(lambda: self.app.report_entropy(task, score))
            return
        decision = self.app.report_entropy(task, score)
        if score >= threshold:
            model.state, model.pending = "PAUSED", "entropy_limit"
        assert decision.triggered is (score >= threshold)

    @rule(task=st.sampled_from(TASKS), strategy=st.sampled_from(STRATEGIES))
    def log_lesson(self, task: str, strategy: str) -> None:
        model = self.models[task]
        if model.state not in UNFINISHED:
            self._expect_illegal(lambda: self.app.log_lesson(task, strategy, "rca"))
            return
        self.app.log_lesson(task, strategy, f"rca {len(model.last_logged)}")
        if strategy not in model.lessons:
            model.lessons.append(strategy)
        if strategy in model.last_logged:
            model.last_logged.remove(strategy)
        model.last_logged.append(strategy)

    @rule(task=st.sampled_from(TASKS))
    def resume(self, task: str) -> None:
        model = self.models[task]
        if model.state not in {"ESCALATION", "PAUSED"}:
            self._expect_illegal(lambda: self.app.resume(task, actor="h", reason="r"))
            return
        self.app.resume(task, actor="h", reason="r")
        model.state, model.pending = "RUNNING", None

    @rule(task=st.sampled_from(TASKS))
    def rewind(self, task: str) -> None:
        model = self.models[task]
        if model.state not in UNFINISHED:
            self._expect_illegal(lambda: self.app.rewind(task, actor="h", reason="r"))
            return
        self.app.rewind(task, actor="h", reason="r")
        model.state, model.pending, model.claimed = "RUNNING", None, None

    @rule(task=st.sampled_from(TASKS))
    def skip(self, task: str) -> None:
        model = self.models[task]
        if model.state not in UNFINISHED:
            self._expect_illegal(lambda: self.app.skip(task, actor="h", reason="r"))
            return
        self.app.skip(task, actor="h", reason="r")
        model.state, model.pending, model.claimed = "SKIPPED", None, None

    @rule(task=st.sampled_from(TASKS), actor=st.sampled_from(["ann", "bob"]))
    def claim(self, task: str, actor: str) -> None:
        model = self.models[task]
        if model.state != "HAND_OFF" or model.claimed is not None:
            self._expect_illegal(lambda: self.app.claim_handoff(task, actor=actor))
            return
        self.app.claim_handoff(task, actor=actor)
        model.claimed = actor

    @rule(
        task=st.sampled_from(TASKS),
        resolution=st.sampled_from(["return", "complete", "skip"]),
    )
    def resolve(self, task: str, resolution: ResolutionName) -> None:
        model = self.models[task]

        def call() -> object:
            return self.app.resolve_handoff(
                task, actor="ann", resolution=resolution, reason="r"
            )

        if model.state != "HAND_OFF" or model.claimed is None:
            self._expect_illegal(call)
            return
        call()
        model.claimed = None
        model.state = {"return": "RUNNING", "complete": "COMPLETED", "skip": "SKIPPED"}[
            resolution
        ]

    # ------------------------------------------------------------- invariants

    @invariant()
    def aggregates_match_the_model_and_the_store(self) -> None:
        fresh = RecoveryService(
            env={"SQLITE_DBNAME": self.db, "AGGREGATE_CACHE_MAXSIZE": ""}
        )
        try:
            for task, model in self.models.items():
                live: Task = self.app.repository.get(Task.create_id(task))
                reloaded: Task = fresh.repository.get(Task.create_id(task))
                assert reloaded == live
                assert live.state == model.state
                assert live.consecutive_failures == model.count
                assert live.lessons == model.lessons
                assert live.claimed_by == model.claimed
                cap = self.policy.failure_history_cap
                assert len(live.failures) == min(model.count, cap)
                pending = live.pending_session
                assert (pending.reason if pending else None) == model.pending
        finally:
            fresh.close()

    @invariant()
    def read_models_match_the_model(self) -> None:
        index = {t.task_id: t for t in self.app.tasks()}
        sessions = {s.task_id: s.reason for s in self.app.pending_sessions()}
        queue = {e.payload.task_id: e.claimed_by for e in self.app.handoff_queue()}
        for task, model in self.models.items():
            assert index[task].state == model.state
            assert index[task].consecutive_failures == model.count
            gate = self.app.gate_status(task)
            assert gate.state == model.state
            assert gate.triggered is (model.pending is not None)
            assert gate.reason == model.pending
            assert sessions.get(task) == model.pending
            if model.state == "HAND_OFF":
                assert queue[task] == model.claimed
            else:
                assert task not in queue
            lessons = self.app.lessons(task)
            assert [le.failed_strategy for le in lessons] == model.last_logged
            assert self.app.failure_report(task).failure_count == model.count
        run = self.app.run_state("r1")
        n1 = self.models["n1"]
        expected = (
            "COMPLETED"
            if n1.state in {"COMPLETED", "SKIPPED"}
            else "PAUSED"
            if n1.state in WAITING
            else "RUNNING"
        )
        assert run.status == expected


LadderMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_ladder = LadderMachine.TestCase
