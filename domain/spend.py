"""What a model call costs: the price table, and a usage's cost.

A usage is priced when it is recorded (``Task.UsageRecorded`` keeps the
cost), so a replay decides as the original did whatever the table says
later. The package's table is dated (:data:`PRICES_READ`); ``DEVS_PRICES``
names a JSON file that overrides or extends it. A model the table does not
know has its tokens counted (token budgets still apply) and its cost unknown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from devs.domain.errors import InvalidInput
from devs.domain.model import Value

PRICES_ENV = "DEVS_PRICES"
"""The variable naming a JSON file of prices that override or extend
:data:`PRICES`."""

PRICES_READ = "2026-11-29"
"""When :data:`PRICES` was read: the Claude models' off Anthropic's pricing
page, the GPT and Gemini models' off published copies of OpenAI's and
Google's (standard tier, short prompts)."""

PRICES_FILE_MAX = 1_000_000
"""The largest ``DEVS_PRICES`` file read, in bytes."""

PRICE_MAX = 10_000.0
"""The highest price per million tokens a table may give."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_creation: float

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_creation_tokens: int,
    ) -> float:
        """The cost in USD of these tokens."""
        return (
            input_tokens * self.input
            + output_tokens * self.output
            + cache_read_tokens * self.cache_read
            + cache_creation_tokens * self.cache_creation
        ) / 1_000_000


def _anthropic(input: float, output: float, cache_read: float) -> Price:
    """A Claude model's price: a 5-minute cache write costs 1.25 times input."""
    return Price(input, output, cache_read, input * 1.25)


def _cached(input: float, output: float, cache_read: float) -> Price:
    """An OpenAI or Gemini model's price: no charge for writing the cache."""
    return Price(input, output, cache_read, input)


PRICES: Mapping[str, Price] = {
    # Anthropic, platform.claude.com/docs/en/about-claude/pricing. Cache
    # creation at the 5-minute write's rate (the 1-hour write costs more);
    # Haiku 5.5 at its rate for prompts up to 100,000 tokens.
    "claude-fable-5-1": _anthropic(10.0, 50.0, 0.25),
    "claude-mythos-5-1": _anthropic(10.0, 50.0, 0.25),
    "claude-fable-5": _anthropic(10.0, 50.0, 1.0),
    "claude-mythos-5": _anthropic(10.0, 50.0, 1.0),
    "claude-opus-5-5": _anthropic(4.0, 20.0, 0.2),
    "claude-opus-5": _anthropic(5.0, 25.0, 0.5),
    "claude-opus-4-8": _anthropic(5.0, 25.0, 0.5),
    "claude-opus-4-7": _anthropic(5.0, 25.0, 0.5),
    "claude-opus-4-6": _anthropic(5.0, 25.0, 0.5),
    "claude-opus-4-5": _anthropic(5.0, 25.0, 0.5),
    "claude-opus-4-1": _anthropic(15.0, 75.0, 1.5),
    "claude-opus-4": _anthropic(15.0, 75.0, 1.5),
    "claude-sonnet-5-5": _anthropic(2.0, 10.0, 0.1),
    "claude-sonnet-5": _anthropic(2.0, 10.0, 0.2),
    "claude-sonnet-4-6": _anthropic(3.0, 15.0, 0.3),
    "claude-sonnet-4-5": _anthropic(3.0, 15.0, 0.3),
    "claude-sonnet-4": _anthropic(3.0, 15.0, 0.3),
    "claude-3-7-sonnet": _anthropic(3.0, 15.0, 0.3),
    "claude-haiku-5-5": _anthropic(0.1, 0.5, 0.01),
    "claude-haiku-4-5": _anthropic(1.0, 5.0, 0.1),
    "claude-3-5-haiku": _anthropic(0.8, 4.0, 0.08),
    # OpenAI, developers.openai.com/api/docs/pricing (standard tier): the
    # cached input is a part of the input, which a reader passes apart.
    "gpt-5.5": _cached(5.0, 30.0, 0.5),
    "gpt-5.4-mini": _cached(0.75, 4.5, 0.075),
    "gpt-5.4": _cached(2.5, 15.0, 0.25),
    "gpt-5.3-codex": _cached(1.75, 14.0, 0.175),
    "gpt-5.2-codex": _cached(1.75, 14.0, 0.175),
    "gpt-5.2": _cached(1.75, 14.0, 0.175),
    "gpt-5.1-codex-max": _cached(1.25, 10.0, 0.125),
    "gpt-5.1-codex": _cached(1.25, 10.0, 0.125),
    "gpt-5.1": _cached(1.25, 10.0, 0.125),
    "gpt-5-codex": _cached(1.25, 10.0, 0.125),
    "gpt-5-mini": _cached(0.25, 2.0, 0.025),
    "gpt-5-nano": _cached(0.05, 0.4, 0.005),
    "gpt-5": _cached(1.25, 10.0, 0.125),
    "gpt-4.1-mini": _cached(0.4, 1.6, 0.1),
    "gpt-4.1": _cached(2.0, 8.0, 0.5),
    "gpt-4o-mini": _cached(0.15, 0.6, 0.075),
    "gpt-4o": _cached(2.5, 10.0, 1.25),
    "o4-mini": _cached(1.1, 4.4, 0.275),
    "o3": _cached(2.0, 8.0, 0.5),
    # Google, ai.google.dev/gemini-api/docs/pricing: prompts up to 200,000
    # tokens (longer ones cost more).
    "gemini-3-pro": _cached(2.0, 12.0, 0.2),
    "gemini-2.5-pro": _cached(1.25, 10.0, 0.125),
    "gemini-2.5-flash-lite": _cached(0.1, 0.4, 0.01),
    "gemini-2.5-flash": _cached(0.3, 2.5, 0.03),
}
"""USD per million tokens, by model id: its own entry, or the entry it is
followed only by a date, a version or a preview tag
(``claude-sonnet-4-5-20250929``, ``...-v1:0``, ``gemini-3-pro-preview``).
``o3-pro`` is not ``o3``: a name that goes on otherwise has no price."""


