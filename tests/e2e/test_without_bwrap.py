"""On a machine without bubblewrap the suite is green outside CI; in CI (``$CI``
set, as ``.ci/run`` sets it), which installs bwrap, the tests that need it fail.

The CLI's ladder test runs gates through ``devs gate run``, which writes a
fallback notice to stderr where bwrap cannot sandbox. It runs here in a pytest
of its own, with bwrap missing the two ways the sandbox finds out: no ``bwrap``
on ``PATH`` (``shutil.which``), or a ``bwrap`` whose probe fails (a container
that forbids namespaces).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LADDER = "tests/e2e/test_cli.py::test_the_whole_ladder_through_real_gates"
NO_NAMESPACES = "bwrap: Creating new namespace failed: Operation not permitted"

pytestmark = pytest.mark.slow


def path_without_bwrap(into: Path) -> str:
    """A ``PATH`` of one directory: links to every program on ``PATH`` but bwrap."""
    into.mkdir()
    for directory in os.get_exec_path():
        if not Path(directory).is_dir():
            continue
        for program in Path(directory).iterdir():
            link = into / program.name
            if program.name == "bwrap" or link.is_symlink():
                continue
            if program.is_file() and os.access(program, os.X_OK):
                link.symlink_to(program)
    return str(into)


def path_with_a_broken_bwrap(into: Path) -> str:
    """``PATH`` with a bwrap first that cannot create a sandbox, as in a
    container without user namespaces."""
    into.mkdir()
    fake = into / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{NO_NAMESPACES}' >&2\nexit 1\n")
    fake.chmod(0o755)
    return os.pathsep.join([str(into), *os.get_exec_path()])


def run_ladder(path: str, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name != "CI"}
    env["PATH"] = path
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", LADDER, "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("make_path", [path_without_bwrap, path_with_a_broken_bwrap])
def test_outside_ci_the_ladder_passes_without_bwrap(
    tmp_path: Path, make_path: Callable[[Path], str]
) -> None:
    path = make_path(tmp_path / "bin")
    result = run_ladder(path, ci=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_in_ci_the_ladder_fails_without_bwrap(tmp_path: Path) -> None:
    result = run_ladder(path_without_bwrap(tmp_path / "bin"), ci="true")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout
    assert (
        "CI must run the sandboxed gate tests, but bwrap is not installed "
        "(not on PATH)" in result.stdout
    )


def test_in_ci_the_ladder_fails_where_bwrap_cannot_sandbox(tmp_path: Path) -> None:
    result = run_ladder(path_with_a_broken_bwrap(tmp_path / "bin"), ci="true")
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"CI must run the sandboxed gate tests, but bwrap cannot create a sandbox "
        f"here ({NO_NAMESPACES})" in result.stdout
    )
