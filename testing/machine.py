"""``RecoveryMachine``: a hypothesis state machine that drives a referee with
random commands and checks it against :class:`LadderModel` after each one."""

from __future__ import annotations

import inspect
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from devs.adapters import config
from devs.domain.application import RecoveryService
from devs.domain.chart import TaskState, destination
from devs.domain.errors import IllegalTransition
from devs.domain.names import Resolution
from devs.domain.policy import Policy
from devs.domain.task import RESOLUTION_TRIGGERS, Task
from devs.domain.values import RESOLUTIONS
from devs.testing.model import Command, Expected, LadderModel
from devs.testing.strategies import (
    actors,
    outputs,
    policies,
    strategy_texts,
    task_ids,
)

MAX_TASKS = 3
HUMAN_EVENTS = frozenset(
    {"Resumed", "Rewound", "Skipped", "HandoffClaimed", "HandoffResolved"}
)


def memory_env() -> dict[str, str]:
    """The ``env`` of a fresh in-memory store (``devs.adapters.config.memory_env``):
    eventsourcing's SQLite recorders and the same read models (the same SQL) in
    a database of this process alone, shared by the services opened on this
    env, gone with the last of them. It never follows ``DEVS_DATABASE_URL``
    from the environment."""
    return config.memory_env()


def memory_service(policy: Policy) -> RecoveryService:
    """A fresh service whose log and read models live in memory: the
    machine's and the plugin's default (no file, faster)."""
    return config.open_service(env=memory_env(), policy=policy)


def sqlite_service(policy: Policy) -> RecoveryService:
    """A fresh service on a new SQLite file in a temporary directory, removed
    when the service is garbage collected."""
    directory = tempfile.mkdtemp(prefix="devs-testing-")
    service = config.open_service(
        config.Settings(db=str(Path(directory) / "devs.sqlite"), database_url=None),
        policy=policy,
    )
    weakref.finalize(service, shutil.rmtree, directory, True)
    return service


