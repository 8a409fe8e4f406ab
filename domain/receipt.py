"""Receipts: what makes a command exactly-once.

A command sent under an idempotency key (``RecoveryService.exactly_once``)
saves a :class:`Receipt` with its events in one atomic ``save``: its id is the
key's SHA-256, so the store's unique version key lets only one of two
concurrent sends write, and every later send answers as the first did. A
refused command writes no receipt; the key itself is never stored, in case it
holds a secret (docs/http.md, docs/python-api.md).
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar, NamedTuple

from eventsourcing.domain import event
from eventsourcing.utils import get_topic, resolve_topic
from pydantic import BaseModel

from devs.domain.errors import InvalidInput
from devs.domain.eventsourcing_internals import create_aggregate
from devs.domain.model import Aggregate, AggregateCreated


class Pending(NamedTuple):
    """The receipt a command in ``exactly_once`` must leave behind."""

    id: str
    request: str
    """The SHA-256 of the request, hex."""

    @classmethod
    def of(cls, key: str, request: str) -> Pending:
        return cls(
            id=Receipt.create_id(key),
            request=hashlib.sha256(
                request.encode("utf-8", "surrogatepass")
            ).hexdigest(),
        )


class Receipt(Aggregate):
    """One command done under an idempotency key, and the answer it gave."""

    TOPIC: ClassVar[str] = "devs:Receipt"

    class Issued(AggregateCreated):
        TOPIC: ClassVar[str] = "devs:Receipt.Issued"
        request: str
        answer_topic: str
        answer: str

    @staticmethod
    def create_id(key: str) -> str:
        return "receipt:" + hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def issue(cls, pending: Pending, answer: object) -> Receipt:
        assert isinstance(answer, BaseModel)  # every command answers a model
        receipt: Receipt = create_aggregate(
            cls,
            cls.Issued,
            id=pending.id,
            request=pending.request,
            answer_topic=get_topic(type(answer)),
            answer=answer.model_dump_json(),
        )
        return receipt

    @event(Issued)
    def __init__(self, request: str, answer_topic: str, answer: str) -> None:
        self.request = request
        self.answer_topic = answer_topic
        self.answer = answer

    def answer_to(self, pending: Pending) -> Any:
        """The first answer, if ``pending`` asks what was asked then."""
        if pending.request != self.request:
            msg = (
                "idempotency_key was first used with another request; send a new "
                "key for a new command (nothing was written)"
            )
            raise InvalidInput(msg, field="idempotency_key")
        answer_class: type[BaseModel] = resolve_topic(self.answer_topic)
        return answer_class.model_validate_json(self.answer)
