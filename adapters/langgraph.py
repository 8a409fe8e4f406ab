"""devs-recovery inside a LangGraph graph (``pip install 'devs-recovery[langgraph]'``).

A :class:`Referee` gives a graph author nodes (``before_turn``, ``after_turn``,
``gate``) and a router (``route``) that suspend the graph with LangGraph's own
``interrupt()`` and resume on a :class:`HumanDecision` (docs/langgraph.md).
LangGraph runs an interrupted node again from its start, so every command a
node sends carries an idempotency key made of the thread, the node's task id
and the command's place in the node, and the test command runs in a ``@task``
whose result is checkpointed. ``service`` is a ``RecoveryService`` or a URL.

``Referee.watch(node)`` wraps the graph author's model node: the usage
(``usage_metadata``) of the AI messages it returns is recorded against the
task's budgets, and a usage that spends one suspends the graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict, TypeVar, cast

import orjson
from langchain_core.messages import AIMessage
from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
from langgraph.config import get_config
from langgraph.func import task
from langgraph.types import Command, interrupt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.sandbox import Isolation, check_allow_paths, run_gate, store_file
from devs.domain import (
    ActionResult,
    Claimed,
    GateDecision,
    IllegalTransition,
    InvalidInput,
    Outcome,
    OverBudget,
    RecoveryService,
    StaleAnswer,
    TaskSummary,
    UsageDecision,
)
from devs.domain.arguments import COMMANDS
from devs.domain.decisions import STATE_OUTCOMES
from devs.domain.names import (
    HAND_OFF_REQUIRED,
    HumanAction,
    HumanActionValue,
    SessionReason,
)
from devs.domain.redaction import secret_kind
from devs.domain.service import RecoveryApi
from devs.domain.signals import STOP_REASONS
from devs.domain.task import HUMAN_EVENTS
from devs.domain.values import ID_MAX, NAME_MAX, TOKENS_MAX, VERSION_MAX, refusal

T = TypeVar("T")
Route = Literal["proceed", "retry", "advance", "end"]
ROUTES: tuple[Route, ...] = ("proceed", "retry", "advance", "end")
Where = Literal["attempt", "entropy", "gate", "spend"]


Backend = RecoveryApi
"""What the referee needs of a service: the service's interface
(``devs.domain.service.RecoveryApi``), which ``RecoveryService`` and
``HttpRecoveryClient`` both have."""


class DevsState(TypedDict, total=False):
    """The keys the referee reads and writes; a graph's state extends it.

    ``task_id`` (read): the devs-recovery task this thread works on.
    ``strategy`` (read): the strategy of the coming turn (``before_turn``).
    ``directive`` (written): the blacklist directive for the prompt.
    ``devs`` (written): the referee's last word — ``route``, and what led
    there (``outcome``, ``session_id``, ``next_node``, ``decided_by``,
    ``rewind_to``…).
    """

    task_id: str
    strategy: str
    directive: str
    devs: dict[str, Any]


ANSWER_COMMANDS: dict[HumanActionValue, str] = {
    "resume": "resume",
    "rewind": "rewind",
    "skip": "skip",
    "claim": "claim",
    "release": "release",
    "take_over": "take_over",
    "resolve": "resolve_handoff",
}
"""The command each action of a human's answer records: its arguments
(:data:`devs.domain.arguments.COMMANDS`) are the answer's keys."""

_REQUESTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "claim": ("claim_handoff", ("task_id", "actor")),
    "resolve_handoff": (
        "resolve_handoff",
        ("task_id", "actor", "resolution", "reason"),
    ),
}
"""The idempotency requests of the answers whose words differ from their
command's model: what 0.1 recorded (a claim's old name, a resolution before
its reason)."""

NO_REASON = "(no reason given)"
"""An answer's ``reason`` when it gives none (as ``devs resume`` and the HTTP
API say it)."""


