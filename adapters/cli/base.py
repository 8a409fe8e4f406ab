"""The ``devs`` command line: exit codes, shared options, the root group and
the helpers every command group uses to print decisions."""

from __future__ import annotations

import functools
import getpass
import logging
import os
import shlex
import sqlite3
import sys
from collections.abc import Callable, Sequence
from contextlib import closing
from enum import IntEnum
from typing import Any, Literal, ParamSpec, TypeVar
from urllib.parse import quote

import click
import orjson
from click.shell_completion import CompletionItem
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from devs.adapters import presenters
from devs.adapters.config import DB_ENV, DEFAULT_DB, Backend, Settings, open_service
from devs.domain import (
    AlreadyExists,
    AttemptDecision,
    Conflict,
    DevsError,
    GateDecision,
    InvalidInput,
    NotFound,
    Outcome,
    RecoveryService,
    StoreError,
    UnknownRun,
    UnknownTask,
)
from devs.domain.arguments import COMMANDS
from devs.domain.redaction import redact

P = ParamSpec("P")
R = TypeVar("R")


class ExitCode(IntEnum):
    """What a shell loop can branch on."""

    OK = 0  # continue: the command worked, the gate passed, the attempt may proceed
    RETRY = 1  # the gate failed below the thresholds: try again
    USAGE = 2  # the command line was wrong (click's own code)
    ESCALATED = 3  # a human is asked (max retries)
    PAUSED = 4  # a human is asked (blacklisted strategy, entropy limit)
    HANDED_OFF = 5  # the task went to the human queue
    BAD_INPUT = 6  # a value was out of range or malformed; nothing was written
    NOT_FOUND = 7  # an unknown task, run or projection id
    REFUSED = (
        8  # not allowed in the current state (illegal transition); nothing written
    )
    STORE = 9  # the database cannot be used (damaged, locked too long, unreadable),
    # or its read models did not catch up within DEVS_READ_WAIT
    CONFLICT = 10  # other writers won every retry; nothing written, send it again


OUTCOME_CODES = {
    Outcome.ADVANCE: ExitCode.OK,
    Outcome.COMPLETE: ExitCode.OK,
    Outcome.STAY: ExitCode.RETRY,
    Outcome.PAUSE: ExitCode.PAUSED,
    Outcome.ESCALATE: ExitCode.ESCALATED,
    Outcome.HAND_OFF: ExitCode.HANDED_OFF,
}

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, highlight=False)


# ------------------------------------------------------------------ plumbing


class Context:
    """Per-invocation state: the settings (``--db`` over the environment's),
    and the service once opened."""

    def __init__(self, db: str | None) -> None:
        self.db_option = db
        self._settings: Settings | None = None
        self._app: RecoveryService | None = None

    @property
    def settings(self) -> Settings:
        """The environment's settings, ``--db`` taking ``DEVS_DB``'s place
        (``InvalidInput`` naming the variable that is wrong)."""
        if self._settings is None:
            given = {"db": self.db_option} if self.db_option else {}
            self._settings = Settings(**given)
        return self._settings

    @property
    def app(self) -> RecoveryService:
        if self._app is None:
            settings = self.settings
            try:
                self._app = open_service(settings)
            except StoreError as error:
                reason = missing_directory(settings) or str(error)
                msg = f"cannot open {settings.where}: {reason}"
                raise StoreError(msg) from None
        return self._app

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


def missing_directory(settings: Settings) -> str | None:
    """Why a SQLite file cannot be opened when its directory does not exist
    (SQLite's own words, "unable to open database file", do not say)."""
    if settings.backend is not Backend.SQLITE or settings.db.startswith("file:"):
        return None
    folder = os.path.dirname(os.path.abspath(settings.db))
    if os.path.isdir(folder):
        return None
    shown = os.path.dirname(settings.db) or folder
    return (
        f"the directory {shown!r} does not exist: create it "
        f"(mkdir -p {shlex.quote(shown)}), or choose a file in another one "
        f"with --db or {DB_ENV}"
    )


