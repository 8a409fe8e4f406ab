"""devs-recovery's domain: the task and run aggregates, the chart, the policy,
the ports of its read models, and the eventsourcing application that serves
commands and queries."""

from devs.domain.application import RecoveryService
from devs.domain.decisions import (
    ActionResult,
    AttemptDecision,
    EntropyDecision,
    GateDecision,
    HistoryEntry,
    Notification,
    Outcome,
    TaskSummary,
)
from devs.domain.errors import (
    AlreadyExists,
    Conflict,
    DevsError,
    IllegalTransition,
    InvalidInput,
    NotCaughtUp,
    NotFound,
    StoreError,
    UnknownRun,
    UnknownTask,
    UnreadableEvent,
)
from devs.domain.policy import Policy, load_policy
from devs.domain.ports import (
    FailureReport,
    GateStatus,
    HandoffEntry,
    Lesson,
    Metrics,
    PendingSession,
    ReadModels,
    RunState,
    TaskIndexEntry,
    Verification,
)
from devs.domain.signals import GraphSuspended, suspend_if_stopped

__all__ = [
    "ActionResult",
    "AlreadyExists",
    "AttemptDecision",
    "Conflict",
    "DevsError",
    "EntropyDecision",
    "FailureReport",
    "GateDecision",
    "GateStatus",
    "GraphSuspended",
    "HandoffEntry",
    "HistoryEntry",
    "IllegalTransition",
    "InvalidInput",
    "Lesson",
    "Metrics",
    "NotCaughtUp",
    "NotFound",
    "Notification",
    "Outcome",
    "PendingSession",
    "Policy",
    "ReadModels",
    "RecoveryService",
    "RunState",
    "StoreError",
    "TaskIndexEntry",
    "TaskSummary",
    "UnknownRun",
    "UnknownTask",
    "UnreadableEvent",
    "Verification",
    "load_policy",
    "suspend_if_stopped",
]