class _Answer(BaseModel):
    """Which answer a human gave."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    action: HumanActionValue = Field(
        description=(
            "`resume`, `rewind` or `skip` (an escalation or a pause), "
            "`resolve` (a hand-off), `claim`, `release` or `take_over` (any stop)"
        )
    )


def _answer_field(name: str) -> tuple[Any, Any]:
    """The answers' argument ``name`` as a decision holds it: the type, limits
    and description of the commands' field (one for all: ``actor`` is the
    same in each); required only if every answer requires it (``actor``),
    else left out: ``reason`` as :data:`NO_REASON`, the others null."""
    models = [COMMANDS[command] for command in ANSWER_COMMANDS.values()]
    info = next(m.model_fields[name] for m in models if name in m.model_fields)
    if all(
        name in m.model_fields and m.model_fields[name].is_required() for m in models
    ):
        return info.annotation, info
    kind: Any = info.annotation
    if info.metadata:
        kind = Annotated[(kind, *info.metadata)]
    if name == "reason":
        return kind, Field(default=NO_REASON, description=info.description)
    return kind | None, Field(default=None, description=info.description)


_ANSWER_FIELDS = dict.fromkeys(
    name
    for command in ANSWER_COMMANDS.values()
    for name in COMMANDS[command].model_fields
    if name != "task_id"  # the graph's: the state's task_id
)

HumanDecision: type[_Answer] = create_model(  # type: ignore[call-overload]
    "HumanDecision",
    __base__=_Answer,
    __doc__="""What ``Command(resume=...)`` carries when a human answers.

    ``resume``, ``rewind`` (optionally ``to_commit``) and ``skip`` answer an
    escalation or a pause; ``resolve`` (``resolution``: ``return``,
    ``complete`` or ``skip``) a hand-off. ``claim`` ("I'm on it"), ``release``
    and ``take_over`` hold or let go of any stop and suspend the graph again:
    while someone holds the claim, an answer by anyone else is refused
    (``Claimed``). ``if_version`` (the suspension's ``version``) makes the
    answer one for the task as it was shown: if it has moved on since, the
    answer is refused (``StaleAnswer``) and nothing is written.

    Its keys but ``action`` are the arguments of the commands the actions
    record (:data:`ANSWER_COMMANDS`): their types, limits and descriptions,
    so a value is refused in the words of the HTTP API and the MCP tools.
    """,
    **{name: _answer_field(name) for name in _ANSWER_FIELDS},
)


_ANSWERS: dict[str, tuple[str, ...]] = {
    "waiting": ("resume", "rewind", "skip"),
    "handoff": ("claim", "resolve"),
}


def suspension_payload(
    *,
    task_id: str,
    where: Where,
    reason: str,
    outcome: str,
    session_id: str | None,
    summary: TaskSummary,
    report: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON ``interrupt()`` carries: what a human needs to decide, and
    which answers it takes."""
    handoff = reason == HAND_OFF_REQUIRED
    payload: dict[str, Any] = {
        "devs": "suspended",
        "task_id": task_id,
        "where": where,
        "reason": str(reason),
        "outcome": str(outcome),
        "session_id": session_id,
        "state": str(summary.state),
        "consecutive_failures": summary.consecutive_failures,
        "strategy": summary.current_strategy,
        "report": _json(report),
        "handoff": _json(summary.handoff) if handoff else None,
        "claimed_by": summary.claimed_by,
        "version": summary.version,
        "answers": list(_answers(handoff=handoff, claimed_by=summary.claimed_by)),
    }
    if extra:
        payload.update(extra)
    return payload


def _answers(*, handoff: bool, claimed_by: str | None) -> tuple[str, ...]:
    """The actions a suspension takes: its answers, and ``claim`` while
    nobody holds it (a claimed hand-off: only ``resolve``), or ``release``
    and ``take_over`` once someone does (only the claimer's answers, release
    included, are recorded; anyone may take it over)."""
    if claimed_by is None:
        return (*_ANSWERS["waiting"], "claim") if not handoff else _ANSWERS["handoff"]
    answers = _ANSWERS["waiting"] if not handoff else ("resolve",)
    return (*answers, "release", "take_over")


def _json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, BaseModel):
        return orjson.loads(value.model_dump_json())
    return value


