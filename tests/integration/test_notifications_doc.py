"""docs/notifications.md stays true: a payload example for every message
type, each with the fields the code sends; the settings it lists are the
ones read; its hand-written signature check accepts what devs signs and
refuses what it did not."""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path
from typing import Any

from devs.adapters.notify.settings import (
    BACKOFF_ENV,
    EMAIL_ENV,
    PUBLIC_URL_ENV,
    REMINDER_ENV,
    SECRET_ENV,
    SLACK_API_ENV,
    SLACK_CHANNEL_ENV,
    SLACK_ENV,
    SLACK_TOKEN_ENV,
    SMTP_ENV,
    TIMEOUT_ENV,
    URLS_ENV,
)
from devs.adapters.notify.sweeper import Sweeper
from devs.adapters.notify.webhook import body_of, signed_headers
from devs.domain import RecoveryService
from devs.domain.names import MessageType
from devs.domain.policy import Policy
from tests.helpers import outbox_story

DOC = Path(__file__).resolve().parents[2] / "docs" / "notifications.md"
SECTION = re.compile(r"^### `([a-z._]+)`\n(.*?)(?=^### |^## )", re.M | re.S)
JSON_BLOCK = re.compile(r"```json\n(.*?)```", re.S)


def documented() -> dict[str, dict[str, Any]]:
    text = DOC.read_text()
    found = {}
    for name, body in SECTION.findall(text):
        block = JSON_BLOCK.search(body)
        if block is not None:
            found[name] = json.loads(block.group(1))
    return found


def every_kind_of_message(service: RecoveryService) -> dict[str, set[str]]:
    """Each type's data fields, over a story that sends every type (a task
    in a run, with a deadline and a reminder; a stop claimed, released,
    claimed and taken over; a running task rewound)."""
    outbox_story(service)
    service.start_run("r2", {"held": []})
    service.start_task("held", run_id="r2", agent="coder")
    for i in range(3):
        service.record_gate("held", 1, gate="pytest", strategy=f"s{i}", error="E x")
    service.policy = Policy(task_budget_usd=1.0)
    service.start_task("spender")
    service.record_usage(
        "spender", model="m", input_tokens=9, output_tokens=1, cost_usd=0.9
    )
    service.policy = Policy()
    service.claim("held", actor="ann")
    service.release("held", actor="ann")
    service.claim("held", actor="ann")
    service.take_over("held", actor="bob", reason="ann is away")
    service.resume("held", actor="bob", reason="go on")
    service.rewind("held", actor="bob", reason="start again")
    service.start_run("r1", {"near": []})
    for task_id, deadline, run_id in (("near", 60.0, "r1"), ("late", 0.5, None)):
        service.policy = Policy(human_deadline=deadline)
        service.start_task(task_id, run_id=run_id, agent="coder")
        for i in range(3):
            service.record_gate(task_id, 1, strategy=f"s{i}", error="E boom")
    time.sleep(0.6)
    # "near" is 60 s from its deadline, within the 59.9 s reminder; "late"
    # is past its own: whatever the machine's speed, one of each.
    assert Sweeper(service, 59.9).sweep() == (["late"], ["near"])
    fields: dict[str, set[str]] = {}
    for message in service.outbox_messages(limit=1000):
        fields.setdefault(message.type.value, set()).update(message.data)
    return fields


def test_every_type_has_a_real_example(service: RecoveryService) -> None:
    examples = documented()
    assert set(examples) == {kind.value for kind in MessageType}
    sent = every_kind_of_message(service)
    assert set(sent) == set(examples)
    for kind, example in examples.items():
        assert example["type"] == kind
        assert set(example) == {"type", "timestamp", "data"}
        data = set(example["data"])
        assert {"task_id", "state", "version", "position", "link"} <= data
        # Every field shown is one the code sends for that type.
        assert data - {"link"} <= sent[kind], (kind, data - sent[kind])


def test_every_setting_it_names_is_read_and_in_configuration() -> None:
    text = DOC.read_text()
    configuration = (DOC.parent / "configuration.md").read_text()
    names = {
        URLS_ENV,
        SECRET_ENV,
        BACKOFF_ENV,
        TIMEOUT_ENV,
        PUBLIC_URL_ENV,
        SLACK_ENV,
        SLACK_TOKEN_ENV,
        SLACK_CHANNEL_ENV,
        SLACK_API_ENV,
        SMTP_ENV,
        EMAIL_ENV,
        REMINDER_ENV,
        "DEVS_HUMAN_DEADLINE",
    }
    for name in names:
        assert f"| `{name}` |" in text, name
        assert f"| `{name}` |" in configuration, name
    assert set(re.findall(r"^\| `(DEVS_[A-Z_]+)` \|", text, re.M)) == names


def test_the_hand_written_check_accepts_a_real_signature_only() -> None:
    snippet = re.search(
        r"Without\na library.*?```python\n(.*?)```", DOC.read_text(), re.S
    )
    assert snippet is not None
    secret = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
    service_message = outbox_message()
    body = body_of(service_message)
    headers = signed_headers(service_message, body, secret)

    def check(body: bytes, headers: dict[str, str], secret: str) -> bool:
        scope: dict[str, Any] = {"body": body, "headers": headers, "secret": secret}
        exec(snippet.group(1), scope)
        return bool(scope["ok"])

    assert check(body, headers, secret)
    assert not check(body + b" ", headers, secret)
    other = "whsec_" + base64.b64encode(b"fedcba9876543210fedcba9876543210").decode()
    assert not check(body, headers, other)


def outbox_message() -> Any:
    from devs.adapters.config import memory_env, open_service

    service = open_service(env=memory_env())
    try:
        service.start_task("t1")
        for i in range(3):
            service.record_gate("t1", 1, strategy=f"s{i}", error="E")
        return service.outbox_messages()[0]
    finally:
        service.close()
