"""The CLI's options that are a command's arguments say what the command's
model says (:data:`devs.domain.arguments.COMMANDS`): the same description,
the same values and ranges as ``/openapi.json`` and the MCP tools, and the
same default. The mapping below is declared here, apart from the CLI, so an
option written by hand again (its own help, its own range) fails."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from devs.adapters.cli import cli
from devs.adapters.cli.base import field_option, field_schema, help_of, type_of
from devs.domain.arguments import COMMANDS

ANSWERS = {"reason": "reason", "actor": "actor", "if_version": "if_version"}
MAPPED: dict[tuple[str, ...], tuple[str, dict[str, str]]] = {
    ("resume",): ("resume", ANSWERS),
    ("rewind",): ("rewind", {**ANSWERS, "to_commit": "to_commit"}),
    ("skip",): ("skip", ANSWERS),
    ("claim",): ("claim", {"actor": "actor", "if_version": "if_version"}),
    ("release",): ("release", {"actor": "actor", "if_version": "if_version"}),
    ("take-over",): ("take_over", ANSWERS),
    ("resolve",): ("resolve_handoff", {**ANSWERS, "resolution": "resolution"}),
    ("task", "start"): (
        "start_task",
        {"run_id": "run_id", "agent": "agent", "last_commit": "last_commit"},
    ),
    ("gate", "run"): ("record_gate", {"gate_name": "gate", "strategy": "strategy"}),
    ("run", "start"): ("start_run", {"stop_scope": "stop_scope"}),
    ("what-if",): (
        "what_if",
        {
            "escalation_threshold": "policy.escalation_threshold",
            "handoff_threshold": "policy.handoff_threshold",
            "hitl_entropy_threshold": "policy.hitl_entropy_threshold",
            "stuck_detection": "policy.stuck_detection",
            "task_budget_usd": "policy.task_budget_usd",
            "task_budget_tokens": "policy.task_budget_tokens",
            "run_id": "run_id",
        },
    ),
}
"""Each CLI command whose options are a command's arguments: the command,
and each such option (its parameter name) -> the field it is."""

NOT_ONE_TO_ONE: dict[tuple[str, ...], set[str]] = {
    ("task", "start"): {"links"},  # NAME=WHERE, repeated: a mapping
    ("what-if",): {"task_ids"},  # --task, repeated: a list
}
"""Options named as a field that do not map one to one, and say so."""

SERVICE_RANGES: dict[tuple[str, ...], set[str]] = {
    ("what-if",): {
        "escalation_threshold",
        "handoff_threshold",
        "hitl_entropy_threshold",
        "task_budget_usd",
        "task_budget_tokens",
    }
}
"""Numbers whose range the service checks (a refusal in its words, exit 6:
tests/e2e/test_cli_audit.py), not click."""


def command_at(path: tuple[str, ...]) -> click.Command:
    found: click.Command = cli
    for name in path:
        assert isinstance(found, click.Group), path
        found = found.commands[name]
    return found


def options_of(path: tuple[str, ...]) -> dict[str, click.Option]:
    return {
        str(param.name): param
        for param in command_at(path).params
        if isinstance(param, click.Option)
    }


def schema_of(command: str, field: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The field's property in the command's JSON Schema, and its non-null
    type (followed through ``$ref`` for a nested model's field)."""
    schema = COMMANDS[command].model_json_schema()
    prop: dict[str, Any] = schema
    for name in field.split("."):
        if "$ref" in prop:
            prop = schema["$defs"][prop["$ref"].split("/")[-1]]
        prop = prop["properties"][name]
    kinds = [kind for kind in prop.get("anyOf", [prop]) if kind.get("type") != "null"]
    assert len(kinds) == 1, (command, field, prop)
    return prop, kinds[0]


CASES = [
    (path, command, option, field)
    for path, (command, fields) in MAPPED.items()
    for option, field in fields.items()
]


