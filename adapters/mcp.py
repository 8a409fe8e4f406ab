"""The referee as a Model Context Protocol server: ``devs mcp`` (stdio) and
``/mcp`` in ``devs serve`` (streamable HTTP, behind the API token).

Built on the ``mcp`` package's ``MCPServer`` (version 2). Each tool's input
schema comes from the service's own argument types, so an agent meets the
limits a Python or HTTP caller meets, and every error is a tool error naming
the field or the service's error, never a traceback. ``run_gate`` runs the
test command itself, sandboxed (:class:`devs.adapters.gate_run.GateCall`), so
the agent cannot misreport it (docs/agents.md, docs/security.md).
"""

import functools
import inspect
import logging
import os
import typing
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from devs.adapters.gate_run import GateCall
from devs.adapters.sandbox import (
    ALLOW_UNSANDBOXED_ENV,
    GateSettings,
    IsolationUnavailable,
    store_file,
)
from devs.domain import (
    DevsError,
    GateDecision,
    InvalidInput,
    Lesson,
    RecoveryService,
    SpendReport,
    TaskSummary,
)
from devs.domain.application import unchecked
from devs.domain.arguments import COMMANDS
from devs.domain.redaction import redact
from devs.domain.values import (
    Strategy,
    TaskId,
    refusal,
)

VERSION = metadata.version("devs-recovery")
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


TheTask = Annotated[TaskId, Field(description="the task's id")]
"""A query's or ``run_gate``'s task (a command's comes with its model)."""

Command = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=4_096)]],
    Field(
        min_length=1,
        max_length=256,
        description='the test command, as an argv list (["pytest", "-q"])',
    ),
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


COMMAND_TOOLS = {
    "start_task": "Start a task (once): its id, optionally its run, agent and commit.",
    "begin_attempt": (
        "Say the strategy of your next try before you make it: `proceed` "
        "false means it repeats one that already failed (read `directive`)."
    ),
    "record_gate": (
        "Report a test run you ran yourself by its exit code (0 passes; "
        "null: killed or timed out). Prefer run_gate."
    ),
    "report_entropy": (
        "Report how uncertain you are, in [0, 1]; at the threshold a human is asked."
    ),
    "log_lesson": "Record a strategy that failed and why: it will be refused again.",
    "record_usage": (
        "Report a model call's tokens (and its cost, if you know it): at the "
        "task's budget the task stops for a human. Give usage_id (the "
        "message's id) so a usage reported twice counts once."
    ),
}
"""The service's commands an agent calls as tools, with what each tool tells
the agent; their arguments are the commands' (:data:`COMMANDS`)."""


def _command_tool(
    command: str,
    service: Callable[[], RecoveryService],
    run: Runner,
) -> Callable[..., Awaitable[Any]]:
    """The tool of the service's ``command``: its parameters are the fields of
    the command's model, its answer the method's; the arguments come
    validated by the tool's strict input model (:func:`_strict_tools`), so the
    command runs :func:`~devs.domain.application.unchecked`."""
    method = getattr(RecoveryService, command)

    def call(arguments: dict[str, Any]) -> Any:
        served = service()  # its own class's command (a subclass may differ)
        return unchecked(getattr(type(served), command))(served, **arguments)

    async def tool(**arguments: Any) -> Any:
        return await run(lambda: call(arguments))

    tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=info.annotation,
                default=inspect.Parameter.empty if info.is_required() else info.default,
            )
            for name, info in COMMANDS[command].model_fields.items()
        ],
        return_annotation=typing.get_type_hints(method)["return"],
    )
    tool.__name__ = tool.__qualname__ = command
    tool.__doc__ = COMMAND_TOOLS[command]
    return _tool_errors(tool)


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
        server = MCPServer(name, instructions=INSTRUCTIONS, version=VERSION)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    run = commands or _in_thread

    for command in ("start_task", "begin_attempt", "record_gate"):
        server.tool(name=command)(_command_tool(command, service, run))

    # The bounds an agent's gate meets; a wrong setting is each call's error
    # (naming its variable), the defaults bounding the schema meanwhile.
    settings_error: InvalidInput | None = None
    try:
        limits = GateSettings.from_environ(os.environ)
    except InvalidInput as error:
        limits, settings_error = GateSettings.from_environ({}), error
    home = (workdir or Path.cwd()).resolve()

    async def run_gate_tool(
        task_id: TheTask,
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
        strategy: Annotated[
            Strategy | None, Field(description="the strategy this run tries")
        ] = None,
    ) -> GateRunResult:
        """Run the test command (an argv list, e.g. ["pytest", "-q"]) sandboxed
        in the server's working directory (or cwd inside it), within the
        memory, CPU and time bounds, and record its result."""
        if settings_error is not None:
            raise settings_error
        # Named after its command, as the hooks name an agent's gate
        # (gate_run.command_line): a gate that ran is recorded.
        call = GateCall(
            task_id,
            tuple(command),
            strategy=strategy,
            cwd=_gate_folder(home, cwd),
            timeout=timeout,
            memory_mb=memory_mb,
            cpu_seconds=cpu_seconds,
            isolation="auto" if limits.allow_unsandboxed else "require",
            in_store_folder=in_store_folder,
            settings=limits,
            # Checked again on the folder the gate runs in: another gate may
            # swap a folder of cwd's path for a symlink.
            within=home,
        )
        # The task is checked and the result recorded as commands; the
        # command itself runs in a thread of its own, never holding the
        # writer (a 10-minute test suite would hold every other command).
        await run(lambda: call.check(service()))
        store = store_file(service())
        try:
            result = await anyio.to_thread.run_sync(lambda: call.run(store))
        except IsolationUnavailable as error:
            msg = (
                f"{error}; run_gate runs no command unsandboxed unless the "
                f"server's operator sets {ALLOW_UNSANDBOXED_ENV}=1"
            )
            raise IsolationUnavailable(msg) from None
        decision: GateDecision = await run(lambda: call.record(service(), result))
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
    for command in ("report_entropy", "log_lesson", "record_usage"):
        server.tool(name=command)(_command_tool(command, service, run))

    @server.tool()
    @_tool_errors
    async def task_status(task_id: TheTask) -> TaskSummary:
        """The task's state, failures, lessons and pending human session."""
        value: TaskSummary = await _in_thread(lambda: service().task(task_id))
        return value

    @server.tool()
    @_tool_errors
    async def lessons(task_id: TheTask) -> list[Lesson]:
        """The strategies that failed on this task, and why."""
        value: list[Lesson] = await _in_thread(lambda: service().lessons(task_id))
        return value

    @server.tool()
    @_tool_errors
    async def task_spend(task_id: TheTask) -> SpendReport:
        """What the task spent on model calls (money and tokens), its
        budgets, and each model's share."""
        value: SpendReport = await _in_thread(lambda: service().task_spend(task_id))
        return value

    _strict_tools(server)
    _no_empty_capabilities(server)
    return server