class Referee:
    """The nodes and the router that put devs-recovery into a graph."""

    def __init__(
        self,
        service: Backend | str,
        *,
        token: str | None = None,
        entropy_of: Callable[[Mapping[str, Any]], float | None] | None = None,
        test_command: Sequence[str]
        | Callable[[Mapping[str, Any]], Sequence[str]]
        | None = None,
        workdir: str | Path | Callable[[Mapping[str, Any]], str | Path] | None = None,
        gate_name: str = "tests",
        timeout: float = 600.0,
        isolation: Isolation = "auto",
        on_handoff: Literal["suspend", "end"] = "suspend",
        lesson_of: Callable[[Mapping[str, Any], GateDecision], tuple[str, str] | None]
        | None = None,
        allow_paths: Sequence[str | Path] = (),
    ) -> None:
        """``service``: a ``RecoveryService`` (in process), an
        ``HttpRecoveryClient``, or the base URL of ``devs serve`` (with
        ``token``, default ``DEVS_API_TOKEN``). ``entropy_of``: the turn's
        entropy score from the state after the model's turn (None: nothing to
        report). ``test_command`` and ``workdir``: the gate's command and
        where it runs, fixed or from the state. ``on_handoff``: ``suspend``
        asks a human at once (claim and resolve in ``Command(resume=…)``);
        ``end`` ends the graph and leaves the task in the hand-off queue.
        ``lesson_of``: after a failed gate, the lesson a root-cause analysis
        drew, ``(failed_strategy, rca_summary)`` (None: none), logged before
        the graph goes on; the strategy is then blacklisted for this task.
        ``allow_paths``: absolute paths the gate sandbox would hide (in the
        home directory, ``/tmp``, ``/run``) that the test command needs, shown
        read-only (the CLI's ``--allow-path``); the Python installation
        running devs, the active virtual environment and a Python command's
        own installation are shown without them.

        ``test_command`` is required: there is no default gate command."""
        if test_command is None or (
            not callable(test_command) and not list(test_command)
        ):
            msg = (
                "Referee(test_command=...) is required: the command the gate "
                'runs, e.g. ["python", "-m", "pytest", "-q"], or a callable '
                "taking the graph state"
            )
            raise InvalidInput(msg, field="test_command")
        if isinstance(test_command, str):
            msg = (
                "Referee(test_command=...) must be a list of arguments, "
                f"not one string: {test_command!r}"
            )
            raise InvalidInput(msg, field="test_command")
        self.allow_paths = check_allow_paths(allow_paths)
        if isinstance(service, str):
            service = HttpRecoveryClient(service, token=token)
        self.service: Backend = service
        self.entropy_of = entropy_of
        self.test_command = test_command
        self.workdir = workdir
        self.gate_name = gate_name
        self.timeout = timeout
        self.isolation: Isolation = isolation
        self.on_handoff = on_handoff
        self.lesson_of = lesson_of

    # ---------------------------------------------------------------- nodes
    # ``state: Any``, not a TypedDict: LangGraph hands a node only the keys of
    # the type its first parameter names, and these nodes read the author's
    # keys too (``entropy_of``, ``test_command`` and ``workdir`` callables).

    def before_turn(self, state: Any) -> dict[str, Any]:
        """``begin_attempt``: the directive into the state; a blacklisted
        strategy suspends the graph (it never reaches the model)."""
        steps = _Steps()
        task_id, strategy = _text(state, "task_id"), _text(state, "strategy")
        decision = self._once(
            steps.next("attempt"),
            lambda: self.service.begin_attempt(task_id, strategy),
            ("begin_attempt", task_id, strategy),
        )
        update: dict[str, Any] = {"directive": decision.directive}
        if decision.proceed:
            update["devs"] = {"route": "proceed", "where": "attempt"}
            return update
        reason = _reason(decision.outcome)
        update["devs"] = self._suspend(
            steps,
            task_id,
            "attempt",
            reason,
            decision.outcome,
            decision.session_id,
            decision.report,
            {
                "blocked_strategy": strategy,
                "matched_strategy": decision.matched_strategy,
                "directive": decision.directive,
            },
            after_resume="retry",  # another strategy: this one never reaches the model
        )
        return update

    def after_turn(self, state: Any) -> dict[str, Any]:
        """The turn's entropy score to ``report_entropy``; a triggered gate
        suspends the graph."""
        steps = _Steps()
        task_id = _text(state, "task_id")
        score = self.entropy_of(state) if self.entropy_of is not None else None
        if score is None:
            return {"devs": {"route": "proceed", "where": "entropy", "score": None}}
        decision = self._once(
            steps.next("entropy"),
            lambda: self.service.report_entropy(task_id, score),
            ("report_entropy", task_id, score),
        )
        if not decision.triggered:
            return {"devs": {"route": "proceed", "where": "entropy", "score": score}}
        outcome = self._suspend(
            steps,
            task_id,
            "entropy",
            SessionReason.ENTROPY_LIMIT.value,
            Outcome.PAUSE,
            decision.session_id,
            None,
            {"entropy_score": score, "threshold": decision.threshold},
            after_resume="proceed",  # the human let this turn's work go on
        )
        outcome["score"] = score
        return {"devs": outcome}

    def gate(self, state: Any) -> dict[str, Any]:
        """Run the test command sandboxed, record the gate, and route."""
        steps = _Steps()
        task_id = _text(state, "task_id")
        command = self._command(state)
        workdir = self._workdir(state)
        service = self.service
        store = store_file(service) if isinstance(service, RecoveryService) else None
        run = _run_tests(
            command,
            workdir,
            self.timeout,
            self.isolation,
            list(self.allow_paths),
            store,
        ).result()
        strategy = state.get("strategy")
        strategy = strategy if isinstance(strategy, str) else None
        record = self._once_or_recorded(
            steps.next("gate"),
            lambda: self.service.record_gate(
                task_id,
                run["exit_code"],
                gate=self.gate_name,
                strategy=strategy,
                error=run["error"],
                output=run["output"],
            ),
            (
                "record_gate",
                task_id,
                run["exit_code"],
                self.gate_name,
                strategy,
                run["error"],
                run["output_hash"],
            ),
        )
        decision = record if record is not None else self._recorded_gate(task_id)
        lesson = None
        if not decision.passed and self.lesson_of is not None:
            lesson = self.lesson_of(state, decision)
        if lesson is not None:
            failed, summary = lesson
            self._once(
                steps.next("lesson"),
                lambda: self.service.log_lesson(task_id, failed, summary),
                ("log_lesson", task_id, failed, summary),
            )
        base = {
            "where": "gate",
            "outcome": str(decision.outcome),
            "passed": decision.passed,
            "exit_code": decision.exit_code,
            "next_node": decision.next_node,
            "consecutive_failures": decision.consecutive_failures,
            "lesson": lesson[0] if lesson else None,
        }
        if decision.outcome == Outcome.ADVANCE:
            return {"devs": {**base, "route": "advance"}}
        if decision.outcome == Outcome.COMPLETE:
            return {"devs": {**base, "route": "end"}}
        if decision.outcome == Outcome.STAY:
            return {"devs": {**base, "route": "retry"}}
        decided = self._suspend(
            steps,
            task_id,
            "gate",
            _reason(decision.outcome),
            decision.outcome,
            decision.session_id,
            decision.report,
            {"exit_code": decision.exit_code, "output_tail": run["output"][-2000:]},
            after_resume="retry",
        )
        return {"devs": {**base, **decided}}

    @staticmethod
    def route(state: Any) -> Route:
        """The conditional edge after a referee node."""
        devs = state.get("devs")
        route = devs.get("route") if isinstance(devs, Mapping) else None
        if route not in ROUTES:
            msg = "the state has no referee route: run a Referee node before route()"
            raise InvalidInput(msg, field="devs")
        return cast("Route", route)

    # ---------------------------------------------------------------- spend

    def watch(self, node: Callable[..., Any]) -> Callable[..., Any]:
        """``node`` (the graph author's model node, sync or async), watched:
        what it returns is recorded with ``record_usage`` — each AI message
        with ``usage_metadata`` (:func:`_usages`) — and a usage that spends
        the task's budget suspends the graph (reason ``budget_exhausted``).

        ``node`` runs in a LangGraph ``@task`` named as its graph node, whose
        result LangGraph keeps with the checkpoint: resumed after the
        suspension, the node does not call the model again. It is given the
        graph's whole state (the watched node reads ``task_id``) and the
        ``config``, ``runtime``… its signature asks for. When it recorded
        usage, the update it returns (a dict, or a ``Command``'s) also
        writes ``devs``: ``where: "spend"``, ``spend``, ``warned``, and the
        ``route`` (``proceed``; after a human, as for any stop)."""
        if not callable(node):
            msg = f"Referee.watch(node) takes a callable, got {type(node).__name__}"
            raise InvalidInput(msg, field="node")
        tasks: dict[str, Any] = {}

        def run(state: Any) -> Any:
            name = _node_name(node)
            call = tasks.get(name)
            if call is None:
                call = tasks[name] = _task_of(node, name)
            return call(state)

        if _is_async(node):

            async def watched_async(state: Any) -> Any:
                task_id = _text(state, "task_id")
                return self._spent(task_id, await run(state))

            return _named_as(watched_async, node)

        def watched(state: Any) -> Any:
            task_id = _text(state, "task_id")
            return self._spent(task_id, run(state).result())

        return _named_as(watched, node)

    def _spent(self, task_id: str, update: Any) -> Any:
        """Record the usage ``update`` carries; suspend if it spent the
        task's budget, or the task waits for a human anyway. Each usage is
        sent under this step's idempotency key (a resumed node answers as
        the first time, so it suspends again until a human answers) and with
        its ``usage_id`` (a message counted before, in any step, is not
        counted again)."""
        usages = list(_usages(update))
        if not usages:
            return update
        steps = _Steps()
        decisions = [
            decision
            for number, usage in enumerate(usages)
            if (decision := self._record_usage(steps, task_id, usage, number))
            is not None
        ]
        if not decisions:
            return update
        base: dict[str, Any] = {
            "route": "proceed",
            "where": "spend",
            "spend": _json(decisions[-1].spend),
            "warned": any(d.warned for d in decisions),
        }
        stopped = next((d for d in decisions if d.triggered), None)
        reason = SessionReason.BUDGET_EXHAUSTED.value
        if stopped is None and decisions[-1].session_id is not None:
            # Not stopped by this update, but the task waits for a human: a
            # usage recorded elsewhere spent its budget (a hook's, another
            # task's of its run) or something else stopped it meanwhile.
            stopped = decisions[-1]
            pending = self.service.task(task_id).pending_session
            if pending is not None and pending.session_id == stopped.session_id:
                reason = str(pending.reason)
        if stopped is None:
            return _with_devs(update, base)
        decided = self._suspend(
            steps,
            task_id,
            "spend",
            reason,
            STATE_OUTCOMES.get(stopped.state, Outcome.PAUSE),
            stopped.session_id,
            None,
            {"spend": _json(stopped.spend)},
            after_resume="proceed",  # the human let this turn's work go on
        )
        # what the task has spent now, and the budgets a person may have raised
        base["spend"] = _json(self.service.task(task_id).spend)
        return _with_devs(update, {**base, **decided})

    def _record_usage(
        self, steps: _Steps, task_id: str, usage: _Usage, number: int
    ) -> UsageDecision | None:
        """``record_usage`` of one usage (None: the service refused it; a
        model name it refuses is recorded as ``unknown``)."""
        usage_id = usage.usage_id or _key(f"usage.{number}")
        digest = hashlib.sha256(usage_id.encode("utf-8", "surrogatepass"))
        op = steps.next(f"usage-{digest.hexdigest()[:16]}")
        for model in dict.fromkeys((usage.model, UNKNOWN_MODEL)):
            request = ("record_usage", task_id, model, *usage.counts, usage_id)

            def call(model: str = model) -> UsageDecision:
                return self.service.record_usage(
                    task_id,
                    model=model,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cache_read_tokens,
                    cache_creation_tokens=usage.cache_creation_tokens,
                    usage_id=usage_id,
                )

            try:
                decided = self._once_or_recorded(op, call, request)
                # None: this step recorded another usage under this id
                # before (a crash lost LangGraph's record of the node's
                # result, and the node answered otherwise): the usage id
                # counts it once.
                return decided if decided is not None else call()
            except InvalidInput as error:
                if error.field != "model":
                    return None  # not a usage the service counts
        return None

    # ------------------------------------------------------------- the gate

    def _command(self, state: Mapping[str, Any]) -> list[str]:
        command = self.test_command
        if callable(command):
            command = command(state)
        if not command:
            msg = "Referee(test_command=...) names no command for the gate"
            raise InvalidInput(msg, field="test_command")
        return [str(part) for part in command]

    def _workdir(self, state: Mapping[str, Any]) -> str | None:
        where = self.workdir
        if callable(where):
            where = where(state)
        return None if where is None else str(where)

    # ----------------------------------------------------------- suspension

    def _suspend(
        self,
        steps: _Steps,
        task_id: str,
        where: Where,
        reason: str,
        outcome: Outcome | None,
        session_id: str | None,
        report: Any,
        extra: Mapping[str, Any],
        *,
        after_resume: Route,
    ) -> dict[str, Any]:
        """``interrupt()`` until a human answers; record the answer; the
        route and what the human decided.

        An answer that is refused (not a human decision, an action this
        suspension does not take, a value or a transition the service
        refuses) records nothing and suspends again, the payload's ``error``
        saying why: LangGraph keeps every resume value of a node, so the node
        must consume a bad one rather than fail on it each time it runs.

        A suspension answered outside the graph (``devs resume``,
        ``devs resolve``, the HTTP API) is not asked again: the node routes
        from the answer the task's history holds."""
        handoff = reason == HAND_OFF_REQUIRED
        if handoff and self.on_handoff == "end":  # the queue has it
            return {"session_id": session_id, "route": "end"}
        refused: (
            InvalidInput | IllegalTransition | Claimed | StaleAnswer | OverBudget | None
        ) = None
        while True:
            summary = self.service.task(task_id)
            if not _still_suspended(summary, handoff=handoff, session_id=session_id):
                return self._answered_outside(
                    task_id, summary, session_id, after_resume=after_resume
                )
            payload = suspension_payload(
                task_id=task_id,
                where=where,
                reason=reason,
                outcome=str(outcome) if outcome else "pause",
                session_id=session_id,
                summary=summary,
                report=report,
                extra=extra,
            )
            if refused is not None:
                payload["error"] = {
                    "detail": str(refused),
                    "field": getattr(refused, "field", None),
                }
            # LangGraph runs the node again from its start on each resume, and
            # each interrupt() before the newest gives back the answer it got
            # then. One of those was recorded (its receipt answers again) or
            # refused: refused then, it must stay refused whatever the task
            # is now (a claim since released would otherwise let it in).
            replayed = steps.asked < _resumes()
            steps.asked += 1
            raw = interrupt(payload)
            try:
                answer = _human(raw)
                said = answer.model_dump()
                key = steps.next(answer.action)
                if replayed:
                    result = self._record(key, task_id, answer, replayed=True)
                elif answer.action == "claim" and summary.claimed_by == said["actor"]:
                    refused = None  # the claimer's claim again: nothing to do
                    continue
                else:
                    self._offered(answer, payload["answers"], summary, reason)
                    result = self._record(key, task_id, answer, replayed=False)
            except (
                InvalidInput,
                IllegalTransition,
                Claimed,
                StaleAnswer,
                OverBudget,  # resumed before the budget was raised
            ) as error:
                refused = error
                continue
            refused = None
            if answer.action in ("claim", "release", "take_over"):
                continue  # held or let go: ask again until someone answers
            decided: dict[str, Any] = {
                "session_id": session_id,
                "decided_by": said["actor"],
                "action": answer.action,
                "reason": said["reason"],
                "state": str(result.state),
                "next_node": result.next_node,
            }
            if answer.action == "rewind":
                decided["rewind_to"] = result.to_commit
            return _routed(decided, answer.action, said["resolution"], after_resume)

    def _answered_outside(
        self,
        task_id: str,
        summary: TaskSummary,
        session_id: str | None,
        *,
        after_resume: Route,
    ) -> dict[str, Any]:
        """The route after a suspension a human answered outside the graph
        (or this node answered before a crash lost its checkpoint): the
        task's last human answer decides, as if given here."""
        decided: dict[str, Any] = {
            "session_id": session_id,
            "decided_by": None,
            "action": None,
            "reason": None,
            "state": str(summary.state),
            "next_node": None,
            "outside": True,
        }
        for entry in reversed(self.service.history(task_id)):
            action = _OUTSIDE_ACTIONS.get(entry.event)
            if action is None:
                continue
            changes = entry.changes
            resolution = changes.get("resolution")
            decided.update(
                decided_by=changes.get("actor"),
                action=action,
                reason=changes.get("reason"),
            )
            if action == "rewind":
                decided["rewind_to"] = changes.get("to_commit")
            return _routed(
                decided,
                action,
                None if resolution is None else str(resolution),
                after_resume,
            )
        # no human answer in the log: the task moved on by itself
        route: Route = "end" if str(summary.state) in _ENDED else after_resume
        return {**decided, "route": route}

    @staticmethod
    def _offered(
        answer: _Answer,
        allowed: list[str],
        summary: TaskSummary,
        reason: str,
    ) -> None:
        """Refuse an action the suspension does not take (``InvalidInput``)."""
        claimer = summary.claimed_by
        if answer.action not in allowed:
            msg = f"{reason} takes {' or '.join(allowed)}, not {answer.action!r}"
            if claimer is not None:
                msg += f": it is already claimed by {claimer!r}"
            raise InvalidInput(msg, field="action")

    def _record(
        self, key: str, task_id: str, answer: _Answer, *, replayed: bool
    ) -> ActionResult:
        """Record ``answer`` under its step's ``key``: the command its action
        records (:data:`ANSWER_COMMANDS`), with the arguments its model
        takes. A ``replayed`` answer (given before, now given back by
        LangGraph) answers only from its receipt: it names a version the task
        never reaches, so one refused the first time is refused again,
        writing nothing."""
        command = ANSWER_COMMANDS[answer.action]
        arguments = _arguments(command, task_id, answer)
        named = arguments["if_version"]
        request = _request(command, arguments)
        sent = {**arguments, "if_version": NEVER_VERSION if replayed else named}
        call: Callable[..., ActionResult] = getattr(self.service, command)
        return self._once(key, lambda: call(**sent), request)

    # ---------------------------------------------------------- exactly once

    def _once(self, op: str, call: Callable[[], T], request: tuple[Any, ...]) -> T:
        """``call()`` under this step's idempotency key for ``op``."""
        with self.service.exactly_once(_key(op), orjson.dumps(request).decode()):
            return call()

    def _once_or_recorded(
        self, op: str, call: Callable[[], T], request: tuple[Any, ...]
    ) -> T | None:
        """As ``_once``; None when this step's command was recorded before
        with another request: the tests ran again after a crash that lost
        LangGraph's record of their first run, and their result differed.
        The first result stands."""
        try:
            return self._once(op, call, request)
        except InvalidInput as error:
            if error.field != "idempotency_key":
                raise
            return None

    def _recorded_gate(self, task_id: str) -> GateDecision:
        """The gate this step recorded before, as the task's state tells it."""
        summary = self.service.task(task_id)
        # waiting and failed states as the decisions name them; ended: complete
        outcome = STATE_OUTCOMES.get(summary.state, Outcome.COMPLETE)
        session = summary.pending_session
        return GateDecision(
            task_id=task_id,
            gate=self.gate_name,
            passed=outcome == Outcome.COMPLETE,
            reason=None,
            exit_code=None,
            outcome=outcome,
            state=summary.state,
            consecutive_failures=summary.consecutive_failures,
            session_id=session.session_id if session else None,
        )