# The kind a failure without a service error names in its JSON object: the
# kind of the service's error class with that exit code (errors.py).
KINDS = {
    ExitCode.USAGE: "usage",
    ExitCode.BAD_INPUT: InvalidInput.kind,
    ExitCode.NOT_FOUND: NotFound.kind,
    ExitCode.REFUSED: DevsError.kind,
    ExitCode.STORE: StoreError.kind,
    ExitCode.CONFLICT: Conflict.kind,
}


def fail(
    message: str,
    code: ExitCode,
    *,
    kind: str | None = None,
    field: str | None = None,
    as_json: bool | None = None,
) -> None:
    """Say what went wrong as one line on stderr (``devs: error: …``) and
    exit with ``code``. A command given ``--json`` also writes the error as a
    JSON object on stdout (:func:`error_object`), so a program reading its
    stdout reads JSON whether the command worked or not."""
    if as_json is None:
        current = click.get_current_context(silent=True)
        as_json = bool(current is not None and current.params.get("as_json"))
    if as_json:
        emit_json(error_object(message, code, kind=kind, field=field))
    err.print(f"devs: error: {message}", markup=False, soft_wrap=True)
    sys.exit(int(code))


def error_object(
    message: str, code: ExitCode, *, kind: str | None = None, field: str | None = None
) -> dict[str, Any]:
    """``{"error": {"kind", "message", "exit_code", "field"}}``: ``kind`` as
    the HTTP API names it (``not_found``, ``invalid_input``, ...; ``usage``
    for a wrong command line), ``field`` the value that was wrong, if known."""
    return {
        "error": {
            "kind": kind or KINDS.get(code, DevsError.kind),
            "message": message,
            "exit_code": int(code),
            "field": field,
        }
    }


def error_line(error: DevsError) -> str:
    """The error as one line, in the command line's words: an unknown task or
    run names the ``devs`` command that starts it, and one started again the
    commands that go on with it, where the service's own message names its
    methods (``start_task()``, ``begin_attempt()``, ...)."""
    if isinstance(error, UnknownTask):
        message = redact(
            f"unknown task {error.task_id!r}: start it with "
            f"`devs task start {shlex.quote(error.task_id)}` first"
        )
    elif isinstance(error, UnknownRun):
        message = redact(
            f"unknown run {error.run_id!r}: start it with "
            f"`devs run start {shlex.quote(error.run_id)} --dag FILE` first"
        )
    elif isinstance(error, AlreadyExists) and error.task_id is not None:
        task = shlex.quote(error.task_id)
        message = str(
            AlreadyExists.task(
                error.task_id,
                next_step=f"record its attempts with `devs attempt {task} STRATEGY`, "
                f"or show it with `devs task show {task}`",
            )
        )
    elif isinstance(error, AlreadyExists) and error.run_id is not None:
        run = shlex.quote(error.run_id)
        message = str(
            AlreadyExists.run(
                error.run_id,
                next_step="start its tasks with "
                f"`devs task start TASK_ID --run {run}`, "
                f"or show it with `devs run show {run}`",
            )
        )
    else:
        message = str(error)  # redacted already: DevsError redacts its message
    return " ".join(message.split())


def handles_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the service's errors into a one-line message and a documented code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except DevsError as error:  # its class says its code (errors.py)
            fail(
                error_line(error),
                ExitCode(error.exit_code),
                kind=error.kind,
                field=error.field if isinstance(error, InvalidInput) else None,
            )
            raise  # unreachable: fail exits

    return wrapper


def emit_json(value: Any) -> None:
    def default(obj: Any) -> Any:
        if isinstance(obj, BaseModel):
            return obj.model_dump(mode="json")
        raise TypeError

    click.echo(
        orjson.dumps(value, default=default, option=orjson.OPT_INDENT_2).decode()
    )


def plain(text: str) -> None:
    """Print exact text to stdout (no markup, no wrapping)."""
    click.echo(text)


def default_actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


COMPLETIONS_MAX = 200


