"""Operators: the people who answer for people.

The roster is one aggregate (``operators``: ``add``, ``rotate``, ``remove``),
read from the store for every check, never from a cache, so a token rotated or
removed by another process stops working at its next request. A token is 256
random bits, shown once and stored as its SHA-256 (a fast hash is enough),
compared in constant time; the console's session key derives from that hash,
so a rotation ends the sessions too (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import datetime
from typing import ClassVar

from eventsourcing.domain import datetime_now_with_tzinfo, event

from devs.domain.errors import AlreadyExists, UnknownOperator
from devs.domain.model import Aggregate, AggregateCreated, Value

OPERATORS_ID = "operators"
"""The id of the roster aggregate (one per store)."""
TOKEN_PREFIX = "devs_op_"
"""What every operator token starts with: the HTTP service tells an operator's
token from the service's own by it, and a secret scanner can find one."""
TOKEN_BYTES = 32
TOKEN_SHAPE = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_\-]{43}")
"""What every token :func:`new_token` makes looks like (256 bits are 43
characters of URL-safe base64): anything else is no one's token, known
without reading the roster."""


def new_token() -> str:
    """A fresh operator token: :data:`TOKEN_PREFIX` and 256 random bits."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """The SHA-256 of a token, hex: all the store keeps of it."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class OperatorEntry(Value):
    """One operator, as ``devs operator list`` shows it (never its token)."""

    name: str
    added_by: str
    added_at: datetime
    rotated_by: str | None = None
    rotated_at: datetime | None = None


class IssuedToken(Value):
    """An operator and the token just made for it: shown once, kept nowhere."""

    name: str
    token: str


class Member(Value):
    entry: OperatorEntry
    token_hash: str


class Operators(Aggregate):
    """The roster: every operator and the hash of its current token."""

    TOPIC: ClassVar[str] = "devs:Operators"

    class Opened(AggregateCreated):
        TOPIC: ClassVar[str] = "devs:Operators.Opened"

    class Added(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Operators.Added"
        name: str
        token_hash: str
        actor: str
        at: datetime

    class Rotated(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Operators.Rotated"
        name: str
        token_hash: str
        actor: str
        at: datetime

    class Removed(Aggregate.Event):
        TOPIC: ClassVar[str] = "devs:Operators.Removed"
        name: str
        actor: str
        at: datetime

    @staticmethod
    def create_id() -> str:
        return OPERATORS_ID

    @event(Opened)
    def __init__(self) -> None:
        self.members: dict[str, Member] = {}

    # ----------------------------------------------------------- commands

    def add(self, name: str, *, actor: str) -> str:
        """Add ``name``; the new token (``AlreadyExists`` if it is there)."""
        if name in self.members:
            msg = (
                f"operator {name!r} already exists: `devs operator rotate "
                f"{name}` gives it a new token"
            )
            raise AlreadyExists(msg)
        token = new_token()
        self._added(name, token_hash(token), actor, datetime_now_with_tzinfo())
        return token

    def rotate(self, name: str, *, actor: str) -> str:
        """A new token for ``name``; the old one stops working."""
        self._require(name)
        token = new_token()
        self._rotated(name, token_hash(token), actor, datetime_now_with_tzinfo())
        return token

    def remove(self, name: str, *, actor: str) -> OperatorEntry:
        """Take ``name`` away; its token and sessions stop working."""
        entry = self._require(name).entry
        self._removed(name, actor, datetime_now_with_tzinfo())
        return entry

    # ------------------------------------------------------------ queries

    def entries(self) -> list[OperatorEntry]:
        """Every operator, in the order they were added."""
        return [member.entry for member in self.members.values()]

    def holder(self, token: str) -> str | None:
        """The operator whose current token is ``token``, if any.

        Every operator's hash is compared, in constant time each, so the
        time taken says nothing about which one (or how much of one) matched.
        """
        given = token_hash(token).encode()
        found = None
        for name, member in self.members.items():
            if hmac.compare_digest(given, member.token_hash.encode()):
                found = name
        return found

    def key_of(self, name: str, secret: bytes) -> bytes | None:
        """The key an operator's console sessions are signed with: the
        server's ``secret`` (never in the store) and the operator's current
        token hash, so reading the store is not enough to forge a session,
        and a rotation ends them (``None`` for no such operator)."""
        member = self.members.get(name)
        if member is None:
            return None
        return hmac.new(secret, member.token_hash.encode(), hashlib.sha256).digest()

    def _require(self, name: str) -> Member:
        member = self.members.get(name)
        if member is None:
            raise UnknownOperator(name)
        return member

    # ------------------------------------------------------------- events

    @event(Added)
    def _added(self, name: str, token_hash: str, actor: str, at: datetime) -> None:
        entry = OperatorEntry(name=name, added_by=actor, added_at=at)
        self.members[name] = Member(entry=entry, token_hash=token_hash)

    @event(Rotated)
    def _rotated(self, name: str, token_hash: str, actor: str, at: datetime) -> None:
        entry = self.members[name].entry.model_copy(
            update={"rotated_by": actor, "rotated_at": at}
        )
        self.members[name] = Member(entry=entry, token_hash=token_hash)

    @event(Removed)
    def _removed(self, name: str, actor: str, at: datetime) -> None:
        del self.members[name]
