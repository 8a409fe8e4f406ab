"""A Referee's gate command: required at construction, and run where a graph
author's Python lives (a venv or a version manager outside the sandbox's
read-only paths), with ``allow_paths`` for what else it needs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from devs.adapters.langgraph import Referee
from devs.domain import InvalidInput, RecoveryService
from tests.helpers import require_bwrap
from tests.langgraph_agent import (
    IDEAS,
    ScriptedModel,
    Turn,
    build,
    config,
    make_repo,
    referee_for,
    saver,
)


@pytest.mark.parametrize("command", [None, [], ()], ids=["missing", "list", "tuple"])
def test_a_referee_without_a_test_command_is_refused_at_construction(
    service: RecoveryService, command: Any
) -> None:
    with pytest.raises(
        InvalidInput, match=r"test_command=\.\.\.\) is required"
    ) as info:
        Referee(service, test_command=command)
    assert info.value.field == "test_command"


def test_a_test_command_given_as_one_string_is_refused(
    service: RecoveryService,
) -> None:
    with pytest.raises(InvalidInput, match="not one string"):
        Referee(service, test_command="python -m pytest -q")


def test_a_callable_test_command_is_taken(service: RecoveryService) -> None:
    referee = Referee(service, test_command=lambda state: ["true"])
    assert callable(referee.test_command)


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("relative/dir", "must be absolute"),
        ("/nonexistent/devs-allow", "does not exist"),
        ("/tmp\n/x", "control character"),
    ],
    ids=["relative", "missing", "control"],
)
def test_allow_paths_are_checked_at_construction(
    service: RecoveryService, path: str, said: str
) -> None:
    with pytest.raises(InvalidInput, match=said) as info:
        Referee(service, test_command=["true"], allow_paths=[path])
    assert info.value.field == "allow_paths"


def test_allow_paths_must_be_a_list(service: RecoveryService, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="not one path"):
        Referee(service, test_command=["true"], allow_paths=str(tmp_path))


def run_graph(
    service: RecoveryService, where: Path, task_id: str, **options: Any
) -> str:
    """A graph whose first turn fixes the code, its gate running with
    ``options``; the task's state at the end."""
    repo = make_repo(where / "repo")
    model = ScriptedModel(repo, {IDEAS[0]: Turn(fixes=True)})
    service.start_task(task_id)
    referee = referee_for(service, repo, isolation="require", **options)
    with saver(where / "graph.sqlite") as checkpointer:
        build(referee, model, list(IDEAS), checkpointer).invoke(
            {"task_id": task_id}, config(task_id)
        )
    return service.task(task_id).state


def test_a_python_outside_the_read_only_paths_runs_the_gate(
    service: RecoveryService, tmp_path: Path
) -> None:
    """A virtual environment under /tmp (which the sandbox hides) whose
    ``python`` links to the real interpreter: its installation is shown, so
    the documented command works without allow_paths."""
    require_bwrap()
    env = tmp_path / "elsewhere" / "venv"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    python.symlink_to(os.path.realpath(sys.executable))
    (env / "pyvenv.cfg").write_text(f"home = {Path(sys.base_prefix) / 'bin'}\n")
    command = [
        str(python),
        "-c",
        "import sys, calc; sys.exit(0 if calc.add(2, 3) == 5 else 1)",
    ]
    assert run_graph(service, tmp_path, "t1", test_command=command) == "COMPLETED"


def test_allow_paths_reach_a_directory_the_sandbox_hides(
    service: RecoveryService, tmp_path: Path
) -> None:
    """The gate reads a file under /tmp: only with allow_paths."""
    require_bwrap()
    data = tmp_path / "data"
    data.mkdir()
    (data / "expected").write_text("5")
    command = [
        sys.executable,
        "-c",
        "import sys, calc; "
        f"expected = int(open({str(data / 'expected')!r}).read()); "
        "sys.exit(0 if calc.add(2, 3) == expected else 1)",
    ]
    for name in ("hidden", "shown"):
        (tmp_path / name).mkdir()
    hidden = run_graph(service, tmp_path / "hidden", "t1", test_command=command)
    assert hidden != "COMPLETED"
    shown = run_graph(
        service, tmp_path / "shown", "t2", test_command=command, allow_paths=[data]
    )
    assert shown == "COMPLETED"