def _task_ids_of(path: str, prefix: str) -> list[str]:
    """The task ids starting with ``prefix`` in the devs store at ``path``,
    read-only (``mode=ro``: the file is never written, its journal mode never
    changed); none when the file is not a devs store (no ``tasks`` table of
    the task index)."""
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=0.2)) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        if not {"stored_events", "tasks"} <= tables:
            return []
        rows = db.execute(  # the task index (projections/tasks.py), by id
            "SELECT id FROM tasks WHERE id >= ? ORDER BY id LIMIT ?",
            (prefix, COMPLETIONS_MAX * 5),
        )
        found = [task_id for (task_id,) in rows if task_id.startswith(prefix)]
    return found


def complete_task_id(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The task ids of the configured store (``--db`` as typed so far, else
    the environment's) that start with ``incomplete``, for shell completion
    (``_DEVS_COMPLETE``; docs/cli.md). Reads a SQLite file read-only and
    nothing else: never creates or changes a store (a file that is not a
    devs store, or a PostgreSQL database, completes nothing); and it says
    nothing (no warning, no error, nothing of a setting) whatever goes wrong,
    as a completion must not write to the terminal."""
    root = ctx.find_root()
    db = root.params.get("db")
    logging.disable(logging.CRITICAL)
    try:
        settings = Settings(**({"db": db} if db else {}))
        if settings.backend is not Backend.SQLITE or not os.path.isfile(settings.db):
            # PostgreSQL or memory: nothing read (a completion opens no
            # connection that could create a schema); a missing file: none.
            return []
        found = _task_ids_of(settings.db, incomplete)
    except Exception:
        return []
    finally:
        logging.disable(logging.NOTSET)
    return [CompletionItem(task_id) for task_id in found[:COMPLETIONS_MAX]]


def task_argument(**attrs: Any) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The ``TASK_ID`` argument of a command that acts on an existing task,
    completing its ids in the shell (:func:`complete_task_id`)."""
    return click.argument("task_id", shell_complete=complete_task_id, **attrs)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
actor_option = click.option(
    "--actor", default=default_actor, show_default="the OS user", help="Who acts."
)


# ------------------------------------------------- options a command declares


@functools.cache
def _command_schema(command: str) -> dict[str, Any]:
    """``command``'s arguments as JSON Schema: what ``/openapi.json`` and the
    MCP tools show of them."""
    if command not in COMMANDS:
        msg = f"no command {command!r} in devs.domain.arguments.COMMANDS"
        raise KeyError(msg)
    return COMMANDS[command].model_json_schema()


def field_schema(command: str, field: str) -> dict[str, Any]:
    """The JSON Schema of ``field`` of ``command``'s model
    (:data:`~devs.domain.arguments.COMMANDS`; ``policy.escalation_threshold``:
    a field of a nested model): its type and limits, a null it may also be
    left out, its ``description`` kept."""
    schema = _command_schema(command)
    where = schema
    for name in field.split("."):
        ref = where.get("$ref") or next(
            (part["$ref"] for part in where.get("allOf", ()) if "$ref" in part), None
        )
        if ref is not None:
            where = schema["$defs"][ref.rsplit("/", 1)[-1]]
        properties = where.get("properties", {})
        if name not in properties:
            msg = f"{command} has no field {field!r} (it has: {', '.join(properties)})"
            raise KeyError(msg)
        where = properties[name]
    kinds = [kind for kind in where.get("anyOf", [where]) if kind.get("type") != "null"]
    found = dict(kinds[0]) if len(kinds) == 1 else {}
    found["description"] = where.get("description", "")
    if "default" in where:
        found["default"] = where["default"]
    return found


def help_of(description: str) -> str:
    """A field's description as an option's help: a sentence."""
    text = description.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def type_of(schema: dict[str, Any], *, ranges: bool = True) -> click.ParamType[Any]:
    """The click type of a field's schema: its values (``enum``) as a
    ``Choice``, its range as an ``IntRange`` or a ``FloatRange`` (``ranges``:
    else the bare number, its range left to the service), else text."""
    if "enum" in schema:
        return click.Choice([str(value) for value in schema["enum"]])
    kind = schema.get("type")
    if kind == "string":
        return click.STRING
    if kind not in ("integer", "number"):
        msg = f"a field of type {kind or 'several'} is not one option's value"
        raise ValueError(msg)
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if not ranges or (low is None and high is None):
        return click.INT if kind == "integer" else click.FLOAT
    open_low, open_high = "exclusiveMinimum" in schema, "exclusiveMaximum" in schema
    if kind == "integer":
        return click.IntRange(low, high, min_open=open_low, max_open=open_high)
    return click.FloatRange(low, high, min_open=open_low, max_open=open_high)


def field_option(
    *decls: str,
    command: str,
    field: str,
    more: str = "",
    ranges: bool = True,
    **attrs: Any,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A ``click.option`` for an option that is ``field`` of ``command``'s
    arguments (:data:`~devs.domain.arguments.COMMANDS`): its help is the
    field's description (then ``more``, what only the command line has to
    say), its type the field's values or range (``ranges=False``: the
    service checks the range and refuses in its words, exit 6), its default
    the field's unless ``attrs`` give one; the words and limits of the
    HTTP API and the MCP tools, never written again here."""
    schema = field_schema(command, field)
    said = help_of(schema["description"])
    attrs.setdefault("help", f"{said} {more}" if more else said)
    attrs.setdefault("type", type_of(schema, ranges=ranges))
    if "default" in schema and schema["default"] is not None:
        attrs.setdefault("default", schema["default"])
    return click.option(*decls, **attrs)


pass_context = click.make_pass_decorator(Context)


class OnceEach(logging.Filter):
    """Lets each distinct message through once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


class UsageLine(click.UsageError):
    """A wrong command line, said as every other error is: one line on
    stderr, ``devs: error: … (see devs status --help)``, exit 2 (and, when
    the line asked for ``--json``, the JSON error object on stdout)."""

    def __init__(self, error: click.UsageError, as_json: bool) -> None:
        super().__init__(error.format_message(), error.ctx)
        self.as_json = as_json

    def show(self, file: Any = None) -> None:
        message = " ".join(self.format_message().split()).rstrip(".")
        if message[:2].istitle():  # click's "No such option" reads "no such …"
            message = message[0].lower() + message[1:]
        where = self.ctx.command_path if self.ctx is not None else "devs"
        line = f"{message} (see {where} --help)"
        if self.as_json:
            click.echo(
                orjson.dumps(
                    error_object(line, ExitCode.USAGE), option=orjson.OPT_INDENT_2
                ).decode()
            )
        click.echo(f"devs: error: {line}", err=True)


class Devs(click.Group):
    """The root group: a usage error anywhere below it is a
    :class:`UsageLine`."""

    @staticmethod
    def _line(error: click.UsageError, args: Sequence[str]) -> click.UsageError:
        if isinstance(error, click.exceptions.NoArgsIsHelpError):
            return error  # `devs task` alone: the group's help
        words = list(args)
        before = words[: words.index("--")] if "--" in words else words
        return UsageLine(error, "--json" in before)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        given = list(args)
        try:
            ctx = super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            raise self._line(error, given) from None
        ctx.meta[ARGS_KEY] = given
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UsageLine:
            raise
        except click.UsageError as error:
            raise self._line(error, ctx.meta.get(ARGS_KEY, ())) from None


ARGS_KEY = "devs.args"


@click.group(cls=Devs, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"SQLite file (default: ${DB_ENV}, else ./{DEFAULT_DB}).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Also write each decision as a JSON line to stderr.",
)
@click.version_option(package_name="devs-recovery")
@click.pass_context
def cli(ctx: click.Context, db: str | None, verbose: bool) -> None:
    """devs-recovery: keep AI coding agents out of failure loops."""
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        decisions = logging.getLogger("devs.decisions")
        decisions.addHandler(handler)
        decisions.setLevel(logging.INFO)
        ctx.call_on_close(lambda: decisions.removeHandler(handler))
    # Repairs and skipped events of the read models are said on stderr.
    repairs = logging.StreamHandler(sys.stderr)
    repairs.setFormatter(logging.Formatter("devs: warning: %(message)s"))
    repairs.setLevel(logging.WARNING)
    read_models = logging.getLogger("devs.read_models")
    read_models.addHandler(repairs)
    ctx.call_on_close(lambda: read_models.removeHandler(repairs))
    # A setting ignored (an invalid threshold) is said once, however many
    # times a service is opened (`devs serve` opens one to check, then its
    # worker another).
    ignored = logging.StreamHandler(sys.stderr)
    ignored.setFormatter(logging.Formatter("devs: warning: %(message)s"))
    ignored.setLevel(logging.WARNING)
    ignored.addFilter(OnceEach())
    policy = logging.getLogger("devs.policy")
    policy.addHandler(ignored)
    ctx.call_on_close(lambda: policy.removeHandler(ignored))
    context = Context(db)
    ctx.obj = context
    ctx.call_on_close(context.close)


TIME = "%Y-%m-%d %H:%M:%S"


def to_terminal() -> bool:
    """Whether stdout is a terminal (a person reads it) rather than a pipe
    or a file (a program does)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced, or closed
        return False


def shortened(text: str, limit: int) -> str:
    """An agent's text for a table cell: on one line, readable
    (:func:`presenters.one_line`), and cut to ``limit`` characters on a
    terminal only; a program reading a pipe gets it whole."""
    return presenters.one_line(text, limit if to_terminal() else len(text) + 1)


_TSV_BREAKS = str.maketrans({"\t": " ", "\n": " ", "\r": " "})


def show_table(
    title: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    whole: Sequence[str] = (),
    right: Sequence[str] = (),
) -> None:
    """A table: drawn for a person on a terminal (the ``whole`` columns, ids
    to copy, never cut short on a narrow one: the others give way; the
    ``right`` ones right-aligned); to a pipe or a file, as ``gh`` and
    ``kubectl`` do, tab-separated lines, a header of the column names then
    one line per row, every value whole (a tab or line break in one becomes
    a space), and no title."""
    if not to_terminal():
        for cells in (columns, *rows):
            plain("\t".join(cell.translate(_TSV_BREAKS) for cell in cells))
        return
    table = Table(title=title)
    for index, column in enumerate(columns):
        justify: Literal["left", "right"] = "right" if column in right else "left"
        if column in whole and rows:
            width = max(len(cells[index]) for cells in rows)
            table.add_column(column, no_wrap=True, min_width=width, justify=justify)
        else:
            table.add_column(column, justify=justify)
    for cells in rows:
        table.add_row(*cells)
    out.print(table)


def show_rows(
    items: Sequence[Any],
    as_json: bool,
    *,
    empty: str,
    title: str,
    columns: Sequence[str],
    row: Callable[[Any], Sequence[str]],
    whole: Sequence[str] = (),
) -> None:
    """A listing: JSON for tooling, else a table (:func:`show_table`), or a
    line when it is empty."""
    if as_json:
        emit_json(items)
        return
    if not items:
        plain(empty)
        return
    show_table(title, columns, [row(item) for item in items], whole=whole)


# ------------------------------------------------------------ decision output


def stop_block(app: RecoveryService, decision: AttemptDecision | GateDecision) -> str:
    """The escalation or hand-off block for a decision that stopped the agent."""
    if decision.outcome is Outcome.ESCALATE and decision.report is not None:
        return presenters.escalation_block(decision.report)
    if decision.outcome is Outcome.HAND_OFF:
        payload = app.task(decision.task_id).handoff
        if payload is not None:
            return presenters.handoff_block(payload)
    return ""


def show_attempt(
    app: RecoveryService, decision: AttemptDecision, strategy: str, as_json: bool
) -> None:
    if as_json:
        emit_json(decision)
    else:
        plain(presenters.attempt_line(decision))
        if decision.blacklisted:
            plain(presenters.blacklist_block(decision, strategy))
        if block := stop_block(app, decision):
            plain(block)
    if decision.proceed or decision.outcome is None:
        sys.exit(int(ExitCode.OK))
    sys.exit(int(OUTCOME_CODES[decision.outcome]))


def show_gate(app: RecoveryService, decision: GateDecision, as_json: bool) -> None:
    if as_json:
        emit_json(decision)
    else:
        plain(presenters.gate_line(decision))
        if block := stop_block(app, decision):
            plain(block)
    sys.exit(int(OUTCOME_CODES[decision.outcome]))


def acted(result: Any, as_json: bool, text: str) -> None:
    if as_json:
        emit_json(result)
    else:
        plain(text)
