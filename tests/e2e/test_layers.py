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
import devs.testing

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(
    module.name
    for package in (devs.domain, devs.projections, devs.adapters, devs.testing)
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
)


def test_every_layer_has_modules() -> None:
    for layer in (
        "devs.domain.",
        "devs.projections.",
        "devs.adapters.",
        "devs.testing.",
    ):
        assert any(name.startswith(layer) for name in MODULES), layer


@pytest.mark.slow  # a fresh interpreter per module: about 100 CPU-seconds
@pytest.mark.parametrize("module", MODULES)
def test_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    """The import order no other module set up (a cycle, a name used before
    its module is loaded, a library's submodule used and never imported)
    fails here. In the slow lane: each module costs an import of the domain
    (about 0.3 CPU-seconds), and one interpreter that forgot every ``devs``
    module before each import, as the plain run did, cost 40 to 57 of the
    plain run's CPU-seconds for a weaker check."""
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


def test_every_folder_says_what_it_holds() -> None:
    """pyproject maps each folder to its import name; a folder inside another
    holds a subpackage of the outer folder's package (``adapters/cli`` is
    ``devs.adapters.cli``), never another layer."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package_dir: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    packages = {folder: package for package, folder in package_dir.items()}
    for package, folder in package_dir.items():
        *outer, name = folder.split("/")
        assert package.rsplit(".", 1)[-1] == name, (folder, package)
        if outer:
            assert package.rsplit(".", 1)[0] == packages["/".join(outer)], (
                f"{folder}/ holds {package}, not a part of {packages['/'.join(outer)]}"
            )
        else:
            assert package == f"devs.{name}", (folder, package)
    assert sorted(config["tool"]["setuptools"]["packages"]) == sorted(package_dir)
