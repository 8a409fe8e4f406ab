"""The referee as a Model Context Protocol server: ``devs mcp`` (stdio) and
``/mcp`` in ``devs serve`` (streamable HTTP, behind the API token).

Built on the ``mcp`` package's ``MCPServer`` (version 2). Each tool's input
schema comes from the service's own argument types
(:mod:`devs.domain.values`), so an agent sees the same limits a Python or HTTP
caller meets; a value out of range is a tool error naming the field, and so
is every error of the service (:class:`~devs.domain.DevsError`: its kind and
message, never a traceback).

``run_gate`` is the tool a careful agent should use: it runs the test command
itself, sandboxed (:func:`devs.adapters.sandbox.run_gate`), in the server's
working directory or a folder inside it (``cwd``), and records its result, so
the agent cannot misreport it. The command is the agent's, so it is bounded
(memory, CPU, timeout: the agent may ask less than the server's maxima, never
more; :class:`~devs.adapters.sandbox.GateSettings`), kept out of the store's
folder, and refused where bubblewrap cannot sandbox it, unless the operator
set ``DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES``.
"""

import functools
import inspect
import logging
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from devs.adapters.sandbox import (
    ALLOW_UNSANDBOXED_ENV,
    GateSettings,
    IsolationUnavailable,
    run_gate,
    store_file,
)
from devs.domain import (
    AttemptDecision,
    DevsError,
    EntropyDecision,
    GateDecision,
    InvalidInput,
    Lesson,
    RecoveryService,
    TaskSummary,
)
from devs.domain.redaction import redact
from devs.domain.values import (
    AgentName,
    CommitId,
    EntropyScore,
    ErrorText,
    ExitCode,
    GateName,
    OutputText,
    RcaSummary,
    RunId,
    Strategy,
    TaskId,
)

P = ParamSpec("P")
T = TypeVar("T")

INSTRUCTIONS = """\
devs-recovery referees your work on a task, so that you do not loop on a \
failing strategy. Call start_task once, begin_attempt with your strategy \
before each try (it refuses a strategy that already failed), run the tests \
with run_gate (or report them with record_gate), and read task_status and \
lessons before a new try. When a tool answers that a human is asked \
(escalate, pause, hand_off), stop working on the task."""

DEFAULT_GATE_TIMEOUT = 600

Runner = Callable[[Callable[[], Any]], Awaitable[Any]]
"""Runs a call of the service off the event loop and awaits its value: a
thread in ``devs mcp``, the worker's writer thread in ``devs serve``."""


class GateRunResult(BaseModel):
    """What ``run_gate`` ran and what the referee decided."""

    exit_code: int | None
    timed_out: bool
    duration_seconds: float
    isolation: str
    fallback: str | None = None
    """Why the command ran unsandboxed (the operator allowed it), if it did."""
    output_tail: str
    """The last 4,000 characters of the output (redacted in the log)."""
    decision: GateDecision


Command = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=4_096)]],
    Field(min_length=1, max_length=256),
]