_OUTSIDE_ACTIONS = {
    event.__name__: str(action)
    for action, event in HUMAN_EVENTS.items()
    # a claim, a release, a take-over is no answer: the stop waits
    if action not in (HumanAction.CLAIM, HumanAction.RELEASE, HumanAction.TAKE_OVER)
}
_ENDED = frozenset({"COMPLETED", "SKIPPED"})

NEVER_VERSION = VERSION_MAX
"""The version a replayed answer names: no task reaches it, so the answer is
refused unless its receipt answers (it was recorded the first time)."""


def _resumes() -> int:
    """How many answers LangGraph holds for this run of the node: the
    ``interrupt()`` calls before that many give back an answer given before
    (LangGraph's scratchpad: its count is not public API)."""
    configurable = get_config().get("configurable", {})
    scratchpad = configurable.get(CONFIG_KEY_SCRATCHPAD)
    resume = getattr(scratchpad, "resume", None)
    return len(resume) if isinstance(resume, list) else 0


def _request(command: str, arguments: Mapping[str, Any]) -> tuple[Any, ...]:
    """The request an answer's idempotency key is compared with: the command
    and its arguments in its model's order (no version named: as before
    answers named one), or as an earlier release wrote it (:data:`_REQUESTS`),
    so that an answer it recorded, given back after an upgrade, is the same
    request."""
    said, order = _REQUESTS.get(command, (command, ()))
    names = order or tuple(name for name in arguments if name != "if_version")
    return (
        said,
        *(arguments[name] for name in names),
        *_named(arguments["if_version"]),
    )


