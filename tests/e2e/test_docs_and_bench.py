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
    # The plain run leaves the slow tests out (pyproject's addopts); CI runs
    # them too, after it.
    assert ".venv/bin/python -m pytest -m slow" in ci[ci.index(test_command) :]


def test_benchmark_runs_and_prints_every_figure(tmp_path: Path) -> None:
    import importlib
    import os

    # The bench runs under this interpreter: it measures LangGraph when this
    # process can import it (the bench extra), and says it cannot otherwise.
    langgraph_importable = not os.environ.get("DEVS_BENCH_NO_LANGGRAPH")
    try:
        for module in ("langgraph.graph", "langgraph.checkpoint.sqlite"):
            importlib.import_module(module)
    except ImportError:
        langgraph_importable = False
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench.py"),
            *("--decisions", "40", "--steps", "20", "--lessons", "5", "10"),
            *("--run-tasks", "80", "--run-gates", "20", "--events", "20", "120"),
            *("--redaction-chars", "20000", "2000"),
            *("--dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    labels = [
        "| measure | devs-recovery | baseline | ratio | target |",
        "| record_gate decisions/s (40) | ",
        "| … the same decisions folding no read model (a diagnostic) | ",
        "| CPU per record_gate decision in memory (40, best of 5) | ",
        "| decisions vs a one-node LangGraph step | ",
        "| is_strategy_blacklisted, 5 lessons of 2,000 chars | ",
        "| is_strategy_blacklisted, 10 lessons of 2,000 chars | ",
        "| catch-up from 0 (rebuild_projections on a new service), run of 80 tasks | ",
        "| start_task + record_gate(0) on a ready node, run of 80 tasks "
        "(median of 20) | ",
        "| … the same, folding no read model (a diagnostic; median of 20) | ",
        "| start_run, a 5,000-node chain | ",
        "| start_run, a 5,000-node fan-in | ",
        "| start_run, the largest DAG allowed (10,000 nodes, 100,000 edges, "
        "200-character ids) | ",
        "| largest run event stored (bytes) | ",
        "| largest run snapshot stored (bytes), run of 80 tasks | ",
        "| run_state(), run of 80 tasks | ",
        "| task() of a task of 20 events, cold (new service) | ",
        "| task() of a task of 120 events, cold (new service) | ",
        "| redact, ordinary test-runner output (20,000 chars) | ",
        "| redact, slowest of the issue's 12 hostile texts (2,000 chars) | ",
        "| redact, slowest of 12 more hostile texts (2,000 chars) | ",
        "| record_gate with any of those as output, longest | ",
        "| this machine: a pure-Python loop of 10,000,000 additions, CPU "
        "(least of 3) | ",
    ]
    assert len(rows) == len(labels)
    for row, label in zip(rows, labels, strict=True):
        assert row.startswith(label), row
        assert row.count(" | ") == 4, row
    # The diagnostics: decisions folding no read model beside the floor, the
    # gate pass without them, and the machine's reference loop.
    assert re.search(
        r"^\| … the same decisions .* \| [\d,]+ \| "
        r"raw sqlite3 [\d,]+ rows/s \| \d+\.\d\d x \| - \|$",
        rows[2],
    )
    assert re.search(
        r"^\| … the same, folding .* \| \d+\.\d\d ms \| - \| - \| - \|$", rows[9]
    )
    assert re.search(r"^\| this machine: .* \| [\d,]+ ms \| - \| - \| - \|$", rows[-1])
    langgraph = rows[4]
    if langgraph_importable:
        assert " steps/s (" in langgraph
        assert re.search(r" \| \d+\.\d\d x \| >= 10 x \|$", langgraph)
    else:
        assert langgraph.endswith(
            "| langgraph not installed (pip install '.[bench]') | - | >= 10 x |"
        )
    assert lines[0].startswith("files in ")
    assert "journal_mode=" in lines[0]
    verdicts = [line for line in lines if line.startswith("target ")]
    # Every row has a target but the smaller load and the other hostile texts.
    assert len(verdicts) == 17
    judged = [v for v in verdicts if v.startswith(("target met: ", "target MISSED: "))]
    assert len(judged) == (17 if langgraph_importable else 16)  # the rest: not measured


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