def model_key(model: str) -> str:
    """A model's name as the table is keyed: lower case, without a
    provider's prefix (``anthropic/``, ``models/``, ``us.anthropic.``) or
    a context suffix (``[1m]``)."""
    key = model.strip().lower()
    key = key.rsplit("/", 1)[-1]
    for prefix in ("us.", "eu.", "apac.", "global."):
        key = key.removeprefix(prefix)
    key = key.removeprefix("anthropic.")
    return key.split("[", 1)[0]


_RELEASE = re.compile(
    r"(?:-\d{8}|-\d{4}-\d{2}-\d{2}|-\d{2}-\d{2}|-v\d+|:\d+|@[\w.-]+|-latest"
    r"|-preview|-exp)+"
)
"""What may follow a priced model's name and keep its price: a date
(``-20250929``, ``-2025-08-07``, ``-05-20``), a version (``-v1``,
``:0``, ``@20250514``), ``-latest``, ``-preview``, ``-exp``."""


def price_of(model: str, table: Mapping[str, Price] = PRICES) -> Price | None:
    """The price of ``model`` in ``table``: its own entry, else the entry
    its name starts with when only a release tag (:data:`_RELEASE`) follows;
    ``None`` if none (its cost is then unknown)."""
    key = model_key(model)
    found = table.get(key)
    if found is not None:
        return found
    best: str | None = None
    for name in table:
        if (
            key.startswith(name)
            and _RELEASE.fullmatch(key, len(name)) is not None
            and (best is None or len(name) > len(best))
        ):
            best = name
    return table[best] if best is not None else None


def prices_from(environ: Mapping[str, str]) -> Mapping[str, Price]:
    """:data:`PRICES`, overridden and extended by the file ``DEVS_PRICES``
    names, if set: a JSON object of model -> ``{"input": …, "output": …,
    "cache_read": …, "cache_creation": …}`` in USD per million tokens
    (``cache_read`` and ``cache_creation`` default to ``input``). A file
    that cannot be read, or any entry it gets wrong, is refused by name."""
    path = environ.get(PRICES_ENV)
    if not path:
        return PRICES
    try:
        with Path(path).open("rb") as file:
            raw = file.read(PRICES_FILE_MAX + 1)
    except OSError as error:
        msg = f"{PRICES_ENV}: cannot read {path!r:.200}: {error.strerror}"
        raise InvalidInput(msg, field=PRICES_ENV) from None
    if len(raw) > PRICES_FILE_MAX:
        msg = f"{PRICES_ENV}: {path!r:.200} is over {PRICES_FILE_MAX:,} bytes"
        raise InvalidInput(msg, field=PRICES_ENV)
    try:
        given = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        msg = f"{PRICES_ENV}: {path!r:.200} is not JSON: {error}"
        raise InvalidInput(msg, field=PRICES_ENV) from None
    if not isinstance(given, dict):
        msg = f"{PRICES_ENV}: {path!r:.200} must hold an object of model -> prices"
        raise InvalidInput(msg, field=PRICES_ENV)
    table = dict(PRICES)
    for model, entry in given.items():
        table[model_key(model)] = _price(model, entry)
    return table


