"""Input validation for everything a caller hands the service.

Each kind of argument is an ``Annotated`` type: pydantic's own constraints plus
a small ``AfterValidator`` where pydantic has none, and a :class:`Wording` that
turns pydantic's error into a message naming the argument (``task_id must not
be empty``); :func:`validated` checks a function's arguments with them. A gate's
error and output are hostile input that must not lose the gate, so they are
cut (:func:`cut`), never refused; every other text over its limit is refused.
The limits and messages: docs/python-api.md, docs/configuration.md.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple, ParamSpec, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    validate_call,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, ErrorDetails, PydanticCustomError
from rapidfuzz import fuzz
from rapidfuzz import process as fuzzy

from devs.domain.chart import StateValue, TaskState
from devs.domain.errors import InvalidInput
from devs.domain.names import (
    DeliveryState,
    DeliveryStateValue,
    Resolution,
    ResolutionValue,
    StopScope,
    StopScopeValue,
)
from devs.domain.redaction import redact, secret_kind

__all__ = [
    "DAG_MAX_NODES",
    "DELIVERY_STATES",
    "ERROR_MAX",
    "EXIT_CODE_MAX",
    "EXIT_CODE_MIN",
    "ID_MAX",
    "LIMIT_MAX",
    "NAME_MAX",
    "NOT_KEPT",
    "OUTPUT_MAX",
    "POSITION_MAX",
    "REASON_MAX",
    "RESOLUTIONS",
    "STATES",
    "STRATEGY_MAX",
    "SUMMARY_MAX",
    "TOKENS_MAX",
    "USD_MAX",
    "Actor",
    "AgentName",
    "AnsweredVersion",
    "AwareTime",
    "BudgetTokens",
    "BudgetUsd",
    "CommitId",
    "CostUsd",
    "Dag",
    "DeliveryStateName",
    "EntropyScore",
    "ErrorText",
    "ExitCode",
    "GateName",
    "Limit",
    "Links",
    "MessageId",
    "ModelName",
    "NodeId",
    "OutputText",
    "Position",
    "RcaSummary",
    "Reason",
    "ResolutionName",
    "RunId",
    "StateName",
    "StopScopeName",
    "Strategy",
    "TaskId",
    "TokenCount",
    "UsageId",
    "Version",
    "Wording",
    "cut",
    "parse_time",
    "refusal",
    "valid_position",
    "validated",
    "whole",
]

ID_MAX = 200
NAME_MAX = 200
STRATEGY_MAX = 4_000
SUMMARY_MAX = 16_000
REASON_MAX = 4_000
ERROR_MAX = 100_000  # a gate's error: longer is cut to this, never refused
OUTPUT_MAX = 10_000_000  # a gate's output: longer is cut to this, never refused
DAG_MAX_NODES = 10_000
EXIT_CODE_MIN = -(2**31)
EXIT_CODE_MAX = 2**32 - 1
LIMIT_MAX = 10_000

P = ParamSpec("P")
R = TypeVar("R")

Loc = tuple[int | str, ...]
"""Where an error sits inside one argument (empty: the argument itself)."""

# A character class: one linear scan, no backtracking. Only ever run on strings
# already known to be at most ID_MAX / NAME_MAX characters long.
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def _describe(value: object) -> str:
    """``repr(value)``, cut to 60 characters; never raises."""
    try:
        text = repr(value)
    except Exception:  # e.g. an int over sys.get_int_max_str_digits() digits
        text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= 60 else text[:57] + "..."


def _got(value: object) -> str:
    return f"{type(value).__name__} {_describe(value)}"


# ============================================================== the rules
#
# Each raises a PydanticCustomError whose message completes "<name> ...".

_OWN_ERRORS = frozenset(
    {"blank", "control_characters", "surrounding_whitespace", "credential"}
)


def _not_blank(value: str) -> str:
    # Empty strings never get here (min_length=1); isspace() stops at the first
    # non-space character, so ordinary text costs next to nothing.
    if value.isspace():
        raise PydanticCustomError("blank", "must not be empty")
    return value


def _one_line(value: str) -> str:
    if _CONTROL_CHARS.search(value):
        raise PydanticCustomError(
            "control_characters", "must not contain control characters"
        )
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError(
            "control_characters", "must not contain control characters"
        )
    return value


def _trimmed(value: str) -> str:
    # Non-empty here (min_length=1); same test as value != value.strip().
    if value[0].isspace() or value[-1].isspace():
        raise PydanticCustomError(
            "surrounding_whitespace",
            "must not start or end with whitespace: {value}",
            {"value": _describe(value)},
        )
    return value


def _no_credential(value: str) -> str:
    # Ids are stored and shown as they are: one that holds a credential is
    # refused (without echoing it) rather than rewritten into another id.
    kind = secret_kind(value)
    if kind is not None:
        raise PydanticCustomError(
            "credential",
            "looks like it holds a credential ({kind}); ids are stored as given, "
            "so it is refused",
            {"kind": kind},
        )
    return value


def _distinct_prerequisites(
    graph: Mapping[str, Sequence[str]],
) -> dict[str, tuple[str, ...]]:
    return {node: tuple(dict.fromkeys(prereqs)) for node, prereqs in graph.items()}


# ============================================================ the wording


@dataclass(frozen=True, slots=True)
class Wording:
    """How :class:`InvalidInput` words a refused argument of an ``Annotated`` type.

    ``explain(name, error, loc)`` gets the parameter's name, pydantic's first
    error and where that error sits inside the argument, and returns the message.
    """

    explain: Callable[[str, ErrorDetails, Loc], str]


def _generic(name: str, error: ErrorDetails, loc: Loc) -> str:
    return f"{name} is invalid: {error['msg']}"


def _text(name: str, error: ErrorDetails, loc: Loc) -> str:
    kind, value = error["type"], error["input"]
    if kind in _OWN_ERRORS:
        return f"{name} {error['msg']}"
    if kind == "string_type":
        return f"{name} must be a string, got {_got(value)}"
    if kind == "string_unicode":
        return f"{name} must be valid Unicode text (no lone surrogates)"
    if kind == "string_too_short":
        return f"{name} must not be empty"
    if kind == "string_too_long":
        limit = error.get("ctx", {})["max_length"]
        return f"{name} is {len(value):,} characters long; the limit is {limit:,}"
    return _generic(name, error, loc)


def _exit_code(name: str, error: ErrorDetails, loc: Loc) -> str:
    value = error["input"]
    if error["type"] == "int_type":
        return f"{name} must be an integer or None, got {_got(value)}"
    return (
        f"{name} {_describe(value)} is out of range [{EXIT_CODE_MIN}, {EXIT_CODE_MAX}]"
    )


def _score(name: str, error: ErrorDetails, loc: Loc) -> str:
    kind, value = error["type"], error["input"]
    if kind == "finite_number":
        return f"{name} must be a finite number in [0, 1], got {float(value)}"
    if kind == "float_type":
        if isinstance(value, int) and not isinstance(value, bool):
            # An int too large for a float: a number, just far out of range.
            return f"{name} {_describe(value)} is out of range [0, 1]"
        return f"{name} must be a number, got {_got(value)}"
    return f"{name} {float(value)} is out of range [0, 1]"


def _version(name: str, error: ErrorDetails, loc: Loc) -> str:
    return f"{name} must be an integer, got {type(error['input']).__name__}"


def _position(name: str, error: ErrorDetails, loc: Loc) -> str:
    value = error["input"]
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f"{name} {_describe(value)} is out of range [0, {POSITION_MAX:,}]"
    return f"{name} must be a non-negative integer, got {_describe(value)}"


def _limit(name: str, error: ErrorDetails, loc: Loc) -> str:
    return (
        f"{name} must be an integer in [1, {LIMIT_MAX}], "
        f"got {_describe(error['input'])}"
    )


def _dag(name: str, error: ErrorDetails, loc: Loc) -> str:
    kind, value = error["type"], error["input"]
    if not loc:  # the mapping itself
        if kind == "dict_type":
            return (
                f"{name} must be a mapping of node to prerequisites, "
                f"got {type(value).__name__}"
            )
        if kind == "too_short":
            return f"{name} must have at least one node"
        if kind == "too_long":
            return f"{name} has {len(value):,} nodes; the limit is {DAG_MAX_NODES:,}"
        return _generic(name, error, loc)
    node = loc[0]
    if len(loc) == 1:  # a node's prerequisites are not a sequence of ids
        return (
            f"prerequisites of {name} node {node!r} must be a list of node ids, "
            f"got {type(value).__name__}"
        )
    if loc[1] == "[key]":
        return _text(f"{name} node", error, ())
    return _text(f"prerequisite of {node!r}", error, ())


_TEXT = Wording(_text)


class _NotKept:
    """Metadata of a type whose values :func:`validated` must not keep in
    memory, not even when clean (pydantic ignores it)."""

    __slots__ = ()


NOT_KEPT = _NotKept()
"""In an ``Annotated`` type: a call taking such an argument is never
remembered by :func:`validated` (an idempotency key or a request is kept only
as its SHA-256, :mod:`devs.domain.receipt`)."""

# ====================================================== what the schema says


@dataclass(frozen=True, slots=True)
class Pattern:
    """In an ``Annotated`` string type: the regular expression its JSON Schema
    gives (``pattern``), so that ``/openapi.json`` and the MCP tools say what
    the type's rules check. Validation is the rules' (their words name what
    was wrong); this only describes them to a client. ECMA-262 syntax, with no
    look-around, so that schema-driven generators (schemathesis, hypothesis)
    can produce values from it."""

    regex: str

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        described = handler(schema)
        described["pattern"] = self.regex
        return described


SPACES = (
    r"\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f"
    r"\u205f\u3000"
)
"""The characters ``str.isspace()`` calls spaces, as a regular expression's
class: a pattern's ``\\s`` is another set (ECMA-262's leaves out U+0085 and
takes U+FEFF), and a schema must say exactly what the rules refuse."""
_LINE_CHAR = r"[^\x00-\x1f\x7f]"
_VISIBLE_LINE_CHAR = rf"[^{SPACES}\x00-\x1f\x7f]"
ID_PATTERN = Pattern(rf"^{_VISIBLE_LINE_CHAR}(?:{_LINE_CHAR}*{_VISIBLE_LINE_CHAR})?$")
"""An id: one line, no control character, not starting or ending with a space."""
NAME_PATTERN = Pattern(rf"^{_LINE_CHAR}*{_VISIBLE_LINE_CHAR}{_LINE_CHAR}*$")
"""A name: one line, no control character, not blank."""
TEXT_PATTERN = Pattern(rf"^[^\x00]*[^{SPACES}\x00][^\x00]*$")
"""A text: any lines, no NUL, not blank."""
ANY_TEXT_PATTERN = Pattern(r"^[^\x00]*$")
"""A text that may be empty: no NUL."""


# ============================================================= the types


TaskId = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=ID_MAX),
    AfterValidator(_not_blank),
    AfterValidator(_one_line),
    AfterValidator(_no_credential),
    AfterValidator(_trimmed),
    _TEXT,
    ID_PATTERN,
]
"""A task, run, commit or node id, or an actor: 1-200 characters, one line, not
blank, no surrounding whitespace, nothing that :func:`redact` would remove."""
RunId = TaskId
CommitId = TaskId
Actor = TaskId
NodeId = TaskId

AgentName = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=NAME_MAX),
    AfterValidator(_not_blank),
    AfterValidator(_one_line),
    AfterValidator(redact),
    _TEXT,
    NAME_PATTERN,
]
"""An agent or gate name: 1-200 characters, one line, not blank; redacted."""
GateName = AgentName
ModelName = AgentName
"""A model's name as its agent reports it (``claude-sonnet-4-5-20250929``)."""
UsageId = TaskId
"""What makes a usage record once: a model message's id (``msg_…``)."""