def _named(version: int | None) -> tuple[int, ...]:
    """The version an answer names, in its idempotency request (none: the
    request as it was before answers could name one)."""
    return () if version is None else (version,)


def _still_suspended(
    summary: TaskSummary, *, handoff: bool, session_id: str | None
) -> bool:
    """Whether the task still waits for the answer this suspension asks:
    in the hand-off, or with this human session open."""
    if handoff:
        return str(summary.state) == "HAND_OFF"
    pending = summary.pending_session
    if pending is None:
        return False
    return session_id is None or pending.session_id == session_id


def _routed(
    decided: dict[str, Any],
    action: str,
    resolution: str | None,
    after_resume: Route,
) -> dict[str, Any]:
    """Where the graph goes after a human's answer."""
    if action == "skip" or resolution in ("complete", "skip"):
        return {**decided, "route": "end"}
    if action in ("resolve", "rewind"):  # returned to the agent; reset repo
        return {**decided, "route": "retry"}
    return {**decided, "route": after_resume}


def _gate_run(
    command: list[str],
    workdir: str | None,
    timeout: float,
    isolation: Isolation,
    allow_paths: list[str] | None = None,
    store: str | None = None,
) -> dict[str, Any]:
    """The test command's run: a LangGraph task, whose result LangGraph keeps
    with the checkpoint, so a resumed gate does not run it again. ``store``:
    the SQLite file the gate may not reach (:func:`run_gate`)."""
    result = run_gate(
        command,
        cwd=workdir,
        timeout=timeout,
        isolation=isolation,
        allow_paths=allow_paths or (),
        store=store,
    )
    return {
        "exit_code": result.exit_code,
        "output": result.output,
        "output_hash": result.output_hash,
        "error": result.error_line,
        "isolation": result.isolation,
    }


