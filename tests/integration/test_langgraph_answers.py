"""A human's answer to a suspended graph is the arguments of the command it
records (:data:`devs.domain.arguments.COMMANDS`): its keys, types, limits and
descriptions are those fields', and a wrong one is refused in the words the
HTTP API uses for the same value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langgraph.types import Command

from devs.adapters.http import create_app
from devs.adapters.langgraph import (
    ANSWER_COMMANDS,
    NO_REASON,
    HumanDecision,
    _arguments,
    _human,
)
from devs.domain import InvalidInput, RecoveryService
from devs.domain.arguments import COMMANDS
from devs.domain.names import HumanAction
from devs.domain.service import RecoveryApi
from tests.langgraph_agent import (
    ScriptedModel,
    Turn,
    build,
    config,
    make_repo,
    referee_for,
    saver,
)


def contract(schema: dict[str, Any]) -> dict[str, Any]:
    """What a field's schema says of its values (not its title or default),
    a null it may also be left out."""
    kinds = [kind for kind in schema.get("anyOf", [schema]) if kind != {"type": "null"}]
    assert len(kinds) == 1, schema
    said = {k: v for k, v in kinds[0].items() if k not in ("title", "default")}
    return {**said, "description": schema.get("description")}


def test_every_action_records_a_declared_command() -> None:
    assert set(ANSWER_COMMANDS) == {str(action) for action in HumanAction}
    for command in ANSWER_COMMANDS.values():
        assert command in COMMANDS
        assert callable(getattr(RecoveryApi, command))


def test_a_decision_holds_the_commands_fields() -> None:
    """Every key but ``action`` is a field of an answer's command, with its
    values, limits and description; only ``actor`` (in every command,
    required in each) is required; ``reason`` defaults as the CLI's."""
    decision = HumanDecision.model_json_schema()["properties"]
    fields = {
        name
        for command in ANSWER_COMMANDS.values()
        for name in COMMANDS[command].model_fields
    } - {"task_id"}
    assert set(decision) == fields | {"action"}
    for command in ANSWER_COMMANDS.values():
        declared = COMMANDS[command].model_json_schema()["properties"]
        for name in set(declared) - {"task_id"}:
            assert contract(decision[name]) == contract(declared[name]), (command, name)
    required = {
        name for name, info in HumanDecision.model_fields.items() if info.is_required()
    }
    assert required == {"action", "actor"}
    assert HumanDecision.model_fields["reason"].default == NO_REASON
    assert HumanDecision.model_config.get("extra") == "forbid"


def test_resolve_without_a_resolution_is_refused_as_the_service_refuses_it() -> None:
    answer = _human({"action": "resolve", "actor": "ann"})
    with pytest.raises(InvalidInput, match=r"^resolution is required$") as refused:
        _arguments("resolve_handoff", "t1", answer)
    assert refused.value.field == "resolution"
    rewind = _human({"action": "rewind", "actor": "ann", "to_commit": "abc"})
    assert _arguments("rewind", "t1", rewind) == {
        "task_id": "t1",
        "actor": "ann",
        "reason": NO_REASON,
        "to_commit": "abc",
        "if_version": None,
    }


def test_a_value_is_refused_in_the_words_of_the_http_api(
    tmp_path: Path, service: RecoveryService
) -> None:
    """The payload's ``error`` for a wrong value is the 422's ``detail`` and
    ``field`` for the same value in the same command's HTTP body; a
    misspelled key is named with the one it most likely meant."""
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(repo, {"x": Turn(entropy=0.99)})
    service.start_task("t1")
    bad: list[tuple[str, dict[str, Any]]] = [
        ("resume", {"actor": " ann"}),
        ("resume", {"actor": "ann", "reason": ""}),
        ("resume", {"actor": "a" * 201}),
        ("resume", {"actor": 7}),
        ("rewind", {"actor": "ann", "to_commit": "a\nb"}),
        ("skip", {"actor": "ann", "reason": "x" * 4001}),
    ]
    with TestClient(create_app(service)) as http:
        said = {}
        for action, body in bad:
            answer = http.post(f"/tasks/t1/{action}", json=body)
            assert answer.status_code == 422, answer.text
            said[action, repr(body)] = (answer.json()["detail"], answer.json()["field"])
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee_for(service, repo), model, ["x"], checkpointer)
        graph.invoke({"task_id": "t1"}, config("a"))
        before = service.task("t1").version
        for action, body in bad:
            resumed = graph.invoke(
                Command(resume={"action": action, **body}), config("a")
            )
            error = resumed["__interrupt__"][0].value["error"]
            assert (error["detail"], error["field"]) == said[action, repr(body)]
        misspelled = {"action": "resume", "actor": "ann", "reasn": "go on"}
        resumed = graph.invoke(Command(resume=misspelled), config("a"))
        error = resumed["__interrupt__"][0].value["error"]
        assert error["field"] == "reasn"
        assert error["detail"].startswith(
            "unknown field 'reasn'; did you mean 'reason'? (known: action, actor,"
        )
        assert service.task("t1").version == before


def test_an_answer_s_request_is_the_one_earlier_releases_recorded() -> None:
    """The idempotency request of each answer is as 0.1 wrote it, so that an
    answer recorded before an upgrade, given back by LangGraph after it, is
    the same request (a claim under its old name, a resolution before its
    reason; the others in their model's order)."""
    from devs.adapters.langgraph import _request

    base = {"task_id": "t1", "actor": "ana", "if_version": None}
    assert _request("claim", base) == ("claim_handoff", "t1", "ana")
    assert _request("release", base) == ("release", "t1", "ana")
    said = {**base, "reason": "why", "if_version": 4}
    assert _request("resume", said) == ("resume", "t1", "ana", "why", 4)
    assert _request("take_over", said) == ("take_over", "t1", "ana", "why", 4)
    rewind = {**said, "to_commit": "abc"}
    assert _request("rewind", rewind) == ("rewind", "t1", "ana", "why", "abc", 4)
    resolve = {**said, "resolution": "complete"}
    assert _request("resolve_handoff", resolve) == (
        "resolve_handoff",
        "t1",
        "ana",
        "complete",
        "why",
        4,
    )