class _KeysNamed:
    """The JSON Schema of a mapping whose keys have a pattern (a :data:`Dag`'s
    node ids, :data:`Links`' names): the keys' rule as ``propertyNames`` and
    the values' as ``additionalProperties``; pydantic writes the key's pattern
    as ``patternProperties`` instead, which leaves any other key allowed."""

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        described = handler(schema)
        patterned = described.pop("patternProperties", None)
        if isinstance(patterned, dict) and len(patterned) == 1:
            [(pattern, values)] = patterned.items()
            described.setdefault("propertyNames", {})["pattern"] = pattern
            described["additionalProperties"] = values
        described.pop("minLength", None)  # a mapping's size is its properties'
        described.pop("maxLength", None)
        return described


LINKS_MAX = 8
"""How many links a task may carry."""
LINK_MAX = 2_000
"""The longest link (a URL or a path)."""

LinkName = Annotated[
    str,
    StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9_-]{0,39}$"),
    _TEXT,
]
"""A link's name: ``transcript``, ``branch``, ``pr``… (lower case, 1-40)."""

LinkText = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=LINK_MAX),
    AfterValidator(_not_blank),
    AfterValidator(_one_line),
    AfterValidator(redact),
    _TEXT,
    NAME_PATTERN,
]
"""Where a link points (a URL, a path, a branch): 1-2,000 characters, one
line; redacted."""