READ_ONLY = ToolAnnotations(readOnlyHint=True, idempotentHint=True, openWorldHint=False)
RECORDS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False
)
STARTS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
)
RUNS_COMMAND = ToolAnnotations(
    readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True
)
ANNOTATIONS = {
    "start_task": STARTS,
    "begin_attempt": RECORDS,
    "record_gate": RECORDS,
    "run_gate": RUNS_COMMAND,
    "report_entropy": RECORDS,
    "log_lesson": RECORDS,
    "record_usage": RECORDS,  # idempotent only with a usage_id
    "task_status": READ_ONLY,
    "lessons": READ_ONLY,
    "task_spend": READ_ONLY,
}
"""What each tool does to the world, for a client deciding what to confirm:
queries only read; a command records (never undoes anything); ``run_gate``
runs the agent's own command (sandboxed, but a command it is)."""


class _StrictArguments(ArgModelBase):
    """A tool's arguments: JSON's types as they are, nothing unknown."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", strict=True)


class _Unparsed(FuncMetadata):
    """Hands a tool its arguments as they came: the tool checks them itself
    (:func:`_strict_tools`), to refuse them in the caller's words."""

    def validate_arguments(
        self, arguments_to_validate: dict[str, Any]
    ) -> dict[str, Any]:
        return dict(arguments_to_validate)


def _strict_tools(server: MCPServer) -> None:
    """Every tool's input as its command declares it: the fields of the
    command's model (:data:`devs.domain.arguments.COMMANDS`: their limits,
    patterns and descriptions) or, for a query, the tool's own typed
    parameters; strict (``"2"`` is not an exit code) and closed (a misspelled
    argument is refused, not dropped). A refused argument is a tool error
    that names it, in the words of its type; the tool's annotations say what
    it does to the world."""
    for tool in server._tool_manager.list_tools():
        declared = COMMANDS.get(tool.name)
        fields = (declared or tool.fn_metadata.arg_model).model_fields
        strict: type[BaseModel] = create_model(  # type: ignore[call-overload]
            f"{tool.name}_arguments",
            __base__=_StrictArguments,
            __doc__=tool.description,
            **{name: (info.annotation, info) for name, info in fields.items()},
        )
        tool.fn = _checked(strict, tool.fn)
        tool.fn_metadata = _Unparsed(
            arg_model=strict,
            output_schema=tool.fn_metadata.output_schema,
            output_model=tool.fn_metadata.output_model,
            wrap_output=tool.fn_metadata.wrap_output,
        )
        tool.parameters = strict.model_json_schema(by_alias=True)
        tool.annotations = ANNOTATIONS[tool.name]


def _checked(
    strict: type[BaseModel], call: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    async def checked(**arguments: Any) -> Any:
        try:
            values = strict.model_validate(arguments)
        except ValidationError as failure:
            error = refusal(strict, failure)
            raise ToolError(f"{error.kind} (field {error.field}): {error}") from None
        return await call(**{name: getattr(values, name) for name in arguments})

    return checked


def _no_empty_capabilities(server: MCPServer) -> None:
    """Advertise no prompts and no resources: the server has none, and a
    client that sees the capabilities asks for lists that are always empty."""
    handlers = server._lowlevel_server._request_handlers
    for method in (
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/read",
        "resources/templates/list",
    ):
        handlers.pop(method, None)


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


OUTPUT_TAIL = 4_000


def decision_tail(output: str) -> str:
    """The end of a gate's output, redacted, for the agent to read."""
    return redact(output[-OUTPUT_TAIL * 4 :])[-OUTPUT_TAIL:]
