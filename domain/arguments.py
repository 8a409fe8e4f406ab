"""Each command's arguments, declared once: one pydantic model per command,
built from the argument types of :mod:`devs.domain.values` with a one-line
description per field.

The edges derive from these (HTTP bodies and ``/openapi.json``, MCP input
schemas, the HTTP client, the CLI's options, the LangGraph referee), so a value
is refused in the same words whichever edge it came through: ``strict`` (no
``"2"`` for an exit code), ``extra="forbid"`` (no silently dropped ``outptu``).
:data:`COMMANDS` lists them; a test checks them against the service's methods.
"""

from __future__ import annotations

from enum import Enum
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from devs.domain.policy import Thresholds
from devs.domain.values import (
    Actor,
    AgentName,
    AnsweredVersion,
    BudgetTokens,
    BudgetUsd,
    CommitId,
    CostUsd,
    Dag,
    EntropyScore,
    ErrorText,
    ExitCode,
    GateName,
    Links,
    ModelName,
    OutputText,
    RcaSummary,
    Reason,
    ResolutionName,
    RunId,
    StopScopeName,
    Strategy,
    TaskId,
    TokenCount,
    UsageId,
    validated,
    whole,
)

__all__ = [
    "COMMANDS",
    "Arguments",
    "BeginAttempt",
    "Claim",
    "LogLesson",
    "PolicyChanges",
    "RaiseBudget",
    "RaiseRunBudget",
    "RecordGate",
    "RecordUsage",
    "Release",
    "ReportEntropy",
    "ResolveHandoff",
    "Resume",
    "Rewind",
    "Skip",
    "StartRun",
    "StartTask",
    "TakeOver",
    "WhatIf",
    "given_apart",
]

TASK = Field(description="the task's id")
ACTOR = Field(description="who answers (a person: an operator's name)")
REASON = Field(description="why, in a sentence: kept in the task's history")
IF_VERSION = Field(
    default=None,
    description=(
        "the task's version this answer is for (as read with it); if the task "
        "has moved on since, the answer is refused and nothing is written"
    ),
)


class Arguments(BaseModel):
    """A command's arguments: JSON's types as they are, nothing unknown."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class StartRun(Arguments):
    """Start a run: a DAG of tasks, each started when its prerequisites pass."""

    run_id: RunId = Field(description="the run's id")
    dag: Dag = Field(description="each task id of the run -> its prerequisites' ids")
    stop_scope: StopScopeName = Field(
        default="run",
        description=(
            "what a task's stop holds up: `run` (the whole run pauses until it "
            "is answered) or `descendants` (ready branches beside it go on)"
        ),
    )


class StartTask(Arguments):
    """Start a task (once), alone or as a node of a run."""

    task_id: TaskId = TASK
    run_id: RunId | None = Field(default=None, description="the run it belongs to")
    agent: AgentName | None = Field(default=None, description="the agent working it")
    last_commit: CommitId | None = Field(
        default=None,
        description="the commit the task starts from (a rewind goes back to it)",
    )
    links: Links | None = Field(
        default=None,
        description=(
            "what the agent's side knows of the task, by name (at most 8): "
            "`transcript` (its session's transcript path), `branch`, `pr` (a "
            "pull request's URL)"
        ),
    )


class BeginAttempt(Arguments):
    """Say the strategy of the next try before making it."""

    task_id: TaskId = TASK
    strategy: Strategy = Field(description="what this try will do, in a sentence")


class RecordGate(Arguments):
    """Record a test command's result: its exit code decides."""

    task_id: TaskId = TASK
    exit_code: ExitCode = Field(description="0 passes; null: killed or timed out")
    gate: GateName | None = Field(
        default=None, description="the name of the check (`tests`, `lint`…)"
    )
    strategy: Strategy | None = Field(
        default=None, description="the strategy that was tried"
    )
    error: ErrorText | None = Field(
        default=None, description="the error it reported (redacted, cut to 100,000)"
    )
    output: OutputText | None = Field(
        default=None, description="its output (redacted, head and tail kept)"
    )


class ReportEntropy(Arguments):
    """Report how uncertain the agent is: a high score pauses for a human."""

    task_id: TaskId = TASK
    score: EntropyScore = Field(description="a finite number in [0, 1]")


class RecordUsage(Arguments):
    """Count a model call's tokens (and cost) against the task's budgets."""

    task_id: TaskId = TASK
    model: ModelName = Field(
        description="the model's name as the agent reports it (`claude-sonnet-4-5`)"
    )
    input_tokens: TokenCount = Field(description="input tokens, the cache's apart")
    output_tokens: TokenCount = Field(description="output tokens")
    cache_read_tokens: TokenCount = Field(
        default=0, description="input tokens read from the prompt cache"
    )
    cache_creation_tokens: TokenCount = Field(
        default=0, description="input tokens written to the prompt cache"
    )
    cost_usd: CostUsd | None = Field(
        default=None,
        description=(
            "what the call cost, in USD; null: priced by the model's price "
            "(the package's table, or DEVS_PRICES)"
        ),
    )
    usage_id: UsageId | None = Field(
        default=None,
        description=(
            "what makes it count once (a model message's id): a usage_id "
            "recorded before records nothing"
        ),
    )


class RaiseBudget(Arguments):
    """A person sets the task's budget above what it has spent."""

    task_id: TaskId = TASK
    usd: BudgetUsd | None = Field(
        default=None, description="the task's budget in USD (above what it spent)"
    )
    tokens: BudgetTokens | None = Field(
        default=None,
        description="the task's budget in tokens (above what it used)",
    )
    actor: Actor = ACTOR
    reason: Reason = REASON
    if_version: AnsweredVersion | None = IF_VERSION