Links = Annotated[dict[LinkName, LinkText], Field(max_length=LINKS_MAX), _KeysNamed()]
"""What the agent's side knows of a task, by name: its session's transcript
path, its branch, a pull request's URL; at most 8."""

Strategy = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=STRATEGY_MAX),
    AfterValidator(_not_blank),
    AfterValidator(_no_nul),
    AfterValidator(redact),
    _TEXT,
    TEXT_PATTERN,
]
"""A strategy (also a failed strategy or a candidate): 1-4,000 characters; redacted."""

RcaSummary = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=SUMMARY_MAX),
    AfterValidator(_not_blank),
    AfterValidator(_no_nul),
    _TEXT,
    TEXT_PATTERN,
]
"""What a root-cause analysis found: 1-16,000 characters.

Redacted by the task when it logs the lesson (the only place it goes), not
here as well."""

Reason = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=REASON_MAX),
    AfterValidator(_not_blank),
    AfterValidator(_no_nul),
    AfterValidator(redact),
    _TEXT,
    TEXT_PATTERN,
]
"""Why a human acted: 1-4,000 characters; redacted."""

# min_length=0 refuses nothing, but a length constraint makes pydantic-core read
# the string's UTF-8 form, which refuses lone surrogates (string_unicode);
# without one, a plain strict str takes them.
ErrorText = Annotated[
    str,
    StringConstraints(strict=True, min_length=0),
    AfterValidator(_no_nul),
    _TEXT,
    ANY_TEXT_PATTERN,
]
"""A gate's error message: any length, may be empty; no NUL, no lone surrogate.

Never refused for its length (an agent's output must not lose its gate): the
task redacts it whole when it records the gate (the only place it goes), then
cuts it to :data:`ERROR_MAX` characters with :func:`cut`. Not here: cut before
it is redacted, a secret across the cut would be half kept."""

