"""The CLI tests' forked ``devs`` processes (tests/devs_process.py) answer as
fresh ones do: the same output, errors and exit status for the same command,
environment, working directory and standard input; a kill at the timeout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests import devs_process
from tests.devs_process import DEVS

DAG = json.dumps({"a": [], "b": ["a"]})
TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z?")
CODES = [0, 0, 8, 0, 6, 0, 0, 0, 0, 2, 7]


def test_a_forked_command_answers_as_a_fresh_one(tmp_path: Path) -> None:
    """Each command runs twice, forked and fresh, on twin stores: what either
    printed, and its exit status, must match; the env picks the store and the
    default store is the working directory's."""
    calls: list[tuple[list[str], dict[str, str], str | None]] = [
        (["--version"], {}, None),
        (["task", "start", "t1", "--agent", "coder"], {}, None),
        (["task", "start", "t1"], {}, None),  # already exists: refused, exit 8
        (["attempt", "t1", "first idea"], {}, None),
        (["entropy", "t1", "1.5"], {}, None),  # out of range: exit 6
        (["task", "show", "t1", "--json"], {}, None),
        (["run", "start", "r1", "--dag", "-"], {}, DAG),  # the DAG on stdin
        (["status"], {}, None),
        (["status", "--json"], {"DEVS_DB": "other.sqlite"}, None),  # empty store
        (["no-such-command"], {}, None),  # usage: exit 2
        (["task", "show", "missing"], {}, None),  # not found: exit 7
    ]
    results = []
    for how in ("forked", "fresh"):
        folder = tmp_path / how
        folder.mkdir()
        base = {k: v for k, v in os.environ.items() if k != "DEVS_DB"}
        for args, env, input in calls:
            command = [DEVS, *args]
            if how == "forked":
                done = devs_process.run(
                    command, cwd=folder, env={**base, **env}, input=input, timeout=60
                )
            else:
                done = devs_process.fresh(
                    command, cwd=folder, env={**base, **env}, input=input, timeout=60
                )
            out, err = (TIME.sub("<time>", text) for text in (done.stdout, done.stderr))
            results.append((how, args, done.returncode, out, err))
        assert sorted(p.name for p in folder.iterdir() if p.suffix == ".sqlite") == [
            "devs_state.sqlite",
            "other.sqlite",
        ]
    half = len(results) // 2
    for forked, fresh_one in zip(results[:half], results[half:], strict=True):
        assert forked[1:] == fresh_one[1:], (forked, fresh_one)
    codes = [code for _, _, code, _, _ in results[:half]]
    assert codes == CODES, str(codes)


def test_what_one_command_sets_does_not_reach_the_next(tmp_path: Path) -> None:
    """The environment and working directory are each command's own: a
    store named by ``DEVS_DB`` in one call is not the next call's."""
    base = {k: v for k, v in os.environ.items() if k != "DEVS_DB"}
    named = {**base, "DEVS_DB": str(tmp_path / "named.sqlite")}
    devs_process.run([DEVS, "task", "start", "t1"], env=named, cwd=tmp_path, check=True)
    shown = devs_process.run([DEVS, "task", "show", "t1"], env=base, cwd=tmp_path)
    assert shown.returncode == 7, shown  # not found in ./devs_state.sqlite
    again = devs_process.run([DEVS, "task", "show", "t1"], env=named, cwd=tmp_path)
    assert again.returncode == 0, again


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    devs_process.run([DEVS, "--db", str(db), "task", "start", "t1"], check=True)
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        devs_process.run(
            [DEVS, "--db", str(db), "gate", "run", "t1", "--", "sleep", "30"],
            env={**os.environ, "DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES": "1"},
            timeout=1,
        )
    assert time.monotonic() - started < 20


def test_check_raises_as_subprocess_does(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as raised:
        devs_process.run([DEVS, "--db", str(tmp_path / "s.sqlite"), "nope"], check=True)
    assert raised.value.returncode == 2