def _tool_errors(call: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """The service's errors as tool errors: kind, message and field."""

    @functools.wraps(call)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await call(*args, **kwargs)
        except DevsError as error:
            field = error.field if isinstance(error, InvalidInput) else None
            where = f" (field {field})" if field else ""
            raise ToolError(f"{error.kind}{where}: {error}") from None

    wrapper.__signature__ = inspect.signature(call)  # type: ignore[attr-defined]
    return wrapper


async def _in_thread(call: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(call)


def build_server(
    service: Callable[[], RecoveryService],
    *,
    commands: Runner | None = None,
    workdir: Path | None = None,
    name: str = "devs-recovery",
    run_gates: bool = True,
) -> MCPServer:
    """The MCP server over the service ``service()`` returns (looked up at
    each call: ``devs serve`` opens its service when the app starts).
    ``commands`` runs the commands (default: a thread); ``workdir`` is where
    ``run_gate`` runs its command (default: the current directory);
    ``run_gates=False`` leaves ``run_gate`` out (a server anyone may call
    must not run their commands)."""
    # MCPServer() configures the root logger (logging.basicConfig with a
    # rich handler) when it has no handler: the host's logging is left as
    # it was (`devs serve` and `devs mcp` set up their own).
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        server = MCPServer(name, instructions=INSTRUCTIONS)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    run = commands or _in_thread

    @server.tool()
    @_tool_errors
    async def start_task(
        task_id: TaskId,
        run_id: RunId | None = None,
        agent: AgentName | None = None,
        last_commit: CommitId | None = None,
    ) -> TaskSummary:
        """Start a task (once): its id, optionally its run, agent and commit."""
        value: TaskSummary = await run(
            lambda: service().start_task(
                task_id, run_id=run_id, agent=agent, last_commit=last_commit
            )
        )
        return value

    @server.tool()
    @_tool_errors
    async def begin_attempt(task_id: TaskId, strategy: Strategy) -> AttemptDecision:
        """Say the strategy of your next try before you make it: `proceed`
        false means it repeats one that already failed (read `directive`)."""
        value: AttemptDecision = await run(
            lambda: service().begin_attempt(task_id, strategy)
        )
        return value

    @server.tool()
    @_tool_errors
    async def record_gate(
        task_id: TaskId,
        exit_code: ExitCode,
        gate: GateName | None = None,
        strategy: Strategy | None = None,
        error: ErrorText | None = None,
        output: OutputText | None = None,
    ) -> GateDecision:
        """Report a test run you ran yourself by its exit code (0 passes;
        null: killed or timed out). Prefer run_gate."""
        value: GateDecision = await run(
            lambda: service().record_gate(
                task_id,
                exit_code,
                gate=gate,
                strategy=strategy,
                error=error,
                output=output,
            )
        )
        return value

    # The bounds an agent's gate meets; a wrong setting is each call's error
    # (naming its variable), the defaults bounding the schema meanwhile.
    settings_error: InvalidInput | None = None
    try:
        limits = GateSettings.from_environ(os.environ)
    except InvalidInput as error:
        limits, settings_error = GateSettings(), error
    home = (workdir or Path.cwd()).resolve()

    async def run_gate_tool(
        task_id: TaskId,
        command: Command,
        cwd: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=4_096,
                description="Where the command runs: a folder inside the "
                "server's working directory (relative to it, or absolute); "
                "default: that directory. Never the store's folder unless "
                "in_store_folder.",
            ),
        ] = None,
        timeout: Annotated[
            float,
            Field(gt=0, le=limits.max_timeout, description="Seconds."),
        ] = min(DEFAULT_GATE_TIMEOUT, limits.max_timeout),
        memory_mb: Annotated[
            int,
            Field(ge=16, le=limits.max_memory_mb, description="MiB of memory."),
        ] = limits.max_memory_mb,
        cpu_seconds: Annotated[
            int,
            Field(ge=1, le=limits.max_cpu_seconds, description="CPU-seconds."),
        ] = limits.max_cpu_seconds,
        in_store_folder: Annotated[
            bool,
            Field(
                description="Run even though cwd is the store's folder: it is "
                "read-only to the command then."
            ),
        ] = False,
        strategy: Strategy | None = None,
    ) -> GateRunResult:
        """Run the test command (an argv list, e.g. ["pytest", "-q"]) sandboxed
        in the server's working directory (or cwd inside it), within the
        memory, CPU and time bounds, and record its result."""
        if settings_error is not None:
            raise settings_error
        where = _gate_folder(home, cwd)
        # Named before it runs: a gate that ran is recorded.
        gate = gate_name(command)
        # The task is checked and the result recorded as commands; the
        # command itself runs in a thread of its own, never holding the
        # writer (a 10-minute test suite would hold every other command).
        await run(lambda: service().require_gate_allowed(task_id))
        store = store_file(service())
        try:
            result = await anyio.to_thread.run_sync(
                lambda: run_gate(
                    command,
                    cwd=where,
                    timeout=timeout,
                    memory_mb=memory_mb,
                    cpu_seconds=cpu_seconds,
                    isolation="auto" if limits.allow_unsandboxed else "require",
                    store=store,
                    in_store_folder=in_store_folder,
                    settings=limits,
                    # Checked again on the folder the gate runs in: another
                    # gate may swap a folder of cwd's path for a symlink.
                    within=home,
                )
            )
        except IsolationUnavailable as error:
            msg = (
                f"{error}; run_gate runs no command unsandboxed unless the "
                f"server's operator sets {ALLOW_UNSANDBOXED_ENV}=1"
            )
            raise IsolationUnavailable(msg) from None
        decision: GateDecision = await run(
            lambda: service().record_gate(
                task_id,
                result.exit_code,
                gate=gate,
                strategy=strategy,
                error=result.error_line,
                output=result.output,
            )
        )
        return GateRunResult(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_seconds=round(result.duration_seconds, 3),
            isolation=result.isolation,
            fallback=result.fallback,
            output_tail=decision_tail(result.output),
            decision=decision,
        )

    if run_gates:
        server.tool(name="run_gate")(_tool_errors(run_gate_tool))

    @server.tool()
    @_tool_errors
    async def report_entropy(task_id: TaskId, score: EntropyScore) -> EntropyDecision:
        """Report how uncertain you are, in [0, 1]; at the threshold a human
        is asked."""
        value: EntropyDecision = await run(
            lambda: service().report_entropy(task_id, score)
        )
        return value

    @server.tool()
    @_tool_errors
    async def log_lesson(
        task_id: TaskId, failed_strategy: Strategy, rca_summary: RcaSummary
    ) -> Lesson:
        """Record a strategy that failed and why: it will be refused again."""
        value: Lesson = await run(
            lambda: service().log_lesson(task_id, failed_strategy, rca_summary)
        )
        return value

    @server.tool()
    @_tool_errors
    async def task_status(task_id: TaskId) -> TaskSummary:
        """The task's state, failures, lessons and pending human session."""
        value: TaskSummary = await _in_thread(lambda: service().task(task_id))
        return value

    @server.tool()
    @_tool_errors
    async def lessons(task_id: TaskId) -> list[Lesson]:
        """The strategies that failed on this task, and why."""
        value: list[Lesson] = await _in_thread(lambda: service().lessons(task_id))
        return value

    return server