OutputText = Annotated[
    str,
    StringConstraints(strict=True, min_length=0),  # as ErrorText: no lone surrogate
    AfterValidator(_no_nul),
    _TEXT,
    ANY_TEXT_PATTERN,
]
"""A gate's output: any length, may be empty; no NUL, no lone surrogate.

Never refused for its length, like :data:`ErrorText`: the task redacts it once,
whole, when it records the gate (the error hash is taken of the whole redacted
output), then cuts it to :data:`OUTPUT_MAX` characters with :func:`cut`; it
goes nowhere else.

Linear time: pydantic-core checks the string on its UTF-8 form (which CPython
then keeps on the string). 10,000,000 ASCII characters take about 2 ms; as many
4-byte characters (emoji) about 70 ms, on first validation.
"""


def cut(text: str, limit: int, *, keep: int | None = None) -> str:
    """``text`` when it has at most ``limit`` characters; else a marker that
    says how long it was, then its end, ``keep`` characters in all (default
    ``limit``): ``"[cut: 200,020 characters, the limit is 100,000] …boom"``.

    The end is kept: the end of a log says most (the error, the summary of
    the failing tests), and an event keeps a text's end. Never splits a
    surrogate pair (text decoded with ``surrogatepass`` holds one as two code
    points): the pair is kept whole or dropped. Linear time: one slice. Cut
    what is already redacted: a secret across the cut point would otherwise
    be half kept, too short to be recognised. ``ValueError`` when ``keep``
    leaves no room for the marker.
    """
    length = len(text)
    if length <= limit:
        return text
    marker = f"[cut: {length:,} characters, the limit is {limit:,}] …"
    room = (limit if keep is None else keep) - len(marker)
    if room < 0:
        msg = f"limit {limit:,} is too small for the marker of a cut ({marker!r})"
        raise ValueError(msg)
    tail = text[length - room :] if room else ""
    if tail and "\udc00" <= tail[0] <= "\udfff":  # half of a surrogate pair
        tail = tail[1:]
    return marker + tail


def whole(value: object) -> object:
    """A float with no fractional part (``2.0``) as the int it is: JSON
    Schema's ``integer`` takes it, so the service does too. Anything else as
    it is, for the type to take or refuse (``"2"`` stays refused)."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


ExitCode = (
    Annotated[
        int,
        Field(strict=True, ge=EXIT_CODE_MIN, le=EXIT_CODE_MAX),
        BeforeValidator(whole),
        Wording(_exit_code),
    ]
    | None
)
"""An exit code in [-2**31, 2**32-1], or None for a killed or timed-out process."""

EntropyScore = Annotated[
    float,
    Field(strict=True, allow_inf_nan=False, ge=0.0, le=1.0),
    Wording(_score),
]
"""A finite number in [0, 1]; an int is accepted and becomes a float."""

Version = Annotated[int, Field(strict=True), Wording(_version)]
"""An event number (its range depends on the task, so is checked there)."""

TOKENS_MAX = 10**12
"""The most tokens one usage record, or a token budget, may count."""
USD_MAX = 1_000_000.0
"""The most USD one usage record's cost, or a budget, may be."""


def _tokens(name: str, error: ErrorDetails, loc: Loc) -> str:
    return (
        f"{name} must be a whole number of tokens in [0, {TOKENS_MAX:,}], "
        f"got {_got(error['input'])}"
    )


def _budget_tokens(name: str, error: ErrorDetails, loc: Loc) -> str:
    return (
        f"{name} must be a whole number of tokens in [1, {TOKENS_MAX:,}], "
        f"got {_got(error['input'])}"
    )


def _usd(name: str, error: ErrorDetails, loc: Loc) -> str:
    value = error["input"]
    shown = float(value) if isinstance(value, float) else _got(value)
    return f"{name} must be a finite number of USD in [0, {USD_MAX:,.0f}], got {shown}"


def _budget_usd(name: str, error: ErrorDetails, loc: Loc) -> str:
    value = error["input"]
    shown = float(value) if isinstance(value, float) else _got(value)
    return (
        f"{name} must be a finite number of USD over 0, at most "
        f"{USD_MAX:,.0f}, got {shown}"
    )


TokenCount = Annotated[
    int,
    Field(strict=True, ge=0, le=TOKENS_MAX),
    BeforeValidator(whole),
    Wording(_tokens),
]
"""A count of tokens of one kind: an int in [0, 10**12]."""

BudgetTokens = Annotated[
    int,
    Field(strict=True, ge=1, le=TOKENS_MAX),
    BeforeValidator(whole),
    Wording(_budget_tokens),
]
"""A token budget: an int in [1, 10**12]."""

CostUsd = Annotated[
    float,
    Field(strict=True, allow_inf_nan=False, ge=0.0, le=USD_MAX),
    Wording(_usd),
]
"""What a model call cost, in USD: a finite number in [0, 1,000,000]; an int
is accepted and becomes a float."""

BudgetUsd = Annotated[
    float,
    Field(strict=True, allow_inf_nan=False, gt=0.0, le=USD_MAX),
    Wording(_budget_usd),
]
"""A budget in USD: a finite number over 0, at most 1,000,000."""


VERSION_MAX = 2**63 - 1
"""The largest task version an answer may name (a 64-bit integer)."""


