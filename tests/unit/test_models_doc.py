"""docs/models.md is generated from the public pydantic models: it lists
every field of every model, and is never stale."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from devs.domain import HistoryEntry, Policy, TaskSummary
from devs.domain.audit import TaskAudit
from tests.helpers import load_module

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "models.md"


def generator() -> ModuleType:
    return load_module(ROOT / "scripts" / "generate_models_doc.py")


def test_docs_models_matches_the_models() -> None:
    assert DOC.read_text(encoding="utf-8") == generator().models_document(), (
        "docs/models.md is stale: run python scripts/generate_models_doc.py"
    )


def test_every_field_of_the_models_readers_asked_about_is_listed() -> None:
    text = DOC.read_text(encoding="utf-8")
    for model in (TaskAudit, HistoryEntry, TaskSummary, Policy):
        section = text.split(f"## `{model.__name__}`\n", 1)[1].split("\n## ", 1)[0]
        for name in model.model_fields:
            assert f"| `{name}` |" in section, (model.__name__, name)
    assert "| `entries` | `list[AuditEntry]` |" in text
    assert "## `AuditEntry`" in text  # a model a field holds has its own section