class RaiseRunBudget(Arguments):
    """A person sets the run's budget above what its tasks spent."""

    run_id: RunId = Field(description="the run")
    usd: BudgetUsd = Field(
        description="the run's budget in USD, every task together (above what "
        "they spent)"
    )
    actor: Actor = ACTOR
    reason: Reason = REASON


class LogLesson(Arguments):
    """Log what a failed strategy taught: it is blacklisted for the task."""

    task_id: TaskId = TASK
    failed_strategy: Strategy = Field(description="the strategy that failed")
    rca_summary: RcaSummary = Field(description="why it failed (root cause)")


class Resume(Arguments):
    """A person lets the stopped task go on."""

    task_id: TaskId = TASK
    actor: Actor = ACTOR
    reason: Reason = REASON
    if_version: AnsweredVersion | None = IF_VERSION


class Rewind(Arguments):
    """A person sends the task back to a commit, to start again from there."""

    task_id: TaskId = TASK
    actor: Actor = ACTOR
    reason: Reason = REASON
    to_commit: CommitId | None = Field(
        default=None,
        description="the commit to go back to (default: the one the task started from)",
    )
    if_version: AnsweredVersion | None = IF_VERSION


class Skip(Arguments):
    """A person gives the task up; its run goes on without it."""

    task_id: TaskId = TASK
    actor: Actor = ACTOR
    reason: Reason = REASON
    if_version: AnsweredVersion | None = IF_VERSION


class Claim(Arguments):
    """A person says "I'm on it": others' answers are refused until released."""

    task_id: TaskId = TASK
    actor: Actor = ACTOR
    if_version: AnsweredVersion | None = IF_VERSION


class Release(Arguments):
    """The claimer lets the stop go back to everyone."""

    task_id: TaskId = TASK
    actor: Actor = ACTOR
    if_version: AnsweredVersion | None = IF_VERSION


class TakeOver(Arguments):
    """A person takes someone else's claim over (recorded, with why)."""

    task_id: TaskId = TASK
    actor: Actor = ACTOR
    reason: Reason = REASON
    if_version: AnsweredVersion | None = IF_VERSION


class ResolveHandoff(Arguments):
    """A person closes a hand-off: back to the agent, done, or skipped."""

    task_id: TaskId = TASK
    actor: Actor = ACTOR
    reason: Reason = REASON
    resolution: ResolutionName = Field(
        description="`return` (to the agent), `complete` (done) or `skip`"
    )
    if_version: AnsweredVersion | None = IF_VERSION


def _changeable(info: FieldInfo) -> tuple[Any, Any]:
    """A policy field as a change: its type and limits, or null (keep it)."""
    kind: Any = info.annotation
    members = [member for member in get_args(kind) if member is not type(None)]
    if get_origin(kind) in (Union, UnionType) and len(members) == 1:
        kind = members[0]  # an optional field: null keeps it all the same
    if isinstance(kind, type) and issubclass(kind, Enum):
        kind = Literal[tuple(member.value for member in kind)]
    if info.metadata:
        kind = Annotated[(kind, *info.metadata)]
    if info.annotation is int:  # 3.0 is JSON Schema's integer 3
        kind = Annotated[kind, BeforeValidator(whole)]
    return kind | None, Field(default=None, description=info.description)


PolicyChanges: type[Arguments] = create_model(  # type: ignore[call-overload]
    "PolicyChanges",
    __base__=Arguments,
    __doc__=(
        "Changes to the policy in force (:class:`~devs.domain.policy.Thresholds`: "
        "the same limits); a field left out, or null, keeps its value."
    ),
    **{name: _changeable(info) for name, info in Thresholds.model_fields.items()},
)


class WhatIf(Arguments):
    """Re-decide recorded histories under another policy."""

    policy: PolicyChanges = Field(
        default_factory=PolicyChanges,
        description=(
            "the policy fields to change; the others, and any given null, keep "
            "the policy in force (a recorded expiry is an input, so no "
            "deadline is ever invented)"
        ),
    )
    task_ids: list[TaskId] | None = Field(default=None, description="only these tasks")
    run_id: RunId | None = Field(default=None, description="only this run's tasks")


COMMANDS: dict[str, type[Arguments]] = {
    "start_run": StartRun,
    "start_task": StartTask,
    "begin_attempt": BeginAttempt,
    "record_gate": RecordGate,
    "report_entropy": ReportEntropy,
    "log_lesson": LogLesson,
    "record_usage": RecordUsage,
    "raise_budget": RaiseBudget,
    "raise_run_budget": RaiseRunBudget,
    "resume": Resume,
    "rewind": Rewind,
    "skip": Skip,
    "claim": Claim,
    "release": Release,
    "take_over": TakeOver,
    "resolve_handoff": ResolveHandoff,
    "what_if": WhatIf,
}
"""Each command of :class:`~devs.domain.service.RecoveryApi` that takes more
than an id, by its method's name."""


@validated
def given_apart(
    *,
    task_id: TaskId | None = None,
    run_id: RunId | None = None,
    actor: Actor | None = None,
    if_version: AnsweredVersion | None = None,
) -> dict[str, Any]:
    """The arguments an edge takes from elsewhere than a command's body (the
    URL path's ``task_id`` or ``run_id``, the ``actor`` a token names, the
    ``If-Match`` header's version), validated as the command validates them
    and refused in the same words; those given, by name."""
    given = {
        "task_id": task_id,
        "run_id": run_id,
        "actor": actor,
        "if_version": if_version,
    }
    return {name: value for name, value in given.items() if value is not None}