def _answered_version(name: str, error: ErrorDetails, loc: Loc) -> str:
    value = error["input"]
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{name} {_describe(value)} is out of range [1, {VERSION_MAX:,}]"
    return f"{name} must be a positive integer (a task's version), got {_got(value)}"


AnsweredVersion = Annotated[
    int, Field(strict=True, ge=1, le=VERSION_MAX), Wording(_answered_version)
]
"""The task version a human answer names (``if_version``, HTTP ``If-Match``):
a positive int; another version than the task's refuses the answer."""

POSITION_MAX = 2**63 - 2
"""The largest log position a query may start after (SQLite integers are 64-bit)."""

Position = Annotated[int, Field(strict=True, ge=0, le=POSITION_MAX), Wording(_position)]
"""A position in the notification log (``after=``): a non-negative int."""

Limit = Annotated[int, Field(strict=True, ge=1, le=LIMIT_MAX), Wording(_limit)]
"""How many items to return: an int in [1, 10,000]."""


def _in_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise PydanticCustomError(
            "time_out_of_range",
            "{value} is out of range in UTC",
            {"value": _describe(value)},
        ) from None


def _time(name: str, error: ErrorDetails, loc: Loc) -> str:
    kind, value = error["type"], error["input"]
    if kind == "timezone_aware":
        return (
            f"{name} must be timezone-aware (a naive datetime names no moment), "
            f"got {_describe(value)}"
        )
    if kind == "time_out_of_range":
        return f"{name} {error['msg']}"
    return f"{name} must be a datetime with a timezone, got {_got(value)}"


AwareTime = Annotated[
    AwareDatetime, Field(strict=True), AfterValidator(_in_utc), Wording(_time)
]
"""A moment: a ``datetime`` with a timezone (a naive one is refused, and so is
text: :func:`parse_time` reads ISO 8601); the function receives it in UTC."""


def parse_time(text: str, name: str, *, field: str | None = None) -> datetime:
    """An ISO 8601 time with a timezone (``2024-05-01T09:30:00Z``,
    ``2024-05-01T11:30:00+02:00``) read from ``text``, in UTC, for a command
    line or a query string; otherwise :class:`InvalidInput` naming ``name``
    (and ``field``, default ``name``)."""
    example = "e.g. 2024-05-01T09:30:00Z"
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        msg = f"{name} must be an ISO 8601 time ({example}), got {_describe(text)}"
        raise InvalidInput(msg, field=field or name) from None
    if found.utcoffset() is None:
        msg = (
            f"{name} must name its timezone ({example}, or +02:00), "
            f"got {_describe(text)}"
        )
        raise InvalidInput(msg, field=field or name)
    try:
        return found.astimezone(UTC)
    except OverflowError:
        msg = f"{name} {_describe(text)} is out of range in UTC"
        raise InvalidInput(msg, field=field or name) from None


KEY_MAX = 255
"""The longest idempotency key (as Stripe's API allows)."""


def _key(name: str, error: ErrorDetails, loc: Loc) -> str:
    return (
        f"{name} must be 1-{KEY_MAX} visible ASCII characters (no spaces), "
        f"got {_got(error['input'])}"
    )


IdempotencyKey = Annotated[
    str,
    StringConstraints(
        strict=True, min_length=1, max_length=KEY_MAX, pattern=r"^[!-~]+$"
    ),
    Wording(_key),
    NOT_KEPT,
]
"""A client's name for one command it may send more than once: 1-255 visible
ASCII characters. Stored only as its SHA-256 (:mod:`devs.domain.receipt`)."""

RequestText = Annotated[str, StringConstraints(strict=True, min_length=0), NOT_KEPT]
"""What a command was asked, as its caller writes it down (hashed, not stored):
any length, no lone surrogate (as :data:`ErrorText`). It holds a gate's output,
which is never refused for its length, so neither is it."""


_NODE_IDS: TypeAdapter[list[str]] = TypeAdapter(list[NodeId])


def _valid_at_once(value: object) -> dict[str, tuple[str, ...]] | None:
    """What :data:`Dag` makes of ``value`` when it is a ``dict`` of lists or
    tuples of ``str`` that the full check would accept; ``None`` otherwise.

    Each distinct id is checked once, by :data:`NodeId` itself (a DAG at the
    limits names 10,000 ids 110,000 times), the shape in a few C-level passes.
    """
    if type(value) is not dict or not 1 <= len(value) <= DAG_MAX_NODES:
        return None
    prerequisites = value.values()
    if not set(map(type, prerequisites)) <= {list, tuple}:
        return None
    ids = itertools.chain(value, itertools.chain.from_iterable(prerequisites))
    if set(map(type, ids)) != {str}:  # exactly str: no subclass hides behind "=="
        return None
    distinct = list(set(value).union(*prerequisites))
    try:
        checked = _NODE_IDS.validate_python(distinct)
    except ValidationError:
        return None
    if checked != distinct:  # NodeId rewrote an id (it does not today)
        return None
    return _distinct_prerequisites(value)


def _dag_at_once(value: object, check: ValidatorFunctionWrapHandler) -> Any:
    # A valid DAG takes the quick way; anything else (any refusal, any other
    # shape) the full per-element check, which words the error as it always did.
    quick = _valid_at_once(value)
    return check(value) if quick is None else quick


