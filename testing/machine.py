"""``RecoveryMachine``: a hypothesis state machine that drives a referee with
random commands and checks it against :class:`LadderModel` after each one."""

from __future__ import annotations

import functools
import inspect
import logging
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
)

from devs.adapters import config
from devs.domain.application import RecoveryService
from devs.domain.chart import TaskState, destination
from devs.domain.errors import Claimed, IllegalTransition
from devs.domain.names import HumanAction, Resolution
from devs.domain.policy import Policy
from devs.domain.task import HUMAN_EVENTS as EVENT_OF_ACTION
from devs.domain.task import RESOLUTION_TRIGGERS, Task
from devs.domain.values import RESOLUTIONS
from devs.testing.model import WAITING, Command, Expected, LadderModel
from devs.testing.script import LESSON_CAUSE, REASONS, Script, policy_code
from devs.testing.strategies import (
    actors,
    outputs,
    policies,
    strategy_texts,
    task_ids,
)

MAX_TASKS = 3
HUMAN_EVENTS = frozenset(event.__name__ for event in EVENT_OF_ACTION.values())


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


SEARCH_STEPS = 20
"""The kit's ``stateful_step_count``: commands in one example (hypothesis'
default is 50). The ladder stops within a few commands at small thresholds,
and an example half as long is shrunk in less than half the time."""


def search_settings(**changes: Any) -> settings:
    """Hypothesis settings for a search with :class:`RecoveryMachine`: the
    machine's own (a subclass's ``TestCase`` starts with them), with
    ``changes`` (any :class:`hypothesis.settings` argument) on top.

    - ``stateful_step_count=20`` (:data:`SEARCH_STEPS`): the work of
      shrinking grows with the length of an example (``max_examples`` is
      hypothesis' or the active profile's: the starter passes 200);
    - ``report_multiple_bugs=False``: one failure, shrunk, rather than every
      distinct failure the search met, each shrunk in turn;
    - ``phases`` without ``explain`` (a replay of variations of the shrunk
      example to say which lines only it ran);
    - ``deadline=None``: a step writes to a database; its time is not the
      property;
    - ``suppress_health_check``: all, as hypothesis' own ``TestCase`` of a
      state machine does (a step writes to a database; the strategies filter
      texts through the service's validators).
    """
    chosen: dict[str, Any] = {
        "stateful_step_count": SEARCH_STEPS,
        "report_multiple_bugs": False,
        "phases": [phase for phase in Phase if phase is not Phase.explain],
        "deadline": None,
        "suppress_health_check": list(HealthCheck),
    }
    chosen.update(changes)
    return settings(**chosen)


_CALLS: dict[str, Callable[[Any, str, Command], Any]] = {
    "begin_attempt": lambda s, t, c: s.begin_attempt(t, c.text),
    "record_gate": lambda s, t, c: s.record_gate(t, c.code, output=c.text),
    "report_entropy": lambda s, t, c: s.report_entropy(t, c.score),
    "log_lesson": lambda s, t, c: s.log_lesson(t, c.text, LESSON_CAUSE),
    "resume": lambda s, t, c: s.resume(t, actor=c.actor, reason=REASONS["resume"]),
    "rewind": lambda s, t, c: s.rewind(t, actor=c.actor, reason=REASONS["rewind"]),
    "skip": lambda s, t, c: s.skip(t, actor=c.actor, reason=REASONS["skip"]),
    "claim": lambda s, t, c: s.claim_handoff(t, actor=c.actor),
    "resolve": lambda s, t, c: s.resolve_handoff(
        t, actor=c.actor, resolution=c.resolution, reason=REASONS["resolve"]
    ),
    "release": lambda s, t, c: s.release(t, actor=c.actor),
    "take_over": lambda s, t, c: s.take_over(
        t, actor=c.actor, reason=REASONS["take_over"]
    ),
}
"""How each command is sent (:mod:`devs.testing.script` writes the same calls
out)."""