def _gate_folder(home: Path, cwd: str | None) -> Path:
    """Where an agent's gate runs: ``cwd`` inside ``home`` (the server's
    working directory; the gate may write there), else ``home`` itself."""
    if cwd is None:
        return home
    if any(ord(c) < 32 or ord(c) == 127 for c in cwd):
        msg = "cwd holds a control character"
        raise InvalidInput(msg, field="cwd")
    try:
        where = (home / cwd).resolve()  # an absolute cwd stays as it is
    except (OSError, RuntimeError) as error:  # changed while resolved, a loop
        msg = f"cwd {cwd!r} cannot be resolved ({error})"
        raise InvalidInput(msg, field="cwd") from None
    if where != home and home not in where.parents:
        msg = f"cwd {cwd!r} is not inside the server's working directory {str(home)!r}"
        raise InvalidInput(msg, field="cwd")
    if not where.is_dir():
        msg = f"cwd {cwd!r} is not a folder in {str(home)!r}"
        raise InvalidInput(msg, field="cwd")
    return where


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
GATE_NAME_MAX = 190


def gate_name(command: list[str]) -> str:
    """The name ``run_gate`` records a command's gate under: the command on
    one line (control characters, a multi-line ``python -c`` script's
    newlines, become a space), redacted and cut to 190 characters."""
    line = _CONTROL.sub(" ", " ".join(command)[: GATE_NAME_MAX * 10])
    name = redact(line)[:GATE_NAME_MAX].strip()
    return name or "gate"


OUTPUT_TAIL = 4_000


def decision_tail(output: str) -> str:
    """The end of a gate's output, redacted, for the agent to read."""
    return redact(output[-OUTPUT_TAIL * 4 :])[-OUTPUT_TAIL:]