Dag = Annotated[
    Mapping[NodeId, Sequence[NodeId]],
    Field(min_length=1, max_length=DAG_MAX_NODES),
    AfterValidator(_distinct_prerequisites),
    WrapValidator(_dag_at_once),
    Wording(_dag),
    _KeysNamed(),
]
"""Node id -> its prerequisites' ids (a list or tuple, not a str), 1-10,000 nodes.

Callers see the type ``Mapping[str, Sequence[str]]``; the function receives a
``dict[str, tuple[str, ...]]`` with repeated prerequisites removed (first
occurrence kept).

A valid ``dict`` of lists or tuples of ``str`` is checked with each distinct id
once (:func:`_valid_at_once`); anything else, and every refusal, goes through
pydantic's check of each element, in order, so the first error is the one named.
"""


def _one_of(allowed: Sequence[str]) -> Wording:
    def explain(name: str, error: ErrorDetails, loc: Loc) -> str:
        got = _describe(error["input"])
        return f"{name} must be one of {', '.join(allowed)}; got {got}"

    return Wording(explain)


RESOLUTIONS = tuple(member.value for member in Resolution)
STATES = tuple(member.value for member in TaskState)

ResolutionName = Annotated[ResolutionValue, _one_of(RESOLUTIONS)]
"""How a human resolves a hand-off (a ``Resolution`` member or its value)."""

STOP_SCOPES = tuple(member.value for member in StopScope)
StopScopeName = Annotated[StopScopeValue, _one_of(STOP_SCOPES)]
"""What a task's stop holds up in its run: ``run`` or ``descendants``."""

StateName = Annotated[StateValue, _one_of(STATES)]
"""A task state (a ``TaskState`` member or its value)."""

DELIVERY_STATES = tuple(member.value for member in DeliveryState)

DeliveryStateName = Annotated[DeliveryStateValue, _one_of(DELIVERY_STATES)]
"""A delivery's state (a ``DeliveryState`` member or its value)."""


def _message_id(name: str, error: ErrorDetails, loc: Loc) -> str:
    return (
        f"{name} must be a message id (msg_ and 32 lowercase hex digits, as "
        f"`devs webhooks list` shows), got {_describe(error['input'])}"
    )


MessageId = Annotated[
    str,
    StringConstraints(strict=True, pattern=r"^msg_[0-9a-f]{32}$"),
    Wording(_message_id),
]
"""An outbox message's id (``msg_`` and 32 hex digits)."""


# ======================================================== the decorator

# Called once, here at module level, so that pydantic resolves each decorated
# function's annotations in that function's own module (and nowhere else).
_check_arguments = validate_call(
    config=ConfigDict(arbitrary_types_allowed=True), validate_return=False
)

_ARITY_ERRORS = frozenset(
    {
        "missing_argument",
        "missing_positional_only_argument",
        "missing_keyword_only_argument",
        "multiple_argument_values",
        "unexpected_keyword_argument",
        "unexpected_positional_argument",
    }
)