_task = st.integers(0, MAX_TASKS - 1)
HUMAN_ACTIONS = tuple(action.value for action in HumanAction)

_SHRINKING: set[type[Any]] = set()
"""The machine classes one of whose examples failed, in the search running,
a per-command check (or a check when it ended, but ``verify()`` and
``replay_check()``): hypothesis is then shrinking that failure, and their deep
checks, which could only find another one, are skipped (the failure replays
without them). ``TestCase.runTest`` empties it for its class before and after
its search (:func:`_one_search`)."""


def _one_search(machine: type[RecoveryMachine]) -> None:
    """Give ``machine.TestCase`` the kit's settings, and a ``runTest`` whose
    search starts and ends with the deep checks on."""
    case = machine.TestCase
    case.settings = search_settings()
    search = case.runTest

    @functools.wraps(search)  # keeps hypothesis' marks on it
    def run_test(self: Any) -> None:
        _SHRINKING.discard(machine)
        try:
            search(self)
        finally:
            _SHRINKING.discard(machine)

    case.runTest = run_test  # type: ignore[method-assign]


@contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    """The ``devs.decisions`` log silenced for the block (if ``enabled``),
    its level given back after it, however it ends."""
    if not enabled:
        yield
        return
    decisions = logging.getLogger("devs.decisions")
    before = decisions.level
    decisions.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        decisions.setLevel(before)