# langgraph's ``task`` types do not check under mypy (its ParamSpec meets a
# union); called as it documents it.
_run_tests: Any = cast("Any", task)(name="devs_gate_run")(_gate_run)


class _Steps:
    """The commands of one run of a node, numbered: the same numbers on
    every run of the same step, so each gets the same key."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.asked = 0
        """How many times this run of the node called ``interrupt()``."""

    def next(self, op: str) -> str:
        count = self.seen.get(op, 0)
        self.seen[op] = count + 1
        return f"{op}.{count}"


def _key(op: str) -> str:
    """The idempotency key of command ``op`` in the running LangGraph task:
    the thread and the task's checkpoint namespace (its node and task id,
    the same every time this step runs), hashed."""
    configurable = get_config().get("configurable", {})
    thread = str(configurable.get("thread_id", ""))
    namespace = str(configurable.get("checkpoint_ns", ""))
    if not namespace:
        msg = "a Referee node must run inside a LangGraph graph with a checkpointer"
        raise InvalidInput(msg, field="config")
    digest = hashlib.sha256(f"{thread}\0{namespace}".encode("utf-8", "surrogatepass"))
    return f"langgraph/{digest.hexdigest()[:40]}/{op}"


def _human(value: Any) -> _Answer:
    """``Command(resume=...)``'s value as a :data:`HumanDecision`; refused
    (``InvalidInput``) in the words of the HTTP API and the MCP tools."""
    if isinstance(value, HumanDecision):
        return value
    if not isinstance(value, Mapping):
        msg = (
            "Command(resume=...) must be an object (a human decision: action, "
            f"actor, ...), got {type(value).__name__}"
        )
        raise InvalidInput(msg, field="resume")
    try:
        return HumanDecision.model_validate(dict(value))
    except ValidationError as failure:
        raise refusal(HumanDecision, failure) from None


def _arguments(command: str, task_id: str, answer: _Answer) -> dict[str, Any]:
    """The arguments ``command`` takes of ``answer`` (and the graph's
    ``task_id``), checked by its model (:data:`~devs.domain.arguments.COMMANDS`):
    refused as the service refuses them (``resolve`` with no ``resolution``)."""
    model = COMMANDS[command]
    said = answer.model_dump()
    given = {
        name: said[name]
        for name in model.model_fields
        if name != "task_id" and said.get(name) is not None
    }
    try:
        checked = model.model_validate({"task_id": task_id, **given})
    except ValidationError as failure:
        raise refusal(model, failure) from None
    return {name: getattr(checked, name) for name in model.model_fields}


UNKNOWN_MODEL = "unknown"
"""The model of a usage whose message names none (or one the service
refuses)."""


@dataclasses.dataclass(frozen=True)
class _Usage:
    """One AI message's usage, as ``record_usage`` takes it."""

    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    usage_id: str | None
    """The message's id (hashed if it is no usage id), None if it has none."""

    @property
    def counts(self) -> tuple[int, int, int, int]:
        return (
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_creation_tokens,
        )


