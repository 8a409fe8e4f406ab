"""The pytest plugin costs nothing until a test uses it: pytest loads it (entry
point ``pytest11``) in every run of every environment that has devs-recovery,
so importing it must not import the domain, hypothesis or their dependencies;
its fixtures import them when a test asks for one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

HEAVY = (
    "devs.domain",
    "devs.projections",
    "devs.adapters",
    "devs.testing.machine",
    "devs.testing.model",
    "devs.testing.strategies",
    "hypothesis",
    "eventsourcing",
    "pydantic",
    "pydantic_settings",
    "rapidfuzz",
    "transitions",
    "orjson",
)

NEW_MODULES = """
import json, sys
import pytest
before = set(sys.modules)
import {module}
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _modules_loaded_by(module: str) -> list[str]:
    """The modules ``import {module}`` adds, after pytest, in a fresh
    interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", NEW_MODULES.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def _is_heavy(module: str) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in HEAVY)


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    loaded = _modules_loaded_by("devs.testing.plugin")
    assert [name for name in loaded if _is_heavy(name)] == []
    # Beyond pytest: the standard library and the plugin's own package.
    ours = {
        name for name in loaded if name.split(".")[0] not in sys.stdlib_module_names
    }
    assert ours == {"devs", "devs.testing", "devs.testing.plugin"}


def test_importing_the_kit_defers_its_names_until_asked() -> None:
    assert [
        name for name in _modules_loaded_by("devs.testing") if _is_heavy(name)
    ] == []
    code = (
        "import devs.testing as kit; names = set(dir(kit)); "
        "from devs.testing import LadderModel, RecoveryMachine, policies; "
        "from devs.testing.model import LadderModel as Model; "
        "assert LadderModel is Model and kit.RecoveryMachine is RecoveryMachine; "
        "assert set(kit.__all__) <= names, set(kit.__all__) - names; "
        "print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_a_pytest_run_loads_the_domain_only_for_a_test_that_uses_a_fixture(
    tmp_path: Path,
) -> None:
    """The entry point is installed and its fixtures work; a test that uses
    neither runs with the domain unimported."""
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import sys


            def test_without_the_fixtures():
                assert "devs.testing.plugin" in sys.modules
                assert not [m for m in sys.modules if m.startswith("devs.domain")]


            def test_with_them(devs_service, devs_policy):
                assert devs_service.start_task("t").policy == devs_policy
                for _ in range(2):
                    devs_service.record_gate("t", 1)
                assert devs_service.record_gate("t", 1).outcome == "escalate"
            """
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