class RecoveryMachine(RuleBasedStateMachine):
    """Random commands against a referee, checked against the ladder's model.

    Subclass it and set ``make_service`` to run it against your backend or
    your wrapper of the referee (the default, :func:`memory_service`, is a
    service in memory; :func:`sqlite_service` one on a file): a callable
    that takes the ``Policy`` hypothesis drew and returns a fresh service
    deciding by it (a callable
    without parameters is called as it is, and the model then follows the
    policy its first task reports). The service needs the methods of
    ``RecoveryService`` the rules and checks call (``HttpRecoveryClient``
    has them). ``RecoveryMachine.TestCase`` runs under pytest or unittest,
    with :func:`search_settings` (a subclass's too).

    The checks (docs/testing.md) run after every command, on the task it went
    to; ``verify()`` and ``replay_check()``, which read the whole store, run
    when an example ends (and every ``deep_checks_every`` commands, if set).
    A failure adds, after hypothesis' steps, the same steps as a test to paste
    (:class:`~devs.testing.script.Script`).
    """

    make_service: ClassVar[Callable[..., Any]] = memory_service
    store_checks_every: ClassVar[int | None] = None
    """Every how many commands the task's history is also walked against the
    chart, the task replayed from its events and read in the read models
    (``1``: after every command; ``None``: when an example ends). They cost
    about four times the per-command check."""
    deep_checks_every: ClassVar[int | None] = None
    """Every how many commands every task and the whole store are checked
    (``verify()``, ``replay_check()``); ``None``: when an example ends."""
    deep_checks: ClassVar[bool] = True
    """Whether to run ``verify()`` and ``replay_check()`` at all (they read the
    whole store: off, a long search and its shrinking go faster, and the
    per-command checks still hold every command)."""
    quiet: ClassVar[bool] = True
    """Whether the ``devs.decisions`` log is silenced while an example runs
    (one line per decision: hundreds in a captured log, none of them the
    failure)."""
    ids: ClassVar[st.SearchStrategy[str]] = task_ids()
    """The task ids drawn (narrow it for a service that accepts fewer)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _one_search(cls)

    def __init__(self) -> None:
        super().__init__()
        self._service: Any = None
        self.model = LadderModel(Policy())
        self.steps = 0
        self.touched: set[str] = set()
        """The tasks the last command went to: checked after it (every task
        is, on a deep step and at the end)."""
        self.script = Script(type(self))
        self.failed = False
        self._deep_now = False

    @property
    def service(self) -> Any:
        assert self._service is not None, "the machine has not started"
        return self._service

    # ---------------------------------------------------------------- start

    @initialize(
        policy=policies(),
        ids=st.runner().flatmap(
            lambda machine: st.lists(
                type(machine).ids, min_size=1, max_size=MAX_TASKS, unique=True
            )
        ),
    )
    def start(self, policy: Policy, ids: list[str]) -> None:
        self.begin(policy, ids)

    def begin(self, policy: Policy, ids: list[str]) -> None:
        """Make the service under ``policy`` and start the tasks ``ids``."""
        with _quiet(type(self).quiet):
            self._begin(policy, ids)

    def _begin(self, policy: Policy, ids: list[str]) -> None:
        # Read off the class: a function set there is not bound to the machine.
        factory: Callable[..., Any] = type(self).make_service
        self._service, took_policy = _make(factory, policy)
        self.script.start(policy, ids, took_policy=took_policy)
        for task_id in ids:
            summary = self.service.start_task(task_id)
            if not took_policy and not self.model.tasks:
                policy = summary.policy
            self._expect(
                f"service.task({task_id!r}).policy",
                summary.policy,
                policy,
                f"task {task_id!r} started under {summary.policy!r}, "
                f"not the policy drawn, {policy!r}",
                expected_code=policy_code(policy),
            )
            self.model.policy = policy
            self.model.start(task_id)
        self.touched = set(self.model.tasks)
        self.check()

    def teardown(self) -> None:
        with _quiet(type(self).quiet):
            try:
                if self._service is not None and not self.failed:
                    self.touched = set(self.model.tasks)  # every task, once more
                    self.check(deep=True)
            finally:
                if self.failed:
                    with suppress(InvalidArgument):  # outside a hypothesis test
                        note(
                            "The same steps as a test to paste (plain calls on "
                            "a service):\n\n" + self.script.text()
                        )
                if self._service is not None:
                    self.service.close()

    # ---------------------------------------------------------------- rules

    def run(self, command: Command) -> None:
        """Send ``command`` to the service, compare its answer with the
        model's, then check the task it went to."""
        with _quiet(type(self).quiet):
            self._run(command)

    def _run(self, command: Command) -> None:
        self.steps += 1
        task_id = self.model.task_id(command.task)
        before = self.model.tasks[task_id].state
        expected = self.model.apply(command)
        self.touched = {task_id}
        call = _CALLS[command.name]
        if expected is None:
            try:
                call(self.service, task_id, command)
            except (IllegalTransition, Claimed):  # the chart's, or a claim's
                self.script.step(command, task_id, refused=True)
                self.check()
                return
            except BaseException as error:
                self.script.step(command, task_id, refused=True)
                self._unexpected(error)
                raise
            self._fail()
            self.script.failed_on_refusal(command, task_id, before)
            raise AssertionError(
                f"{command!r} was accepted by task {task_id!r} in state {before}; "
                "the ladder refuses it there"
            )
        self.script.step(command, task_id, refused=False)
        try:
            answer = call(self.service, task_id, command)
        except BaseException as error:
            self._unexpected(error)
            raise
        self._check_answer(command, task_id, expected, answer)
        self.check()

    def _check_answer(
        self, command: Command, task_id: str, expected: Expected, answer: Any
    ) -> None:
        where = f"{command!r} on task {task_id!r}"
        if command.name == "log_lesson":  # a Lesson: what was learned
            self._answer_is("task_id", answer.task_id, task_id, where)
            return
        self._answer_is(
            "state",
            answer.state,
            expected.state,
            f"{where}: answered state {answer.state}, the ladder says {expected.state}",
        )
        count = getattr(answer, "consecutive_failures", None)
        if count is not None:
            self._answer_is(
                "consecutive_failures",
                count,
                expected.count,
                f"{where}: answered {count} consecutive failures, the ladder "
                f"says {expected.count}",
            )
        if expected.blocked is not None:
            self._answer_is(
                "blacklisted",
                answer.blacklisted,
                expected.blocked,
                f"{where}: blacklisted={answer.blacklisted}, the ladder says "
                f"{expected.blocked}",
            )
        if expected.triggered is not None:
            self._answer_is(
                "triggered",
                answer.triggered,
                expected.triggered,
                f"{where}: triggered={answer.triggered}, the ladder says "
                f"{expected.triggered}",
            )

    def _answer_is(self, field: str, actual: Any, expected: Any, message: str) -> None:
        """The answer's ``field`` is ``expected``; the script asserts it of
        the last call."""
        if actual == expected:
            return
        self._fail()
        last = self.script.lines.pop()
        self.script.lines.append(f"answer = {last}")
        self.script.failed(message, f"answer.{field}", _plain(expected))
        raise AssertionError(message)

    def _unexpected(self, error: BaseException) -> None:
        """An exception no check raised (a command or a query that failed):
        the example failed there."""
        if not self.failed:
            self._fail()
            self.script.failed(f"{type(error).__name__}: {error}", raises=error)

    def _fail(self) -> None:
        """Mark this example failed (the script is then noted)."""
        self.failed = True
        if not self._deep_now:
            _SHRINKING.add(type(self))

    def _expect(
        self,
        probe: str,
        actual: Any,
        expected: Any,
        message: str,
        *,
        expected_code: str | None = None,
    ) -> None:
        """``actual`` (what ``probe``, Python source on ``service``, reads) is
        ``expected``; if not, the failure, with ``assert probe == expected``
        for the script."""
        if actual == expected:
            return
        self._fail()
        self.script.failed(
            message, probe, _plain(expected), expected_code=expected_code
        )
        raise AssertionError(message)

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

    @rule(
        task=_task,
        action=st.sampled_from(HUMAN_ACTIONS),
        actor=actors(),
        resolution=st.sampled_from(RESOLUTIONS),
    )
    def answer(self, task: int, action: str, actor: str, resolution: str) -> None:
        """A human's answer (``resume``, ``rewind``, ``skip``, ``claim``,
        ``resolve``, ``release`` or ``take_over``): to a task that waits for a
        human when one does (``task`` picks among them), else to task
        ``task``, which refuses most. One rule for them all, so that an
        example spends its commands reaching the ladder's stops rather than on
        refusals; the actors vary, so claims hold stops against others."""
        waiting = [
            index
            for index, model in enumerate(self.model.tasks.values())
            if model.state in WAITING
        ]
        target = waiting[task % len(waiting)] if waiting else task
        self.run(
            Command(action, target, actor=actor, resolution=resolution)  # type: ignore[arg-type]
        )

    # --------------------------------------------------------------- checks

    def check(self, *, deep: bool = False) -> None:
        """The checks of docs/testing.md on the tasks the last command went
        to: the task after every command, its history, its replay and the
        read models every ``store_checks_every`` commands; every task, with
        ``verify()`` and ``replay_check()``, on a deep step (``deep``, or every
        ``deep_checks_every`` commands)."""
        deep = deep or _every(type(self).deep_checks_every, self.steps)
        if deep:
            self.touched = set(self.model.tasks)
        try:
            self.the_task_is_the_models()
            if deep or _every(type(self).store_checks_every, self.steps):
                self.every_transition_is_the_charts()
                self.the_store_replays_to_the_live_task()
                self.the_read_models_agree()
            if deep:
                self._deep_checks()
        except BaseException as error:
            self._unexpected(error)  # an assertion failed already says so
            raise

    def the_task_is_the_models(self) -> None:
        """Each task, as the service shows it, is the model's."""
        cap = self.model.policy.failure_history_cap
        for task_id, model in self._checked():
            summary = self.service.task(task_id)
            where = f"task {task_id!r}"
            probe = f"service.task({task_id!r})"
            self._expect(
                f"{probe}.state",
                summary.state,
                model.state,
                f"{where} is {summary.state}, the ladder says {model.state}",
            )
            self._expect(
                f"{probe}.consecutive_failures",
                summary.consecutive_failures,
                model.count,
                f"{where} counts {summary.consecutive_failures} failures, the "
                f"ladder {model.count}",
            )
            self._expect(
                f"list({probe}.lessons)",
                list(summary.lessons),
                model.lessons,
                f"{where} has lessons {list(summary.lessons)!r:.200}, the ladder "
                f"{model.lessons!r:.200}",
            )
            self._expect(
                f"{probe}.claimed_by",
                summary.claimed_by,
                model.claimed,
                f"{where} is claimed by {summary.claimed_by!r}, the ladder says "
                f"{model.claimed!r}",
            )
            pending = summary.pending_session
            waits = pending.reason if pending else None
            self._expect(
                f"getattr({probe}.pending_session, 'reason', None)",
                waits,
                model.pending,
                f"{where} waits for {waits}, the ladder says {model.pending}",
            )
            kept = min(model.count, cap)
            self._expect(
                f"len({probe}.failure_history)",
                len(summary.failure_history),
                kept,
                f"{where} keeps {len(summary.failure_history)} failures, the "
                f"ladder {kept}",
            )
            stuck = summary.stuck.score if summary.stuck is not None else None
            self._expect(
                f"getattr({probe}.stuck, 'score', None)",
                stuck,
                model.stuck,
                f"{where} has stuck score {stuck}, the ladder {model.stuck}",
            )
            self._expect(
                f"{probe}.version",
                summary.version,
                model.events,
                f"{where} recorded {summary.version} events, the ladder "
                f"{model.events} (a decision lost or recorded twice)",
            )

    def the_store_replays_to_the_live_task(self) -> None:
        """Each task replayed from its events equals the task the service
        decides on."""
        for task_id, _ in self._checked():
            live = self.service.task(task_id)
            replayed = self.service.state_at(task_id, live.version)
            self._expect(
                f"service.state_at({task_id!r}, {live.version})",
                replayed,
                live,
                f"task {task_id!r} replays otherwise",
                expected_code=f"service.task({task_id!r})",
            )

    def the_read_models_agree(self) -> None:
        """The read models say what the model says."""
        index = {entry.task_id: entry for entry in self.service.tasks()}
        sessions = {s.task_id: s.reason for s in self.service.pending_sessions()}
        queue = {e.payload.task_id: e.claimed_by for e in self.service.handoff_queue()}
        for task_id, model in self._checked():
            where = f"task {task_id!r}"
            t = repr(task_id)
            entry = index.get(task_id)
            self._expect(
                f"{{e.task_id: e.state for e in service.tasks()}}.get({t})",
                entry.state if entry else None,
                model.state,
                f"{where}: the task index says {entry.state if entry else None}, "
                f"the ladder {model.state}",
            )
            assert entry is not None
            self._expect(
                f"{{e.task_id: e.consecutive_failures for e in service.tasks()}}[{t}]",
                entry.consecutive_failures,
                model.count,
                f"{where}: the task index counts {entry.consecutive_failures} "
                f"failures, the ladder {model.count}",
            )
            self._expect(
                f"{{s.task_id: s.reason for s in service.pending_sessions()}}.get({t})",
                sessions.get(task_id),
                model.pending,
                f"{where}: pending sessions say {sessions.get(task_id)}, the "
                f"ladder {model.pending}",
            )
            gate = self.service.gate_status(task_id)
            self._expect(
                f"(service.gate_status({t}).state, service.gate_status({t}).reason)",
                (gate.state, gate.reason),
                (model.state, model.pending),
                f"{where}: the gate status says {(gate.state, gate.reason)}, the "
                f"ladder {(model.state, model.pending)}",
            )
            claimed = queue.get(task_id, "missing")
            wanted = model.claimed if model.state == "HAND_OFF" else "missing"
            self._expect(
                f"{{e.payload.task_id: e.claimed_by for e in "
                f"service.handoff_queue()}}.get({t}, 'missing')",
                claimed,
                wanted,
                f"{where}: the hand-off queue holds {claimed!r}, the ladder says "
                f"{wanted!r}",
            )
            lessons = [
                lesson.failed_strategy for lesson in self.service.lessons(task_id)
            ]
            self._expect(
                f"[lesson.failed_strategy for lesson in service.lessons({t})]",
                lessons,
                model.logged,
                f"{where}: the lessons read model holds {lessons!r:.200}, the "
                f"ladder {model.logged!r:.200}",
            )
            reported = self.service.failure_report(task_id).failure_count
            self._expect(
                f"service.failure_report({t}).failure_count",
                reported,
                model.count,
                f"{where}: the failure report counts {reported}, the ladder "
                f"{model.count}",
            )

    def every_transition_is_the_charts(self) -> None:
        """Each recorded event moved its task as the state chart allows, and
        every human action is recorded with its actor."""
        for task_id, model in self._checked():
            state = TaskState.RUNNING
            humans: list[tuple[str, str]] = []
            for entry in self.service.history(task_id):
                if entry.event == "Started":
                    self._expect(
                        f"service.history({task_id!r})[0].state",
                        entry.state,
                        TaskState.RUNNING,
                        f"task {task_id!r} started in {entry.state}",
                    )
                    continue
                event_class = getattr(Task, entry.event)
                if entry.event == "HandoffResolved":
                    trigger = RESOLUTION_TRIGGERS[
                        Resolution(entry.changes["resolution"])
                    ]
                else:
                    trigger = event_class.trigger
                try:
                    allowed = destination(trigger, state)
                except IllegalTransition as refused:
                    self._fail()
                    self.script.failed(
                        f"task {task_id!r} version {entry.version}: {entry.event} "
                        f"from {state}, which the chart refuses: {refused}",
                        f"service.history({task_id!r})[{entry.version - 1}].event",
                        entry.event,
                        differs=True,
                    )
                    raise
                self._expect(
                    f"service.history({task_id!r})[{entry.version - 1}].state",
                    entry.state,
                    allowed,
                    f"task {task_id!r} version {entry.version}: {entry.event} "
                    f"moved it from {state} to {entry.state}; the chart says "
                    f"{allowed}",
                )
                state = TaskState(entry.state)
                if entry.event in HUMAN_EVENTS:
                    humans.append((entry.event, entry.changes.get("actor", "")))
            self._expect(
                f"[(e.event, e.changes.get('actor', '')) for e in "
                f"service.history({task_id!r}) if e.event in {sorted(HUMAN_EVENTS)!r}]",
                humans,
                model.humans,
                f"task {task_id!r}: humans recorded {humans}, the ladder "
                f"{model.humans}",
            )

    def _checked(self) -> list[tuple[str, Any]]:
        """The tasks to check now: those the last command went to."""
        return [
            (task_id, model)
            for task_id, model in self.model.tasks.items()
            if task_id in self.touched
        ]

    def _deep_checks(self) -> None:
        if not type(self).deep_checks or type(self) in _SHRINKING:
            return
        self._deep_now = True
        try:
            verified = self.service.verify()
            self._expect(
                "service.verify().ok",
                verified.ok,
                True,
                f"verify() found problems: {verified.problems!r:.300}",
            )
            replayed = self.service.replay_check()
            self._expect(
                "service.replay_check().ok",
                replayed.ok,
                True,
                f"replay_check() found differences: {replayed.differences!r:.300}",
            )
        finally:
            self._deep_now = False


def _every(every: int | None, steps: int) -> bool:
    """Whether step ``steps`` is one of every ``every``th (``None``: none)."""
    return every is not None and every > 0 and steps % every == 0


def _plain(value: Any) -> Any:
    """A value as the script writes it: an enum member as its value (the
    service's states compare equal to their names)."""
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return getattr(value, "value", value)


_one_search(RecoveryMachine)


__all__ = [
    "SEARCH_STEPS",
    "RecoveryMachine",
    "memory_env",
    "memory_service",
    "search_settings",
    "sqlite_service",
]