def _usages(update: Any) -> Iterator[_Usage]:
    """The usage of each AI message a node's ``update`` holds: a value of
    one of its channels, or in a list there; a ``Command``'s update too.

    LangChain's ``input_tokens`` is the sum of every input token
    (``UsageMetadata``): the cache reads and writes its
    ``input_token_details`` gives are counted apart, so they are taken off
    it. The model is ``response_metadata``'s ``model_name`` (LangChain's
    key), else its ``model`` (Anthropic's message before), else
    ``unknown``. The values are the model provider's word: a count that is
    no whole number of tokens in [0, 10**12] (a bool, a negative, a float,
    text, one too large) counts 0, the others count; a message with nothing
    left to count is no usage."""
    for message in _ai_messages(update, depth=2):
        metadata = message.usage_metadata
        if not isinstance(metadata, Mapping):
            continue
        details = metadata.get("input_token_details")
        details = details if isinstance(details, Mapping) else {}
        cache_read = _count(details.get("cache_read"))
        cache_creation = _count(details.get("cache_creation"))
        usage = _Usage(
            model=_model(message.response_metadata),
            input_tokens=max(
                0, _count(metadata.get("input_tokens")) - cache_read - cache_creation
            ),
            output_tokens=_count(metadata.get("output_tokens")),
            cache_read_tokens=cache_read,
            cache_creation_tokens=cache_creation,
            usage_id=_usage_id(message.id),
        )
        if any(usage.counts):
            yield usage


