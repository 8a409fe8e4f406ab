"""``LadderModel``: the failure ladder as plain Python, for property tests.

A reference model: what the referee must decide, written without the
aggregate, the state chart or the store. Every threshold is read from the
``Policy`` it is given. It borrows four pure functions of the domain whose
own tests pin them down — ``clean`` (terminal sequences removed from a
gate's output), ``redact`` (what is stored of a text),
``error_hash`` (how a failure is told from another) and the stuck score's
``assess`` — so that it models the ladder's *use* of them.

``LadderModel.apply(command)`` says what the service must answer to one
command (:class:`Expected`) and moves the model; ``None`` means the service
must refuse it (``IllegalTransition``, or ``Claimed``: someone else holds the
stop) and record nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rapidfuzz.distance import Levenshtein

from devs.domain.blacklist import SIMILARITY_RATIO
from devs.domain.chart import TaskState
from devs.domain.names import ResolutionValue
from devs.domain.output import clean
from devs.domain.policy import Policy, StuckDetection
from devs.domain.redaction import error_hash, redact
from devs.domain.stuck import WINDOW, Attempted, assess, failing_tests

WORKING = frozenset({TaskState.RUNNING, TaskState.GATE_FAILED})
WAITING = frozenset({TaskState.ESCALATION, TaskState.PAUSED, TaskState.HAND_OFF})
UNFINISHED = WORKING | WAITING
BLACKLISTED = "BLACKLISTED_STRATEGY"
RESOLVED = {"return": "RUNNING", "complete": "COMPLETED", "skip": "SKIPPED"}
HUMAN_EVENTS = {
    "resume": "Resumed",
    "rewind": "Rewound",
    "skip": "Skipped",
    "claim": "HandoffClaimed",
    "resolve": "HandoffResolved",
    "release": "ClaimReleased",
    "take_over": "ClaimTakenOver",
}

CommandName = Literal[
    "begin_attempt",
    "record_gate",
    "report_entropy",
    "log_lesson",
    "resume",
    "rewind",
    "skip",
    "claim",
    "resolve",
    "release",
    "take_over",
]


@dataclass(frozen=True)
class Command:
    """One command for one task: its name and its arguments.

    ``text`` is the strategy (``begin_attempt``, ``log_lesson``) or the
    test output (``record_gate``); ``code`` the exit code (``None``: killed);
    ``score`` the entropy; ``actor`` who acts; ``resolution`` how a hand-off
    ends.
    """

    name: CommandName
    task: int = 0
    """Which task (an index into the started tasks, modulo their number)."""
    text: str = ""
    code: int | None = 1
    score: float = 0.0
    actor: str = "ann"
    resolution: ResolutionValue = "return"

    def __repr__(self) -> str:
        fields = {
            "begin_attempt": ("text",),
            "record_gate": ("code", "text"),
            "report_entropy": ("score",),
            "log_lesson": ("text",),
            "claim": ("actor",),
            "resolve": ("actor", "resolution"),
        }.get(self.name, ("actor",))
        shown = ", ".join(f"{name}={getattr(self, name)!r:.60}" for name in fields)
        return f"Command({self.name!r}, task={self.task}, {shown})"


@dataclass
class TaskModel:
    """One task as the ladder must have it."""

    state: str = "RUNNING"
    count: int = 0
    """Consecutive failures since the last pass."""
    failures: list[Attempted] = field(default_factory=list)
    """Failures since the last pass, the most recent ``failure_history_cap``."""
    lessons: list[str] = field(default_factory=list)
    logged: list[str] = field(default_factory=list)
    """The lessons in the order last logged (the lessons read model's order)."""
    pending: str | None = None
    """The reason of the open human session, if one is open."""
    claimed: str | None = None
    strategy: str | None = None
    """The current attempt's strategy (a failed gate names it)."""
    stuck: float | None = None
    humans: list[tuple[str, str]] = field(default_factory=list)
    """Every human action recorded: (event name, actor), in order."""
    events: int = 1
    """Events recorded (``Started`` is the first)."""


@dataclass(frozen=True)
class Expected:
    """What the service must answer to a command it accepts."""

    state: str
    count: int
    blocked: bool | None = None
    """``begin_attempt``: whether the strategy was blacklisted."""
    triggered: bool | None = None
    """``report_entropy``: whether the task paused (or a session is open)."""


class LadderModel:
    """The ladder of every started task under one ``policy``."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.tasks: dict[str, TaskModel] = {}

    def start(self, task_id: str) -> None:
        self.tasks[task_id] = TaskModel()

    def task_id(self, index: int) -> str:
        ids = list(self.tasks)
        return ids[index % len(ids)]

    # ----------------------------------------------------------- commands

    def apply(self, command: Command) -> Expected | None:
        """What the service must answer; ``None``: it must refuse."""
        task = self.tasks[self.task_id(command.task)]
        method: Any = getattr(self, f"_{command.name}")
        extras: dict[str, bool] | None = method(task, command)
        if extras is None:
            return None
        return Expected(state=task.state, count=task.count, **extras)

    def _begin_attempt(
        self, task: TaskModel, command: Command
    ) -> dict[str, bool] | None:
        if task.state not in WORKING:
            return None
        clean = redact(command.text)
        matched = self.blacklist_match(task, clean)
        if matched is None:
            task.state, task.strategy = "RUNNING", clean
            task.events += 1  # AttemptBegan
            return {"blocked": False}
        failure = Attempted(
            strategy=clean, error_hash=error_hash(f"{BLACKLISTED}\n{matched}")
        )
        self._fail(task, failure, blocked=True)
        return {"blocked": True}

    def _record_gate(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if task.state not in WORKING:
            return None
        if command.code == 0:
            task.state, task.count, task.strategy, task.stuck = (
                "COMPLETED",
                0,
                None,
                None,
            )
            task.failures.clear()
            task.events += 1  # GatePassed
            return {}
        output = redact(clean(command.text))  # as stored: control sequences gone
        if output:
            failure = Attempted(
                strategy=task.strategy,
                error_hash=error_hash(output),
                failing_tests=failing_tests(output[-2_000:]),
            )
        else:  # no output: the failure is told by what happened to the process
            described = (
                "process was killed or timed out"
                if command.code is None
                else f"process exited with code {command.code}"
            )
            failure = Attempted(
                strategy=task.strategy, error_hash=error_hash(described)
            )
        self._fail(task, failure, blocked=False)
        return {}

    def _fail(self, task: TaskModel, failure: Attempted, *, blocked: bool) -> None:
        policy = self.policy
        window = [*task.failures[-(WINDOW - 1) :], failure]
        task.count += 1
        task.failures.append(failure)
        del task.failures[: -policy.failure_history_cap]
        task.events += 1  # GateFailed or BlacklistedStrategyAttempted
        if policy.stuck_detection is StuckDetection.OFF:
            task.stuck = None
        else:
            task.stuck = assess(window).score
        if task.count >= policy.handoff_threshold:
            task.state, task.claimed = "HAND_OFF", None
            task.events += 1  # HandedOff
        elif task.count >= policy.escalation_threshold:
            task.state, task.pending = "ESCALATION", "max_retries"
            task.events += 1  # Escalated
        elif blocked:
            task.state, task.pending = "PAUSED", "blacklisted_strategy"
            task.events += 1  # Paused
        else:
            task.state = "GATE_FAILED"
        if (
            policy.stuck_detection is StuckDetection.GATE
            and task.stuck is not None
            and task.stuck >= policy.hitl_entropy_threshold
            and task.pending is None
            and task.state in WORKING
        ):
            task.state, task.pending = "PAUSED", "entropy_limit"
            task.events += 1  # Paused (a derived score)

    def _report_entropy(
        self, task: TaskModel, command: Command
    ) -> dict[str, bool] | None:
        triggered = command.score >= self.policy.hitl_entropy_threshold
        if task.pending is not None:
            return {"triggered": triggered}  # the open session; nothing recorded
        if task.state not in WORKING:
            return None
        task.events += 1  # EntropyMeasured or Paused
        if triggered:
            task.state, task.pending = "PAUSED", "entropy_limit"
        return {"triggered": triggered}

    def _log_lesson(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if task.state not in UNFINISHED:
            return None
        clean = redact(command.text)
        if clean not in task.lessons:
            task.lessons.append(clean)
        if clean in task.logged:
            task.logged.remove(clean)
        task.logged.append(clean)
        task.events += 1  # LessonLogged
        return {}

    @staticmethod
    def _held(task: TaskModel, command: Command) -> bool:
        """Whether someone else claimed the stop: their answer is refused."""
        return task.claimed is not None and task.claimed != redact(command.actor)

    def _resume(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if task.state not in {"ESCALATION", "PAUSED"} or self._held(task, command):
            return None
        task.state, task.pending, task.claimed = "RUNNING", None, None
        return self._human(task, "resume", command)

    def _rewind(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if task.state not in UNFINISHED or self._held(task, command):
            return None
        task.state, task.pending, task.claimed, task.strategy = (
            "RUNNING",
            None,
            None,
            None,
        )
        return self._human(task, "rewind", command)

    def _skip(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if task.state not in UNFINISHED or self._held(task, command):
            return None
        task.state, task.pending, task.claimed = "SKIPPED", None, None
        return self._human(task, "skip", command)

    def _claim(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if task.state not in WAITING or task.claimed is not None:
            return None  # nothing to claim, or claimed (by them, or by you)
        task.claimed = redact(command.actor)
        return self._human(task, "claim", command)

    def _release(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if (
            task.state not in WAITING
            or task.claimed is None
            or self._held(task, command)
        ):
            return None  # nothing to release, or someone else's claim
        task.claimed = None
        return self._human(task, "release", command)

    def _take_over(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if task.state not in WAITING or not self._held(task, command):
            return None  # nothing claimed, or claimed by you already
        task.claimed = redact(command.actor)
        return self._human(task, "take_over", command)

    def _resolve(self, task: TaskModel, command: Command) -> dict[str, bool] | None:
        if task.state != "HAND_OFF" or self._held(task, command):
            return None
        task.state, task.claimed = RESOLVED[command.resolution], None
        return self._human(task, "resolve", command)

    @staticmethod
    def _human(task: TaskModel, action: str, command: Command) -> dict[str, bool]:
        task.humans.append((HUMAN_EVENTS[action], redact(command.actor)))
        task.events += 1
        return {}

    # ----------------------------------------------------------- the blacklist

    @staticmethod
    def blacklist_match(task: TaskModel, strategy: str) -> str | None:
        """The closest lesson within ``floor(len(strategy) * 0.2)`` edits (the
        first of equals), as the blacklist finds it."""
        cutoff = int(len(strategy) * SIMILARITY_RATIO)
        best: tuple[int, str] | None = None
        for lesson in task.lessons:
            distance = Levenshtein.distance(strategy, lesson)
            if distance <= cutoff and (best is None or distance < best[0]):
                best = (distance, lesson)
        return best[1] if best is not None else None
