"""Write docs/models.md from the public pydantic models themselves: every
model ``devs.domain`` exports, the audit reports, and every model their fields
hold, each with its fields, their types, defaults and meanings.

    python scripts/generate_models_doc.py

A test (tests/unit/test_models_doc.py) fails when the file is stale.
"""

from __future__ import annotations

import ast
import enum
import inspect
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

import devs.domain
from devs.domain import audit

TARGET = Path(__file__).resolve().parent.parent / "docs" / "models.md"

HEADER = """# The public models

Every value the service returns (and `Policy`, which it takes) is a frozen
pydantic model: read its fields as attributes (`summary.state`), dump it with
`model_dump()` or `model_dump_json()`. Over HTTP each is the JSON object of the
same name in `/openapi.json`. Generated from the models by
`python scripts/generate_models_doc.py`: a test fails when this page is stale.

Import each from the module named under it; those of `devs.domain` are
imported as `from devs.domain import TaskSummary, Policy`.
"""


def roots() -> list[type[BaseModel]]:
    """The models a user meets first: devs.domain's exports, the audit's."""
    found: list[type[BaseModel]] = []
    for module in (devs.domain, audit):
        exported = getattr(module, "__all__", None)
        for name in exported if exported is not None else dir(module):
            value = getattr(module, name)
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and not name.startswith("_")
                # a module without __all__: its own classes, not its imports
                and (exported is not None or value.__module__ == module.__name__)
                and value not in found
            ):
                found.append(value)
    return found


def nested(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds (in lists, dicts, unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in nested(arg)]


def every_model() -> list[type[BaseModel]]:
    """The roots and every model their fields hold, each once, by name."""
    seen: dict[str, type[BaseModel]] = {}
    todo = roots()
    while todo:
        model = todo.pop()
        if model.__name__ in seen:
            continue
        seen[model.__name__] = model
        for field in model.model_fields.values():
            todo += nested(field.annotation)
    return [seen[name] for name in sorted(seen)]


def type_name(annotation: Any) -> str:
    """An annotation as a reader writes it: ``list[Lesson]``, ``str | None``."""
    if annotation is type(None):
        return "None"
    if annotation is Ellipsis:
        return "..."
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(annotation))
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{args}]" if args else name
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = " | ".join(repr(member.value) for member in annotation)
        return f"{annotation.__name__} ({values})"
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"\b[a-z_]+\.", "", str(annotation))


def attribute_docs(model: type[BaseModel]) -> dict[str, str]:
    """The strings written right after each field in the class body, for the
    model and the classes it inherits fields from."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        for before, after in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(before, ast.AnnAssign)
                and isinstance(before.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[before.target.id] = after.value.value
    return docs


def escaped(text: str) -> str:
    """A table cell's text with its pipes escaped (GitHub splits a row at a
    pipe even inside backticks)."""
    return text.replace("|", "\\|")


def one_line(text: str) -> str:
    """A description as one table cell: its first paragraph on one line."""
    first = inspect.cleandoc(text).split("\n\n")[0]
    return " ".join(first.split()).replace("|", "\\|")


def model_section(model: type[BaseModel]) -> str:
    home = "devs.domain" if hasattr(devs.domain, model.__name__) else model.__module__
    lines = [f"## `{model.__name__}`", "", f"`{home}`", ""]
    if model.__doc__ and model.__doc__ is not BaseModel.__doc__:
        lines += [one_line(model.__doc__), ""]
    documented = attribute_docs(model)
    lines += ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if field.is_required():
            default = "required"
        elif field.default_factory is not None:
            factory = field.default_factory
            made: object = factory() if factory in (list, dict, tuple, set) else None
            default = (
                f"`{made!r}`"
                if made is not None
                else (f"made by `{getattr(factory, '__name__', 'a factory')}()`")
            )
        elif field.default is PydanticUndefined:
            default = "required"
        else:
            shown = field.default
            default = f"`{getattr(shown, 'value', shown)!r}`"
        meaning = field.description or documented.get(name, "")
        lines.append(
            f"| `{name}` | `{escaped(type_name(field.annotation))}` | {default} | "
            f"{one_line(meaning) if meaning else ''} |"
        )
    return "\n".join(lines) + "\n"


def models_document() -> str:
    """docs/models.md, as the models say today."""
    sections = [model_section(model) for model in every_model()]
    return HEADER + "\n" + "\n".join(sections)


def main() -> int:
    TARGET.write_text(models_document(), encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