def _layer_diagram() -> tuple[list[str], set[tuple[str, str]]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"```mermaid\nflowchart TB\n(.+?)```", text, re.S)
    assert block is not None, "docs/architecture.md has no layer flowchart"
    nodes = re.findall(r'^\s*(\w+)\["(devs\.\w+)', block.group(1), re.M)
    names = dict(nodes)
    arrows = {
        (names[a], names[b])
        for a, b in re.findall(r"^\s*(\w+) --> (\w+)\s*$", block.group(1), re.M)
    }
    return [package for _, package in nodes], arrows


def _real_layer_imports() -> set[tuple[str, str]]:
    import ast
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    # Each top-level folder and its import name (pyproject's package-dir).
    folders = {
        folder: package
        for package, folder in config["tool"]["setuptools"]["package-dir"].items()
        if "/" not in folder
    }
    assert sorted(folders.values()) == sorted(
        config["tool"]["importlinter"]["root_packages"]
    )
    found: set[tuple[str, str]] = set()
    for folder, package in folders.items():
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                for name in names:
                    target = ".".join(name.split(".")[:2])
                    if target in folders.values() and target != package:
                        found.add((package, target))
    return found


def test_architecture_diagram_matches_the_import_contract_and_the_code() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = config["tool"]["importlinter"]["contracts"]
    assert contract["type"] == "layers"
    layers, arrows = _layer_diagram()
    assert layers == contract["layers"], "diagram layers differ from the contract"
    rank = {package: index for index, package in enumerate(layers)}
    for source, target in arrows:
        assert rank[source] < rank[target], f"{source} --> {target} points outward"
    assert _real_layer_imports() == arrows


def test_langgraph_benchmark_prints_both_steps_and_its_verdict(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "langgraph_bench.py"),
            *("--steps", "3", "--rounds", "1", "--dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = result.stdout.splitlines()
    rows = {line.split(" | ")[0] for line in lines if line.startswith("| ")}
    assert {"| bare", "| guarded", "| added by devs-recovery"} <= rows
    verdicts = [line for line in lines if line.startswith("target ")]
    assert len(verdicts) == 1
    assert re.search(r"adds -?\d+\.\d% \(-?\d+\.\d\d ms\)", verdicts[0])
    assert not list(tmp_path.iterdir()), "its files go with it"


def test_audit_benchmark_prints_every_figure_and_its_verdicts(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "audit_bench.py"),
            *("--events", "600", "--decisions", "60", "--dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = result.stdout.splitlines()
    rows = [line.split(" | ")[0] for line in lines if line.startswith("| ")]
    assert [row.split(",")[0] for row in rows[1:]] == [
        "| what_if",
        "| replay_check",
        "| verify (read models and hash chains)",
        "| export",
        "| stuck.assess",
        "| stuck.assess",
        "| record_gate failures/s",
        "| record_gate failures/s",
    ]
    verdicts = [line for line in lines if line.startswith(("met: ", "MISSED: "))]
    assert len(verdicts) == 2
    assert re.search(r"what_if, [\d,]+ events, [\d,]+ tasks \d+\.\d\d s", verdicts[0])
    assert not list(tmp_path.iterdir()), "its files go with it"


def test_the_testing_kit_s_starter_is_the_one_its_benchmark_times() -> None:
    """docs/testing.md's starter is the code bench/kit_search_bench.py runs
    (and the figure next to it is that bench's)."""
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    starter = re.findall(r"```python\n(.+?)```", text, flags=re.DOTALL)[0]
    from tests.helpers import load_module

    bench = load_module(ROOT / "bench" / "kit_search_bench.py")
    assert starter.strip() == bench.STARTER.strip()
    assert "bench/kit_search_bench.py" in text


def test_hooks_benchmark_prints_every_figure_and_its_verdicts(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "hooks_bench.py"),
            *("--calls", "3", "--dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = result.stdout.splitlines()
    figures = [line for line in lines if re.search(r"\d+\.\dms +\d+\.\dms$", line)]
    assert len(figures) == 8, lines
    verdicts = [line for line in lines if line.startswith("target ")]
    assert len(verdicts) == 3, lines
    assert any(line.startswith("the hook server: a gate failure in ") for line in lines)
