"""Persistence wiring: pydantic events to orjson bytes and back.

The mapper and transcoder follow eventsourcing 9.5's ``examples/aggregate7``
(``orjsonpydantic.py``) and are selected through the application's ``env``
(``MAPPER_TOPIC``, ``TRANSCODER_TOPIC``).
"""

from __future__ import annotations

from typing import Any, cast

import orjson
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import (
    Mapper,
    MapperDeserialisationError,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import get_topic, resolve_topic
from pydantic import BaseModel


class OrjsonTranscoder(Transcoder):
    """Encodes JSON-safe Python objects with orjson."""

    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)


class PydanticMapper(Mapper[str]):
    """Maps pydantic domain events to stored events and back."""

    def to_stored_event(self, domain_event: DomainEventProtocol[str]) -> StoredEvent:
        topic = get_topic(domain_event.__class__)
        event_state = cast(BaseModel, domain_event).model_dump(mode="json")
        stored_state = self.transcoder.encode(event_state)
        if self.compressor:
            stored_state = self.compressor.compress(stored_state)
        if self.cipher:
            stored_state = self.cipher.encrypt(stored_state)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=stored_state,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[str]:
        stored_state = stored_event.state
        try:
            if self.cipher:
                stored_state = self.cipher.decrypt(stored_state)
            if self.compressor:
                stored_state = self.compressor.decompress(stored_state)
            event_state: dict[str, Any] = self.transcoder.decode(stored_state)
        except Exception as e:
            msg = (
                f"Failed to deserialise stored event with topic "
                f"'{stored_event.topic}', originator_id "
                f"'{stored_event.originator_id}' and originator_version "
                f"{stored_event.originator_version}: {e}"
            )
            raise MapperDeserialisationError(msg) from e
        cls = resolve_topic(stored_event.topic)
        return cast(DomainEventProtocol[str], cls(**event_state))