def _wording_of(annotation: object) -> Wording | None:
    """The :class:`Wording` in ``annotation`` (or in ``annotation | None``)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            return None
        annotation = members[0]
    if typing.get_origin(annotation) is Annotated:
        for extra in reversed(annotation.__metadata__):  # type: ignore[attr-defined]
            if isinstance(extra, Wording):
                return extra
    return None


class _Refusal:
    """Turns a ``validate_call`` error into the exception the caller sees.

    Built once per decorated function; used only when an argument is refused.
    """

    def __init__(self, func: Callable[..., Any], hints: Mapping[str, object]):
        self.qualname = func.__qualname__
        self.signature = inspect.signature(func)
        parameters = self.signature.parameters.values()
        self.positional = [
            p.name
            for p in parameters
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        self.var_positional = next(
            (p.name for p in parameters if p.kind is p.VAR_POSITIONAL), None
        )
        self.keyword_only = [p.name for p in parameters if p.kind is p.KEYWORD_ONLY]
        self.checked = frozenset(hints)
        self.wordings = {
            name: wording
            for name, hint in hints.items()
            if (wording := _wording_of(hint)) is not None
        }

    def _hint(self) -> str:
        """After "too many positional arguments": which are keyword-only, and
        the call written out (names only, never a value)."""
        if not self.keyword_only or self.var_positional is not None:
            return ""
        # A method's ``self`` (first, not annotated) is not the caller's to pass.
        skip = 1 if self.positional and self.positional[0] not in self.checked else 0
        positional = self.positional[skip:]
        short = self.qualname.rpartition(".")[2]
        written = ", ".join([*positional, *(f"{n}=..." for n in self.keyword_only)])
        takes = (
            f"takes {', '.join(positional)} positionally"
            if positional
            else "takes no positional argument"
        )
        only = ", ".join(self.keyword_only)
        verb = "is" if len(self.keyword_only) == 1 else "are"
        return f"; {short}() {takes}; {only} {verb} keyword-only: {short}({written})"

    def _name(self, key: int | str) -> str:
        if isinstance(key, str):
            return key
        if key < len(self.positional):
            return self.positional[key]
        return f"{self.var_positional or 'args'}[{key - len(self.positional)}]"

    def __call__(
        self, failure: ValidationError, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Exception:
        errors = failure.errors(include_url=False)
        for error in errors:
            if error["type"] in _ARITY_ERRORS:
                try:  # Python's own words for a call that does not fit
                    self.signature.bind(*args, **kwargs)
                except TypeError as mismatch:
                    hint = (
                        self._hint() if "too many positional" in str(mismatch) else ""
                    )
                    return TypeError(f"{self.qualname}() {mismatch}{hint}")
                where = error["loc"][0] if error["loc"] else ""
                return TypeError(f"{self.qualname}() {error['msg'].lower()}: {where!r}")
        # Pydantic checks parameters in signature order: the first error is the
        # first bad argument.
        error = errors[0]
        key, *inside = error["loc"]
        name = self._name(key)
        wording = self.wordings.get(name.partition("[")[0])
        explain = wording.explain if wording is not None else _generic
        field = name.partition("[")[0]
        return InvalidInput(explain(name, error, tuple(inside)), field=field)


# Calls whose arguments were accepted, and what pydantic made of them, for a
# call that comes again with the very same arguments (an agent in a loop
# reports the same failure of the same task again and again; a client asks
# for the same task). Only calls whose every argument is a str of at most
# _KNOWN_TEXT_MAX characters, an int or None, exactly: every check is a pure
# function of such a value, so pydantic would make the same of it again.
# (str, int and None never compare equal to one another; bool, float and
# subclasses are left out, as they compare equal to values the checks tell
# apart: True == 1, 0.0 == -0.0.) Only texts in which no rule of
# devs.domain.redaction finds a secret are kept, so no secret stays here; the
# memory is emptied when full. A refused call is never kept: it is checked,
# and refused, again.
_KNOWN: dict[tuple[Any, ...], tuple[tuple[Any, ...], dict[str, Any]]] = {}
_KNOWN_MAX = 1_024
_KNOWN_TEXT_MAX = ID_MAX
_PLAIN_TYPES = (str, int, type(None))

_TEXTS_AT: dict[tuple[type, ...], tuple[int, ...] | None] = {}
"""For each list of argument types met, where the texts are among them;
``None`` when an argument is of another type than str, int or None."""
_UNSEEN = (-1,)  # no list of places holds -1


def _texts_at(kinds: tuple[type, ...]) -> tuple[int, ...] | None:
    """Where the texts are among arguments of these types (``None``: not a
    call :func:`validated` remembers); the answer is kept, bounded."""
    texts = None
    if all(kind in _PLAIN_TYPES for kind in kinds):
        texts = tuple(i for i, kind in enumerate(kinds) if kind is str)
    if len(_TEXTS_AT) >= _KNOWN_MAX:
        _TEXTS_AT.clear()
    _TEXTS_AT[kinds] = texts
    return texts


def _clean(values: tuple[Any, ...]) -> bool:
    """Whether no text among ``values`` holds a secret (each text was just
    checked by its type, so is most often among redaction's clean texts)."""
    for value in values:
        if type(value) is str and secret_kind(value) is not None:
            return False
    return True


def _kept(annotation: object) -> bool:
    """Whether values of ``annotation`` (or of ``annotation | None``) may be
    kept in memory (:data:`NOT_KEPT`)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return all(_kept(member) for member in typing.get_args(annotation))
    if typing.get_origin(annotation) is Annotated:
        extras = annotation.__metadata__  # type: ignore[attr-defined]
        return not any(isinstance(extra, _NotKept) for extra in extras)
    return True


DECORATED: list[Callable[..., Any]] = []
"""Every function :func:`validated` decorated, in the order they were (a
test builds each one's validator: their annotations must resolve)."""


def validated(func: Callable[P, R]) -> Callable[P, R]:
    """Check ``func``'s arguments against their annotations before each call.

    A refused argument raises :class:`InvalidInput` naming it (the first bad
    one, in signature order) and the body does not run; a call with missing or
    unexpected arguments raises ``TypeError``. The body receives the validated
    values (an int :data:`EntropyScore` as a float, a :data:`Dag` as a dict of
    tuples). The return value is not checked, and exceptions the body raises
    (even a pydantic ``ValidationError``) pass through untouched.

    Works on functions and methods (``self`` is not annotated, so not checked).
    Annotations must resolve in the function's module. The validator is built
    once, at the first call (building the service's 49 at import cost every
    ``devs`` command about 50 ms); a call costs one pydantic validation of the
    arguments. A call
    that comes again with the same arguments, each a short text (at most
    200 characters, holding no secret), an int or ``None``, costs one look-up
    of what the validation made of them the first time (bounded: 1,024 calls
    are remembered).
    """

    call: Callable[..., R] = func
    built: list[_Validator] = []
    DECORATED.append(func)

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if not built:
            built.append(_Validator.of(func))  # two threads at once: the same
        check, refuse, remember, skip = built[0]
        key: tuple[Any, ...] | None = None
        if remember:
            values: tuple[Any, ...] = args[skip:] if skip else args
            if kwargs:
                values = (*values, *kwargs.values())
            kinds = tuple(map(type, values))
            texts = _TEXTS_AT.get(kinds, _UNSEEN)
            if texts is _UNSEEN:
                texts = _texts_at(kinds)
            if texts is not None and (
                not texts
                or max(map(len, map(values.__getitem__, texts))) <= _KNOWN_TEXT_MAX
            ):
                # How many are positional, and the names, tell f(a, b) from
                # f(a, x=b), and the names' order which value each name has.
                key = (call, len(args), values, *kwargs)
                known = _KNOWN.get(key)
                if known is not None:
                    rest, named = known
                    if skip:
                        return call(args[0], *rest, **named)
                    return call(*rest, **named)
        try:
            args_, kwargs_ = check(*args, **kwargs)
        except ValidationError as failure:
            raise refuse(failure, args, kwargs) from None
        if key is not None and _clean(key[2]):
            if len(_KNOWN) >= _KNOWN_MAX:
                _KNOWN.clear()
            _KNOWN[key] = (args_[skip:] if skip else args_, kwargs_)
        return call(*args_, **kwargs_)

    return wrapper


class _Validator(NamedTuple):
    """What :func:`validated` checks a function's calls with."""

    check: Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]
    """pydantic's validation of the arguments: the validated values."""
    refuse: _Refusal
    remember: bool
    """Whether calls may be remembered (no argument is :data:`NOT_KEPT`)."""
    skip: int
    """1 for a method's ``self`` (its first parameter, not annotated), handed
    on as it is and not remembered; else 0."""

    @classmethod
    def of(cls, func: Callable[..., Any]) -> _Validator:
        # pydantic validates the arguments and calls this with the validated
        # values; ``func`` itself runs outside pydantic, so only argument
        # errors are caught.
        def bind(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
            return args, kwargs

        functools.update_wrapper(bind, func)  # its signature and module are func's
        bind.__annotations__ = {
            name: hint
            for name, hint in getattr(func, "__annotations__", {}).items()
            if name != "return"  # not validated, so need not resolve
        }
        check = _check_arguments(bind)
        hints = typing.get_type_hints(bind, include_extras=True)
        refuse = _Refusal(func, hints)
        remember = all(_kept(hint) for hint in hints.values())
        first = refuse.positional[0] if refuse.positional else None
        skip = 1 if first is not None and first not in hints else 0
        return cls(check, refuse, remember, skip)


def _item_wording(annotation: object) -> Wording | None:
    """The :class:`Wording` of a list's items (``list[TaskId] | None``)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = members[0] if len(members) == 1 else None
    if typing.get_origin(annotation) is list:
        return _wording_of(typing.get_args(annotation)[0])
    return None


def refusal(
    model: type[BaseModel], failure: ValidationError | Sequence[ErrorDetails]
) -> InvalidInput:
    """What a caller is told when ``model`` (a command's arguments, as a
    body, a tool's input or a call) refuses a value: the first refused field
    in the words of its type (:class:`Wording`), an unknown field with the
    known field it most likely meant, a missing one by its name.
    ``field`` names the argument, as the caller spelled it."""
    errors = (
        failure.errors(include_url=False)
        if isinstance(failure, ValidationError)
        else failure
    )
    error = errors[0]
    key, *inside = error["loc"] or ("",)
    name = str(key)
    fields = model.model_fields
    if error["type"] == "extra_forbidden":
        known = list(fields)
        where = ""
        if inside:  # a field unknown to a nested object (``policy``)
            nested = fields.get(name)
            inner = getattr(nested, "annotation", None)
            known = list(getattr(inner, "model_fields", {}))
            where, name = f" of {name}", str(inside[-1])
        guess = (
            fuzzy.extractOne(name, known, scorer=fuzz.ratio, score_cutoff=70)
            if known
            else None
        )
        meant = f"; did you mean {guess[0]!r}?" if guess else ""
        field = str(key) if inside else name[:64]
        return InvalidInput(
            f"unknown field {name[:64]!r}{where}{meant} (known: {', '.join(known)})",
            field=field,
        )
    if error["type"] == "missing":
        return InvalidInput(f"{name} is required", field=name)
    if error["type"] in ("model_type", "model_attributes_type", "dict_type") and (
        not error["loc"]
    ):
        got = _got(error["input"])
        return InvalidInput(f"the arguments must be an object, got {got}")
    info = fields.get(name)
    wording = None
    if info is not None:
        wording = next(
            (extra for extra in reversed(info.metadata) if isinstance(extra, Wording)),
            None,
        ) or _wording_of(info.annotation)
    if wording is None and inside:  # inside a list or an object: named so
        shown = name + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in inside
        )
        item = _item_wording(info.annotation if info is not None else None)
        if item is not None and len(inside) == 1 and isinstance(inside[0], int):
            return InvalidInput(item.explain(shown, error, ()), field=name)
        return InvalidInput(_generic(shown, error, ()), field=name)
    explain = wording.explain if wording is not None else _generic
    return InvalidInput(explain(name, error, tuple(inside)), field=name)


@validated
def valid_position(position: Position) -> int:
    """``position`` checked as a log position: ``InvalidInput`` (field
    ``position``) otherwise."""
    return position
