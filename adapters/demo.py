"""``devs demo``: a scripted agent loop driven through the real ``devs`` commands.

Each step is a command line as a shell-driven agent loop would run it; the demo
prints it, runs it in-process through the same click commands, and prints what
it printed and its exit code. Gates are real sandboxed processes.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from enum import IntEnum
from pathlib import Path

import click

PY = sys.executable
GATE = ["gate", "run"]


def _python(code: str) -> list[str]:
    return [PY, "-c", code]


FAIL_TESTS = _python(
    "print('FAILED test_parse.py::test_nested - AssertionError'); raise SystemExit(1)"
)
PASS_TESTS = _python("print('3 passed')")
HANG = _python("import time; time.sleep(30)")
# The secret is assembled at run time, so only the output carries it whole.
LEAK_AND_FAIL = _python(
    "key = 'sk-live-' + 'abcdefghij' + 'klmnop1234';"
    " print('401 Unauthorized: Authorization: Bearer', key); raise SystemExit(2)"
)

STEPS: list[tuple[str, list[str]]] = [
    (
        "A run of three tasks: design, then build, then ship.",
        ["run", "start", "demo", "--dag", "{dag}"],
    ),
    ("", ["task", "start", "design", "--run", "demo", "--agent", "planner"]),
    ("", ["attempt", "design", "sketch the grammar"]),
    (
        "The gate is a real process; exit 0 advances the run.",
        ["gate", "run", "design", "--", *PASS_TESTS],
    ),
    (
        "",
        [
            "task",
            "start",
            "build",
            "--run",
            "demo",
            "--agent",
            "coder",
            "--commit",
            "4f2a9c1",
        ],
    ),
    ("", ["attempt", "build", "patch the tokenizer with a regex"]),
    (
        "A failing gate: exit 1 means retry.",
        ["gate", "run", "build", "--", *FAIL_TESTS],
    ),
    (
        "Root-cause analysis names the failed strategy.",
        [
            "lesson",
            "build",
            "patch the tokenizer with a regex",
            "regexes cannot match nested brackets",
        ],
    ),
    (
        "The agent tries nearly the same thing: blocked before any LLM call.",
        ["attempt", "build", "patch the tokenizer with regexes"],
    ),
    ("", ["resume", "build", "--reason", "try a real parser", "--actor", "operator"]),
    ("The agent's entropy spikes.", ["entropy", "build", "0.86"]),
    ("", ["resume", "build", "--reason", "context reset", "--actor", "operator"]),
    ("", ["attempt", "build", "parser combinator library"]),
    (
        "Third consecutive failure: a human is asked.",
        ["gate", "run", "build", "--", *FAIL_TESTS],
    ),
    ("", ["run", "show", "demo"]),
    ("", ["resume", "build", "--reason", "one more try", "--actor", "operator"]),
    ("", ["attempt", "build", "hand-written lexer"]),
    (
        "A gate that hangs is killed at its timeout.",
        ["gate", "run", "build", "--timeout", "0.5", "--", *HANG],
    ),
    ("", ["resume", "build", "--reason", "last try", "--actor", "operator"]),
    ("", ["attempt", "build", "vendor an old parser"]),
    (
        "Fifth failure; the output leaks a secret, which is redacted.",
        ["gate", "run", "build", "--", *LEAK_AND_FAIL],
    ),
    ("", ["handoffs"]),
    ("", ["claim", "build", "--actor", "senior-dev"]),
    (
        "",
        [
            "resolve",
            "build",
            "--resolution",
            "return",
            "--reason",
            "pinned the grammar",
            "--actor",
            "senior-dev",
        ],
    ),
    ("", ["attempt", "build", "recursive descent parser"]),
    ("", ["gate", "run", "build", "--", *PASS_TESTS]),
    ("", ["task", "start", "ship", "--run", "demo", "--agent", "releaser"]),
    ("", ["gate", "run", "ship", "--", *PASS_TESTS]),
    ("", ["status"]),
    ("", ["history", "build", "--at", "4"]),
]


def _shown(args: list[str]) -> str:
    shown = [("python3" if a == PY else a) for a in args]
    return "$ devs " + " ".join(shlex.quote(a) for a in shown)


def run_demo(db: Path, cli: click.Group, exit_codes: type[IntEnum]) -> None:
    """Run every step through ``cli`` (the ``devs`` group) on a fresh file."""
    db.parent.mkdir(parents=True, exist_ok=True)
    dag_file = db.parent / "demo-dag.json"
    dag_file.write_text('{"design": [], "build": ["design"], "ship": ["build"]}\n')
    # A gate never runs in the store's folder (docs/security.md): the demo's
    # run in a folder of their own, wherever the file is.
    gates = tempfile.mkdtemp(prefix="devs-demo-gates-")
    click.echo(f"devs demo on {db} (gates run in {gates})\n")
    for note, args in STEPS:
        args = [str(dag_file) if a == "{dag}" else a for a in args]
        if note:
            click.echo(f"# {note}")
        click.echo(_shown(args))
        ran = ["gate", "run", "--cwd", gates, *args[2:]] if args[:2] == GATE else args
        try:
            cli.main(
                args=["--db", str(db), *ran], prog_name="devs", standalone_mode=False
            )
            code = 0
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        click.echo(f"[exit {code}: {exit_codes(code).name}]\n")
