"""The test lanes and the parallel run (tests/conftest.py, "parallel runs"):
every test a plain ``pytest`` leaves out is run by a lane of its own in CI,
and README says how to run each."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from tests import conftest

ROOT = Path(__file__).resolve().parents[2]
README_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -q '.[test]' "
    "&& .venv/bin/python -m pytest"
)


def left_out() -> list[str]:
    """The markers pyproject's addopts leaves out of a plain run."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    addopts = shlex.split(pyproject["tool"]["pytest"]["ini_options"]["addopts"])
    expression = addopts[addopts.index("-m") + 1]
    names = re.findall(r"not (\w+)", expression)
    assert expression == " and ".join(f"not {name}" for name in names), expression
    return names


def test_every_lane_left_out_of_the_plain_run_runs_in_ci_and_is_documented() -> None:
    names = left_out()
    assert {"slow", "agents", "waits", "timing"} <= set(names)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = {
        line.split(":")[0]
        for line in pyproject["tool"]["pytest"]["ini_options"]["markers"]
    }
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    after = ci[ci.index(README_COMMAND) :]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    develop = readme[readme.index("## Develop") :]
    for name in names:
        assert name in declared, name
        step = f".venv/bin/python -m pytest -m {name}"
        assert any(line.split(" -n ")[0] == step for line in after), name
        assert f"pytest -m {name}" in readme, name
    assert ".venv/bin/python -m pytest -m waits" in develop


def test_the_test_extra_brings_the_parallel_runner() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    test_extra = pyproject["project"]["optional-dependencies"]["test"]
    assert any(spec.startswith("pytest-xdist") for spec in test_extra)


def test_each_worker_writes_its_own_examples_and_reads_every_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = DirectoryBasedExampleDatabase(tmp_path / "examples-gw1")
    other.save(b"k", b"from gw1")
    monkeypatch.setenv(conftest.WORKER_ENV, "gw0")
    database = conftest.examples_database(tmp_path)
    database.save(b"k", b"from gw0")
    assert sorted(database.fetch(b"k")) == [b"from gw0", b"from gw1"]
    database.delete(b"k", b"from gw1")  # another worker's: only read
    assert list(other.fetch(b"k")) == [b"from gw1"]
    own = DirectoryBasedExampleDatabase(tmp_path / "examples-gw0")
    assert list(own.fetch(b"k")) == [b"from gw0"]
    assert not (tmp_path / "examples").exists()
    monkeypatch.delenv(conftest.WORKER_ENV)
    conftest.examples_database(tmp_path).save(b"k", b"in one process")
    alone = DirectoryBasedExampleDatabase(tmp_path / "examples")
    assert list(alone.fetch(b"k")) == [b"in one process"]


PARALLEL_ENV = (conftest.WORKER_ENV, "PYTEST_XDIST_AUTO_NUM_WORKERS", "PYTEST_ADDOPTS")


def run_pytest(*arguments: str) -> str:
    """What a pytest run with these arguments prints."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in PARALLEL_ENV},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("arguments", "workers"),
    [
        (("tests/unit/test_names.py",), None),  # a file named: one process
        (("tests/unit/test_names.py", "-n", "2"), 2),
        (("tests/unit", "-n", "0"), None),
        (("tests/unit", "-p", "no:xdist"), None),
        (("tests/unit",), 2 * len(os.sched_getaffinity(0))),  # two per core
    ],
)
@pytest.mark.slow  # five pytest runs, four collecting tests/unit
def test_workers_unless_files_are_named_or_one_process_is_asked(
    arguments: tuple[str, ...], workers: int | None
) -> None:
    output = run_pytest(*arguments, "-k", "test_an_old_kind_is_read_as_today_s")
    assert "1 passed" in output, output
    if workers is None:
        assert "workers" not in output, output
    else:
        assert f"created: {workers}/{workers} workers" in output, output