def _make(factory: Callable[..., Any], policy: Policy) -> tuple[Any, bool]:
    """Call ``factory`` with the policy if it takes one; whether it did."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable: try with it
        return factory(policy), True
    if parameters:
        return factory(policy), True
    return factory(), False


_CALLS: dict[str, Callable[[Any, str, Command], Any]] = {
    "begin_attempt": lambda s, t, c: s.begin_attempt(t, c.text),
    "record_gate": lambda s, t, c: s.record_gate(t, c.code, output=c.text),
    "report_entropy": lambda s, t, c: s.report_entropy(t, c.score),
    "log_lesson": lambda s, t, c: s.log_lesson(t, c.text, "root cause: it failed"),
    "resume": lambda s, t, c: s.resume(t, actor=c.actor, reason="go on"),
    "rewind": lambda s, t, c: s.rewind(t, actor=c.actor, reason="start over"),
    "skip": lambda s, t, c: s.skip(t, actor=c.actor, reason="not worth it"),
    "claim": lambda s, t, c: s.claim_handoff(t, actor=c.actor),
    "resolve": lambda s, t, c: s.resolve_handoff(
        t, actor=c.actor, resolution=c.resolution, reason="done by hand"
    ),
}

_task = st.integers(0, MAX_TASKS - 1)


class RecoveryMachine(RuleBasedStateMachine):
    """Random commands against a referee, checked against the ladder's model.

    Subclass it and set ``make_service`` to run it against your backend or
    your wrapper of the referee (the default, :func:`memory_service`, is a
    service in memory; :func:`sqlite_service` one on a file): a callable
    that takes the ``Policy`` hypothesis drew and returns a fresh service
    deciding by it (a callable
    without parameters is called as it is, and the model then follows the
    policy its first task reports). The service needs the methods of
    ``RecoveryService`` the rules and invariants call (``HttpRecoveryClient``
    has them). ``RecoveryMachine.TestCase`` runs under pytest or unittest.

    The invariants (docs/testing.md) run after every step; ``verify()`` and
    ``replay_check()``, which read the whole store, run every
    ``deep_checks_every`` steps and when the run ends.
    """

    make_service: ClassVar[Callable[..., Any]] = memory_service
    deep_checks_every: ClassVar[int] = 10
    deep_checks: ClassVar[bool] = True
    """Whether to run ``verify()`` and ``replay_check()`` at all (they read the
    whole store: off, a long search and its shrinking go several times
    faster, and the per-step invariants still hold every command)."""
    ids: ClassVar[st.SearchStrategy[str]] = task_ids()
    """The task ids drawn (narrow it for a service that accepts fewer)."""

    def __init__(self) -> None:
        super().__init__()
        self._service: Any = None
        self.model = LadderModel(Policy())
        self.steps = 0
        self.touched: set[str] = set()
        """The tasks the last command went to: checked after it (every task
        is, every ``deep_checks_every`` steps and at the end)."""

    @property
    def service(self) -> Any:
        assert self._service is not None, "the machine has not started"
        return self._service

    # ---------------------------------------------------------------- start

    @initialize(policy=policies(), data=st.data())
    def start(self, policy: Policy, data: st.DataObject) -> None:
        ids = data.draw(
            st.lists(type(self).ids, min_size=1, max_size=MAX_TASKS, unique=True),
            label="ids",
        )
        self.begin(policy, ids)

    def begin(self, policy: Policy, ids: list[str]) -> None:
        """Make the service under ``policy`` and start the tasks ``ids``."""
        # Read off the class: a function set there is not bound to the machine.
        factory: Callable[..., Any] = type(self).make_service
        self._service, took_policy = _make(factory, policy)
        for task_id in ids:
            summary = self.service.start_task(task_id)
            if not took_policy and not self.model.tasks:
                policy = summary.policy
            assert summary.policy == policy, (
                f"task {task_id!r} started under {summary.policy!r}, "
                f"not the policy drawn, {policy!r}"
            )
            self.model.policy = policy
            self.model.start(task_id)
        self.touched = set(self.model.tasks)

    def teardown(self) -> None:
        try:
            if self._service is not None:
                self.touched = set(self.model.tasks)  # every task, once more
                self.the_task_is_the_models()
                self.the_store_replays_to_the_live_task()
                self.every_transition_is_the_charts()
                self._deep_checks()
        finally:
            if self._service is not None:
                self.service.close()

    # ---------------------------------------------------------------- rules

    def run(self, command: Command) -> None:
        """Send ``command`` to the service and compare its answer with the
        model's."""
        self.steps += 1
        expected = self.model.apply(command)
        task_id = self.model.task_id(command.task)
        self.touched = {task_id}
        call = _CALLS[command.name]
        if expected is None:
            try:
                call(self.service, task_id, command)
            except IllegalTransition:
                return
            raise AssertionError(
                f"{command!r} was accepted by task {task_id!r}; the ladder "
                "refuses it in the state it is in"
            )
        answer = call(self.service, task_id, command)
        self._check_answer(command, task_id, expected, answer)

    @staticmethod
    def _check_answer(
        command: Command, task_id: str, expected: Expected, answer: Any
    ) -> None:
        where = f"{command!r} on task {task_id!r}"
        if command.name == "log_lesson":  # a Lesson: what was learned
            assert answer.task_id == task_id, where
            return
        assert answer.state == expected.state, (
            f"{where}: answered state {answer.state}, the ladder says {expected.state}"
        )
        count = getattr(answer, "consecutive_failures", None)
        if count is not None:
            assert count == expected.count, (
                f"{where}: answered {count} consecutive failures, the ladder "
                f"says {expected.count}"
            )
        if expected.blocked is not None:
            assert answer.blacklisted is expected.blocked, (
                f"{where}: blacklisted={answer.blacklisted}, the ladder says "
                f"{expected.blocked}"
            )
        if expected.triggered is not None:
            assert answer.triggered is expected.triggered, (
                f"{where}: triggered={answer.triggered}, the ladder says "
                f"{expected.triggered}"
            )

    @rule(task=_task, strategy=strategy_texts())
    def begin_attempt(self, task: int, strategy: str) -> None:
        self.run(Command("begin_attempt", task, text=strategy))

    @rule(
        task=_task,
        code=st.sampled_from([1, 2, 0, None]) | st.integers(-255, 255),
        output=outputs(),
    )
    def record_gate(self, task: int, code: int | None, output: str) -> None:
        self.run(Command("record_gate", task, text=output, code=code))

    @rule(task=_task, score=st.floats(0.0, 1.0) | st.sampled_from([0.0, 0.75, 1.0]))
    def report_entropy(self, task: int, score: float) -> None:
        self.run(Command("report_entropy", task, score=score))

    @rule(task=_task, strategy=strategy_texts())
    def log_lesson(self, task: int, strategy: str) -> None:
        self.run(Command("log_lesson", task, text=strategy))

    @rule(task=_task, actor=actors())
    def resume(self, task: int, actor: str) -> None:
        self.run(Command("resume", task, actor=actor))

    @rule(task=_task, actor=actors())
    def rewind(self, task: int, actor: str) -> None:
        self.run(Command("rewind", task, actor=actor))

    @rule(task=_task, actor=actors())
    def skip(self, task: int, actor: str) -> None:
        self.run(Command("skip", task, actor=actor))

    @rule(task=_task, actor=actors())
    def claim(self, task: int, actor: str) -> None:
        self.run(Command("claim", task, actor=actor))

    @rule(
        task=_task,
        actor=actors(),
        resolution=st.sampled_from(RESOLUTIONS),
    )
    def resolve(self, task: int, actor: str, resolution: str) -> None:
        self.run(Command("resolve", task, actor=actor, resolution=resolution))  # type: ignore[arg-type]

    # ----------------------------------------------------------- invariants

    @invariant()
    def the_task_is_the_models(self) -> None:
        """Each task, as the service shows it, is the model's."""
        cap = self.model.policy.failure_history_cap
        for task_id, model in self._checked():
            summary = self.service.task(task_id)
            where = f"task {task_id!r}"
            assert summary.state == model.state, (
                f"{where} is {summary.state}, the ladder says {model.state}"
            )
            assert summary.consecutive_failures == model.count, (
                f"{where} counts {summary.consecutive_failures} failures, the "
                f"ladder {model.count}"
            )
            assert list(summary.lessons) == model.lessons, where
            assert summary.claimed_by == model.claimed, where
            pending = summary.pending_session
            assert (pending.reason if pending else None) == model.pending, (
                f"{where} waits for {pending.reason if pending else None}, the "
                f"ladder says {model.pending}"
            )
            assert len(summary.failure_history) == min(model.count, cap), where
            stuck = summary.stuck.score if summary.stuck is not None else None
            assert stuck == model.stuck, (
                f"{where} has stuck score {stuck}, the ladder {model.stuck}"
            )
            assert summary.version == model.events, (
                f"{where} recorded {summary.version} events, the ladder "
                f"{model.events} (a decision lost or recorded twice)"
            )

    @invariant()
    def the_store_replays_to_the_live_task(self) -> None:
        """Each task replayed from its events equals the task the service
        decides on."""
        for task_id, _ in self._checked():
            live = self.service.task(task_id)
            replayed = self.service.state_at(task_id, live.version)
            assert replayed == live, f"task {task_id!r} replays otherwise"

    @invariant()
    def the_read_models_agree(self) -> None:
        """The read models say what the model says (all of them, folded from
        the log, every ``deep_checks_every`` steps)."""
        index = {entry.task_id: entry for entry in self.service.tasks()}
        sessions = {s.task_id: s.reason for s in self.service.pending_sessions()}
        queue = {e.payload.task_id: e.claimed_by for e in self.service.handoff_queue()}
        for task_id, model in self._checked():
            where = f"task {task_id!r}"
            assert index[task_id].state == model.state, where
            assert index[task_id].consecutive_failures == model.count, where
            assert sessions.get(task_id) == model.pending, where
            gate = self.service.gate_status(task_id)
            assert (gate.state, gate.reason) == (model.state, model.pending), where
            if model.state == "HAND_OFF":
                assert queue.get(task_id, "missing") == model.claimed, where
            else:
                assert task_id not in queue, where
            lessons = [
                lesson.failed_strategy for lesson in self.service.lessons(task_id)
            ]
            assert lessons == model.logged, where
            assert self.service.failure_report(task_id).failure_count == model.count
        if self._deep_step():
            self._deep_checks()

    @invariant()
    def every_transition_is_the_charts(self) -> None:
        """Each recorded event moved its task as the state chart allows, and
        every human action is recorded with its actor."""
        for task_id, model in self._checked():
            state = TaskState.RUNNING
            humans: list[tuple[str, str]] = []
            for entry in self.service.history(task_id):
                if entry.event == "Started":
                    assert entry.state == TaskState.RUNNING
                    continue
                event_class = getattr(Task, entry.event)
                if entry.event == "HandoffResolved":
                    trigger = RESOLUTION_TRIGGERS[
                        Resolution(entry.changes["resolution"])
                    ]
                else:
                    trigger = event_class.trigger
                allowed = destination(trigger, state)  # IllegalTransition if not
                assert entry.state == allowed, (
                    f"task {task_id!r} version {entry.version}: {entry.event} "
                    f"moved it from {state} to {entry.state}; the chart says "
                    f"{allowed}"
                )
                state = TaskState(entry.state)
                if entry.event in HUMAN_EVENTS:
                    humans.append((entry.event, entry.changes.get("actor", "")))
            assert humans == model.humans, (
                f"task {task_id!r}: humans recorded {humans}, the ladder {model.humans}"
            )

    def _deep_step(self) -> bool:
        return self.steps % type(self).deep_checks_every == 0

    def _checked(self) -> list[tuple[str, Any]]:
        """The tasks to check after this step: those the command went to, or
        every task on a deep step."""
        return [
            (task_id, model)
            for task_id, model in self.model.tasks.items()
            if self._deep_step() or task_id in self.touched
        ]

    def _deep_checks(self) -> None:
        if not type(self).deep_checks:
            return
        verified = self.service.verify()
        assert verified.ok, verified.problems
        replayed = self.service.replay_check()
        assert replayed.ok, replayed.differences


__all__ = ["RecoveryMachine", "memory_env", "memory_service", "sqlite_service"]
