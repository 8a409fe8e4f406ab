"""``devs status --limit N --after TASK``: the task list a page at a time,
the installed command run as a user runs it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from tests.e2e.test_cli import BAD_INPUT, USAGE, Devs, assert_one_line_error
from tests.helpers import event_count

IDS = ("t3", "t1", "a", "t2", "b")


@pytest.fixture
def devs(tmp_path: Path) -> Devs:
    """The command on a file whose tasks were started in process (quicker
    than a ``devs task start`` each)."""
    devs = Devs(tmp_path / "state.sqlite", tmp_path)
    with open_service(Settings(db=str(devs.db))) as service:
        for task_id in IDS:
            service.start_task(task_id)
    return devs


def next_page(output: str) -> list[str] | None:
    """The arguments of the command the last line gives for the next page."""
    lines = output.strip().splitlines()
    if not lines or not lines[-1].startswith("next page: "):
        return None
    words = shlex.split(lines[-1].removeprefix("next page: "))
    assert words[:2] == ["devs", "status"]
    return words[2:]


def test_json_pages_carry_every_task_once_with_the_next_command_on_stderr(
    devs: Devs,
) -> None:
    found: list[str] = []
    arguments: list[str] | None = ["--limit", "2", "--json"]
    while arguments is not None:
        result = devs("status", *arguments)
        page = [task["task_id"] for task in json.loads(result.stdout)]
        assert len(page) <= 2
        found += page
        arguments = next_page(result.stderr)
    assert found == sorted(IDS)
    # The last page (full here: 5 tasks, 1 after the first 4) says no more.
    last = devs("status", "--limit", "1", "--after", "t2", "--json")
    assert [task["task_id"] for task in json.loads(last.stdout)] == ["t3"]
    assert last.stderr == ""


def test_the_table_ends_with_the_command_for_the_next_page(devs: Devs) -> None:
    first = devs("status", "--limit", "3")
    assert next_page(first.stdout) == ["--limit", "3", "--after", "t1"]
    table = first.stdout
    assert all(task_id in table for task_id in ("a", "b", "t1"))
    assert "t2" not in table
    second = devs("status", "--limit", "3", "--after", "t1")
    assert "t2" in second.stdout
    assert "t3" in second.stdout
    assert next_page(second.stdout) is None
    assert next_page(devs("status").stdout) is None  # the whole list: no pages


def test_pages_of_a_run(devs: Devs, tmp_path: Path) -> None:
    dag = tmp_path / "dag.json"
    dag.write_text(json.dumps({"n2": [], "n1": [], "n3": []}))
    devs("run", "start", "r", "--dag", str(dag))
    for node in ("n2", "n1", "n3"):
        devs("task", "start", node, "--run", "r")
    first = devs("status", "--run", "r", "--limit", "2")
    assert next_page(first.stdout) == ["--run", "r", "--limit", "2", "--after", "n2"]
    rest = devs.json("status", "--run", "r", "--limit", "2", "--after", "n2")
    assert [task["task_id"] for task in rest] == ["n3"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--limit", "0"), "limit must be an integer in [1, 10000], got 0"),
        (("--limit", "-3"), "limit must be an integer in [1, 10000], got -3"),
        (("--limit", "10001"), "limit must be an integer in [1, 10000], got 10001"),
        (("--after", ""), "after must not be empty"),
        (("--after", "a\nb"), "after must not contain control characters"),
        (("--after", " a"), "after must not start or end with whitespace"),
    ],
)
def test_a_bad_page_is_one_line_and_exit_6(
    devs: Devs, args: tuple[str, ...], message: str
) -> None:
    before = event_count(devs.db)
    assert_one_line_error(devs("status", *args, code=BAD_INPUT), message)
    assert event_count(devs.db) == before


@pytest.mark.parametrize("limit", ["NaN", "many", "1.5"])
def test_a_limit_that_is_no_integer_is_a_usage_error(devs: Devs, limit: str) -> None:
    result = devs("status", "--limit", limit, code=USAGE)
    assert "'--limit'" in result.stderr
    assert "is not a valid integer" in result.stderr
