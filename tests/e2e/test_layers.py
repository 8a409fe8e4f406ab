"""The import layers hold, and every module imports on its own."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import devs.adapters
import devs.domain
import devs.projections

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(
    module.name
    for package in (devs.domain, devs.projections, devs.adapters)
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
)


def test_every_layer_has_modules() -> None:
    for layer in ("devs.domain.", "devs.projections.", "devs.adapters."):
        assert any(name.startswith(layer) for name in MODULES), layer


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_domain_imports_no_outer_layer() -> None:
    """Also checked by import-linter in CI (pyproject's layers contract)."""
    code = (
        "import sys, devs.domain, devs.domain.application; "
        "print(sorted(m for m in sys.modules "
        "if m.startswith(('devs.projections', 'devs.adapters'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