def _ai_messages(update: Any, *, depth: int) -> Iterator[AIMessage]:
    """The AI messages of a node's update: a mapping of channels, a
    ``Command``, a list of commands or of ``(channel, value)`` pairs."""
    if depth < 0:
        return
    if isinstance(update, Command):
        yield from _ai_messages(update.update, depth=depth - 1)
        return
    if isinstance(update, Mapping):
        values: list[Any] = list(update.values())
    elif isinstance(update, list | tuple):
        values = []
        for item in update:
            if isinstance(item, Command):
                yield from _ai_messages(item, depth=depth - 1)
            elif isinstance(item, tuple) and len(item) == 2:
                values.append(item[1])
    else:
        return
    for value in values:
        if isinstance(value, AIMessage):
            yield value
        elif isinstance(value, list | tuple):
            yield from (item for item in value if isinstance(item, AIMessage))


def _count(value: Any) -> int:
    """A token count as a message gives it (anything else: 0)."""
    if type(value) is int and 0 <= value <= TOKENS_MAX:
        return value
    return 0


def _model(metadata: Any) -> str:
    """The model a message's ``response_metadata`` names: one line of
    printable characters, at most :data:`NAME_MAX`."""
    if isinstance(metadata, Mapping):
        for key in ("model_name", "model"):
            name = metadata.get(key)
            if isinstance(name, str):
                shown = "".join(c if c.isprintable() else " " for c in name)
                clean = " ".join(shown.split())[:NAME_MAX].strip()
                if clean:
                    return clean
    return UNKNOWN_MODEL


def _usage_id(ident: Any) -> str | None:
    """A message's id as its usage's id: as it is when it is one (visible
    ASCII, at most :data:`ID_MAX` characters, nothing like a credential),
    else its hash; None for a message with no id."""
    if not isinstance(ident, str) or not ident.strip():
        return None
    if (
        len(ident) <= ID_MAX
        and ident.isascii()
        and all(0x21 <= ord(c) <= 0x7E for c in ident)
        and secret_kind(ident) is None
    ):
        return ident
    digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()
    return f"message-{digest[:40]}"


def _with_devs(update: Any, devs: dict[str, Any]) -> Any:
    """``update`` writing ``devs`` too (a mapping or a ``Command``'s; any
    other update is left as it is)."""
    if isinstance(update, Mapping):
        return {**update, "devs": devs}
    if isinstance(update, Command) and isinstance(update.update, Mapping):
        return dataclasses.replace(update, update={**update.update, "devs": devs})
    return update


def _is_async(node: Callable[..., Any]) -> bool:
    """Whether calling ``node`` (a function, or an object's ``__call__``)
    gives a coroutine."""
    return inspect.iscoroutinefunction(node) or inspect.iscoroutinefunction(
        type(node).__call__
    )


def _node_name(node: Callable[..., Any]) -> str:
    """The graph node running now (LangGraph's ``langgraph_node``), else
    the function's name."""
    metadata = get_config().get("metadata") or {}
    name = metadata.get("langgraph_node")
    if isinstance(name, str) and name:
        return name
    return str(getattr(node, "__name__", type(node).__name__))


def _task_of(node: Callable[..., Any], name: str) -> Any:
    """``node`` as a LangGraph task named ``name`` (its graph node's: what
    LangGraph streams of it is tagged with it), given what its signature
    asks for (``config``, ``runtime``…)."""
    if _is_async(node):

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await node(*args, **kwargs)

        call: Callable[..., Any] = call_async
    else:

        def call_sync(*args: Any, **kwargs: Any) -> Any:
            return node(*args, **kwargs)

        call = call_sync
    with contextlib.suppress(TypeError, ValueError):  # none: nothing is injected
        call.__signature__ = inspect.signature(node)  # type: ignore[attr-defined]
    return cast("Any", task)(name=name)(call)


def _named_as(
    wrapper: Callable[..., Any], node: Callable[..., Any]
) -> Callable[..., Any]:
    """``wrapper`` under ``node``'s name (``add_node`` names a node by it);
    not its signature: the wrapper takes the graph's whole state."""
    name = getattr(node, "__name__", None)
    if isinstance(name, str):
        wrapper.__name__ = name
        wrapper.__qualname__ = getattr(node, "__qualname__", name)
    wrapper.__doc__ = getattr(node, "__doc__", None)
    return wrapper


def _text(state: Mapping[str, Any], key: str) -> str:
    value = state.get(key)
    if not isinstance(value, str):
        msg = f"the graph state's {key!r} must be a string, got {type(value).__name__}"
        raise InvalidInput(msg, field=key)
    return value


def _reason(outcome: Outcome | None) -> str:
    """Why a stopped decision asks a human (a blocked attempt that did not
    escalate or hand off paused the task: ``blacklisted_strategy``)."""
    reason = STOP_REASONS.get(outcome) if outcome else None
    return str(reason or SessionReason.BLACKLISTED_STRATEGY)


__all__ = [
    "ROUTES",
    "Backend",
    "DevsState",
    "HumanDecision",
    "Referee",
    "Route",
    "suspension_payload",
]