def _price(model: str, entry: Any) -> Price:
    """One ``DEVS_PRICES`` entry, checked."""
    where = f"{PRICES_ENV}: {model!r:.80}"
    if not model_key(model) or not isinstance(entry, dict):
        msg = f"{where} must name a model and give an object of prices"
        raise InvalidInput(msg, field=PRICES_ENV)
    unknown = set(entry) - {"input", "output", "cache_read", "cache_creation"}
    if unknown:
        msg = f"{where}: unknown price {sorted(unknown)[0]!r:.40}"
        raise InvalidInput(msg, field=PRICES_ENV)
    values: dict[str, float] = {}
    for name in ("input", "output", "cache_read", "cache_creation"):
        value = entry.get(
            name, entry.get("input") if name.startswith("cache") else None
        )
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value <= PRICE_MAX
        ):
            msg = (
                f"{where}: {name} must be a number of USD per million tokens "
                f"from 0 to {PRICE_MAX:,.0f}"
            )
            raise InvalidInput(msg, field=PRICES_ENV)
        values[name] = float(value)
    return Price(**values)


# ------------------------------------------------------------ what was spent


class Usage(Value):
    """The tokens and money a task's model calls used, summed."""

    spent_usd: float = 0.0
    """The cost of every usage whose model had a price."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    unknown_cost_tokens: int = 0
    """The tokens of usages whose model had no price (counted in ``tokens``,
    not in ``spent_usd``)."""

    @classmethod
    def one(
        cls,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_creation_tokens: int,
        cost_usd: float | None,
    ) -> Usage:
        """One model call's usage (``cost_usd`` ``None``: of unknown cost)."""
        tokens = input_tokens + output_tokens + cache_read_tokens
        tokens += cache_creation_tokens
        return cls(
            spent_usd=cost_usd or 0.0,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_creation_tokens=cache_creation_tokens,
            unknown_cost_tokens=tokens if cost_usd is None else 0,
        )

    def plus(self, other: Usage) -> Usage:
        """Both together; the money rounded to a nano-dollar: ten usages of
        0.1 spend 1.0, not 0.9999999999999999 (and a replay adds the same)."""
        return Usage(
            spent_usd=round(self.spent_usd + other.spent_usd, 9),
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_creation_tokens=self.cache_creation_tokens
            + other.cache_creation_tokens,
            unknown_cost_tokens=self.unknown_cost_tokens + other.unknown_cost_tokens,
        )

    @property
    def tokens(self) -> int:
        """Every token counted: input, output, cache reads and cache writes."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_creation_tokens
        )


class Spend(Value):
    """What a task spent on model calls, and its budgets: in a budget stop's
    session, a usage's answer and the task's summary."""

    spent_usd: float
    budget_usd: float | None
    """``None``: no budget in money."""
    tokens: int
    """Every token counted: input, output, cache reads and cache writes."""
    budget_tokens: int | None
    """``None``: no budget in tokens."""
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    unknown_cost_tokens: int
    """The tokens of usages whose model had no price (in ``tokens``, not in
    ``spent_usd``)."""
    scope: Literal["run"] | None = None
    """``run``: the figures are the task's run's, every task of it together,
    against the run's budget (``DEVS_RUN_BUDGET_USD``); ``None``: the
    task's own."""

    @classmethod
    def counted(
        cls,
        usage: Usage,
        budget_usd: float | None,
        budget_tokens: int | None,
        scope: Literal["run"] | None = None,
    ) -> Spend:
        """``usage`` against these budgets."""
        return cls(
            scope=scope,
            spent_usd=usage.spent_usd,
            budget_usd=budget_usd,
            tokens=usage.tokens,
            budget_tokens=budget_tokens,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_creation_tokens=usage.cache_creation_tokens,
            unknown_cost_tokens=usage.unknown_cost_tokens,
        )

    @property
    def used(self) -> float:
        """The larger share of a budget spent (0 without budgets)."""
        shares = [0.0]
        if self.budget_usd is not None:
            shares.append(self.spent_usd / self.budget_usd)
        if self.budget_tokens is not None:
            shares.append(self.tokens / self.budget_tokens)
        return max(shares)

    @property
    def over_usd(self) -> bool:
        """Whether the budget in money is spent (at or over it)."""
        return self.budget_usd is not None and self.spent_usd >= self.budget_usd

    @property
    def over_tokens(self) -> bool:
        """Whether the budget in tokens is spent (at or over it)."""
        return self.budget_tokens is not None and self.tokens >= self.budget_tokens

    @property
    def over(self) -> bool:
        """Whether a budget is spent."""
        return self.over_usd or self.over_tokens
