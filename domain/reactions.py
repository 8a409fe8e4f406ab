"""What a run does when one of its tasks moves: the one run policy.

A task's new events are folded into its run here, and nowhere else: a pass
settles the node (the run may complete), a stop for a human pauses the run (a
deadline's expiry, a hand-off, keeps it paused), a human sending the task back
to work resumes it, a skip or a hand-off resolved as complete or skip settles
the node, a usage counts against the run's budget (at the budget the run
stops for it). Commands only decide on the task; the
service calls :func:`react` with the events the task just decided.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import singledispatch
from typing import Any

from devs.domain.chart import TaskState
from devs.domain.names import Resolution
from devs.domain.run import NodeOutcome, Run
from devs.domain.spend import Usage
from devs.domain.task import Task, TaskEvent, task_id_of


def react(run: Run, task_events: Iterable[Any]) -> bool:
    """Apply the run's reaction to each of its task's new events, in order.

    Returns whether any event called for a reaction (which may still write
    nothing: pausing a run the task already paused, say).
    """
    reacted = False
    for domain_event in task_events:
        reaction = _react.dispatch(type(domain_event))
        if reaction is not _no_reaction:
            reaction(domain_event, run)
            reacted = True
    return reacted


def _no_reaction(domain_event: Any, run: Run) -> None:
    """Most task events leave the run as it is."""


_react = singledispatch(_no_reaction)


@_react.register
def _(e: Task.Started, run: Run) -> None:
    run.start_node(e.task_id)


@_react.register
def _(e: Task.GatePassed, run: Run) -> None:
    run.settle(task_id_of(e.originator_id), NodeOutcome.COMPLETED)


@_react.register(Task.Escalated)
@_react.register(Task.Paused)
@_react.register(Task.HandedOff)
def _(e: TaskEvent, run: Run) -> None:
    # The run records why: the state the task stopped in (all three stop a
    # working task, so the state after them does not depend on the one before).
    run.pause(task_id_of(e.originator_id), reason=e.state_after(TaskState.RUNNING))


@_react.register
def _(e: Task.DeadlineExpired, run: Run) -> None:
    # Handed off as HandedOff hands off; the run stays paused by the task (it
    # paused when the task stopped for the human who did not answer).
    run.pause(task_id_of(e.originator_id), reason=TaskState.HAND_OFF)


@_react.register(Task.Resumed)
@_react.register(Task.Rewound)
def _(e: TaskEvent, run: Run) -> None:
    run.resume(task_id_of(e.originator_id))


@_react.register
def _(e: Task.UsageRecorded, run: Run) -> None:
    usage = Usage.one(
        e.input_tokens,
        e.output_tokens,
        e.cache_read_tokens,
        e.cache_creation_tokens,
        e.cost_usd,
    )
    run.count_usage(task_id_of(e.originator_id), usage)


@_react.register
def _(e: Task.Skipped, run: Run) -> None:
    run.settle(task_id_of(e.originator_id), NodeOutcome.SKIPPED)


@_react.register
def _(e: Task.HandoffResolved, run: Run) -> None:
    node = task_id_of(e.originator_id)
    if e.resolution is Resolution.RETURN:
        run.resume(node)
    elif e.resolution is Resolution.COMPLETE:
        run.settle(node, NodeOutcome.COMPLETED)
    else:
        run.settle(node, NodeOutcome.SKIPPED)