@pytest.mark.parametrize(("path", "command", "option", "field"), CASES)
def test_an_option_says_what_its_field_says(
    path: tuple[str, ...], command: str, option: str, field: str
) -> None:
    param = options_of(path).get(option)
    assert param is not None, f"devs {' '.join(path)} has no option for {field}"
    prop, kind = schema_of(command, field)
    description = str(prop["description"]).strip()
    sentence = description[0].upper() + description[1:]
    sentence += "" if sentence.endswith(".") else "."
    assert param.help is not None
    assert param.help == sentence or param.help.startswith(sentence + " "), (
        param.help,
        description,
    )
    if "enum" in kind:
        assert isinstance(param.type, click.Choice)
        assert list(param.type.choices) == kind["enum"]
    elif kind["type"] in ("integer", "number"):
        number = click.types.IntParamType if kind["type"] == "integer" else float
        if option in SERVICE_RANGES.get(path, ()):
            assert param.type in (click.INT, click.FLOAT)
            assert not isinstance(param.type, click.types._NumberRangeBase)
        else:
            assert isinstance(param.type, click.types._NumberRangeBase)
            low = kind.get("minimum", kind.get("exclusiveMinimum"))
            high = kind.get("maximum", kind.get("exclusiveMaximum"))
            assert (param.type.min, param.type.max) == (low, high)
            assert param.type.min_open == ("exclusiveMinimum" in kind)
            assert param.type.max_open == ("exclusiveMaximum" in kind)
        if number is float:
            assert isinstance(param.type, click.types.FloatParamType)
        else:
            assert isinstance(param.type, click.types.IntParamType)
    else:
        assert kind["type"] == "string"
        assert param.type is click.STRING
    if prop.get("default") is not None:
        assert param.default == prop["default"]


@pytest.mark.parametrize("path", list(MAPPED))
def test_every_option_named_as_a_field_is_mapped(path: tuple[str, ...]) -> None:
    """An option named as one of its command's fields is in :data:`MAPPED`
    (compared above) or said not to map one to one."""
    command, fields = MAPPED[path]
    model = COMMANDS[command]
    names = set(model.model_fields)
    policy = model.model_fields.get("policy")
    if policy is not None:
        names |= set(getattr(policy.annotation, "model_fields", {}))
    named = {option for option in options_of(path) if option in names}
    assert named - set(fields) <= NOT_ONE_TO_ONE.get(path, set())


def test_the_human_answers_keep_their_defaults() -> None:
    """The fields' words, the command line's defaults: the OS user acts, and
    a reason left out is said to be."""
    for path in (("resume",), ("take-over",), ("resolve",)):
        options = options_of(path)
        assert options["reason"].default == "(no reason given)"
        assert options["actor"].show_default == "the OS user"
        assert callable(options["actor"].default)
    assert options_of(("gate", "run"))["gate_name"].default == "tests"
    assert options_of(("run", "start"))["stop_scope"].default == "run"
    assert options_of(("resolve",))["resolution"].required


def test_a_field_that_is_not_there_is_named() -> None:
    with pytest.raises(KeyError, match=r"resume has no field 'to_comit'"):
        field_option("--to-commit", command="resume", field="to_comit")
    with pytest.raises(KeyError, match=r"no command 'resumes'"):
        field_option("--reason", command="resumes", field="reason")
    with pytest.raises(KeyError, match=r"what_if has no field 'policy.nope'"):
        field_schema("what_if", "policy.nope")


def test_types_of_schemas() -> None:
    assert help_of("why, in a sentence") == "Why, in a sentence."
    assert help_of("Done.") == "Done."
    ranged = type_of({"type": "integer", "minimum": 1, "maximum": 9})
    assert isinstance(ranged, click.IntRange)
    assert (ranged.min, ranged.max) == (1, 9)
    assert type_of({"type": "integer", "minimum": 1}, ranges=False) is click.INT
    opened = type_of({"type": "number", "exclusiveMinimum": 0, "maximum": 5})
    assert isinstance(opened, click.FloatRange)
    assert opened.min_open
    assert not opened.max_open
    assert type_of({"type": "number"}) is click.FLOAT
    choice = type_of({"type": "string", "enum": ["a", "b"]})
    assert isinstance(choice, click.Choice)
    assert list(choice.choices) == ["a", "b"]
    assert type_of({"type": "string", "maxLength": 3}) is click.STRING
    with pytest.raises(ValueError, match="a field of type object is not one"):
        type_of({"type": "object"})
    with pytest.raises(ValueError, match="a field of type array is not one"):
        field_option("--dag", command="what_if", field="task_ids")


def test_a_range_click_checks_is_a_usage_error() -> None:
    """``--if-version 0``: click refuses it, as the field's minimum says."""
    runner = CliRunner()
    result = runner.invoke(cli, ["resume", "t", "--if-version", "0"])
    assert result.exit_code == 2
    assert "1<=x<=" in result.output
