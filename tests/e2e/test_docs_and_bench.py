"""The documentation and the benchmark stay true to the code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from devs.domain.policy import Policy, env_var

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_documents_every_setting() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name, field in Policy.model_fields.items():
        row = next(line for line in text.splitlines() if f"`{env_var(name)}`" in line)
        assert f"`{field.default}`" in row
    assert "`DEVS_DB`" in text


def test_ci_runs_the_readme_test_command_exactly() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(.+?)\n```", readme)
    test_command = next(c for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci


def test_benchmark_runs_and_prints_every_figure(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench.py"),
            "--decisions",
            "40",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 1 + 3 + 2  # header; decisions; three loads; two checks
    assert "record_gate decisions/s" in result.stdout
    assert "10,000 events" in result.stdout
    assert "1,000 lessons of 2,000 chars" in result.stdout


def _command_paths(group: object, prefix: str = "") -> list[str]:
    import click

    assert isinstance(group, click.Group)
    paths = []
    for name, command in group.commands.items():
        path = f"{prefix} {name}".strip()
        if isinstance(command, click.Group):
            paths.extend(_command_paths(command, path))
        else:
            paths.append(path)
    return paths


def test_cli_doc_covers_every_command_and_exit_code() -> None:
    from devs.adapters.cli import ExitCode, cli

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for path in _command_paths(cli):
        assert f"`devs {path}" in text, f"docs/cli.md does not document devs {path}"
    for code in ExitCode:
        assert f"| {code.value} | {code.name} |" in text
