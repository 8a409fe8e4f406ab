"""What a ``devs hook`` call costs inside the real coding agents.

    .venv/bin/python -m tests.agents.install     # once: the pinned agents
    .venv/bin/python bench/agents_bench.py [--runs 2] [--agent claude-code ...]

Each agent (Claude Code, Codex, Gemini CLI, Copilot CLI; tests/agents) runs
the lane's scripted loop against its fake model on loopback (four wrong
fixes, each tested, then the right one; the policy patient, so the breaker
never stops it and every run makes the same calls), twice per round:

- with the breaker as ``devs hooks install AGENT`` writes it;
- with a do-nothing hook of the same kind on the same events (``cat``: it
  reads the event and answers nothing).

Every hook command is wrapped in the same timer (:data:`TIMER`), which
writes the wall time of the command it runs: the agent's own spawn of the
hook is in both rows alike, so the difference of the medians is what the
breaker adds to each step. The first call of each run starts the hook
server of a fresh store (the row ``first``: its median and maximum over the
runs). Prints one row per agent; ``bench/hooks_bench.py`` prints these rows
too (``--agents``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.agents import claude_code, codex, copilot, gemini  # noqa: E402
from tests.agents.install import binary  # noqa: E402
from tests.agents.lane import RIGHT, WRONG, Project, attempt, loop  # noqa: E402
from tests.agents.script import Handler, Script, serving  # noqa: E402

TIMER = """#!/bin/sh
s=$(date +%s%N)
"$@"
rc=$?
e=$(date +%s%N)
echo "$s $e" >> "$DEVS_BENCH_TIMES"
exit $rc
"""
"""Runs its arguments (stdin and stdout passed through) and appends the
start and end, in nanoseconds, to ``$DEVS_BENCH_TIMES``."""

PATIENT = {"DEVS_ESCALATION_THRESHOLD": "1000", "DEVS_HANDOFF_THRESHOLD": "1000"}
PROMPT = "Make the tests pass."


@dataclass(frozen=True)
class Row:
    agent: str
    calls: int
    devs: list[float]
    nothing: list[float]
    first: list[float]


def wrap(settings: Path, timer: Path, *, nothing: bool) -> None:
    """Every hook command of ``settings`` run through ``timer`` (and, with
    ``nothing``, replaced by ``cat``: the do-nothing hook of the same kind)."""
    data = json.loads(settings.read_text())

    def visit(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: visit(v) for k, v in value.items()}
            for key in ("command", "bash"):
                if isinstance(out.get(key), str) and " hook " in out[key]:
                    inner = "cat >/dev/null" if nothing else out[key]
                    out[key] = f"{shlex.quote(str(timer))} sh -c {shlex.quote(inner)}"
            return out
        if isinstance(value, list):
            return [visit(v) for v in value]
        return value

    settings.write_text(json.dumps(visit(data), indent=2))


def settings_of(project: Project) -> Path:
    return {
        "claude-code": project.repo / ".claude/settings.json",
        "codex": project.repo / ".codex/hooks.json",
        "gemini": project.repo / ".gemini/settings.json",
        "copilot": project.repo / ".github/hooks/devs-recovery.json",
    }[project.agent]


def run_once(agent: str, root: Path, *, nothing: bool) -> list[float]:
    """One scripted run of ``agent``: the wall time of each hook call."""
    project = Project(root, agent)
    project.install()
    timer = root / "timer.sh"
    timer.write_text(TIMER)
    timer.chmod(0o755)
    wrap(settings_of(project), timer, nothing=nothing)
    times = root / "times.txt"
    extra = {**PATIENT, "DEVS_BENCH_TIMES": str(times)}
    script = Script([*loop(*WRONG[:4]), *attempt(RIGHT)])
    handler: type[Handler] = {
        "claude-code": claude_code.ClaudeHandler,
        "codex": codex.CodexHandler,
        "gemini": gemini.GeminiHandler,
        "copilot": copilot.CopilotHandler,
    }[agent]
    with serving(handler, script) as fake:
        done = RUNNERS[agent](project, fake.url, extra)
    if done.returncode != 0 or script.furthest() < 9:
        msg = f"{agent} did not run the loop: {done.stderr[-400:]}"
        raise SystemExit(msg)
    spans = [line.split() for line in times.read_text().splitlines()]
    return [(int(e) - int(s)) / 1e9 for s, e in spans]


def _claude(
    project: Project, url: str, extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    env = claude_code.write_config(project.home, project.repo, url, extra_env=extra)
    return claude_code.run_claude(project.repo, PROMPT, env)


def _codex(
    project: Project, url: str, extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    codex.write_config(project.home, url, trusted=[project.repo])
    codex.trust_hooks(project.home, project.repo)
    return codex.run_codex(project.repo, PROMPT, project.home, env=extra)


def _gemini(
    project: Project, url: str, extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    env = gemini.configure(project.home, project.repo, url)
    return gemini.run(project.repo, PROMPT, {**env, **extra})


def _copilot(
    project: Project, url: str, extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return copilot.run_copilot(project.repo, PROMPT, project.home, url, env=extra)


RUNNERS: dict[
    str, Callable[[Project, str, dict[str, str]], subprocess.CompletedProcess[str]]
] = {"claude-code": _claude, "codex": _codex, "gemini": _gemini, "copilot": _copilot}


def measure(agent: str, runs: int) -> Row:
    devs: list[float] = []
    nothing: list[float] = []
    first: list[float] = []
    for _ in range(runs):
        for empty in (False, True):
            with tempfile.TemporaryDirectory(prefix="devs-agents-bench-") as folder:
                spans = run_once(agent, Path(folder), nothing=empty)
            if empty:
                nothing += spans
            else:
                first.append(spans[0])
                devs += spans[1:]
    return Row(agent, len(devs) + len(first), devs, nothing, first)


def ms(value: float) -> str:
    return f"{value * 1000:.0f} ms"


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 99 // 100) - 1)]


def lines(rows: list[Row]) -> list[str]:
    out = [
        "| agent (inside the real binary) | calls | devs hook, median / p99 "
        "| do-nothing hook, median / p99 | added, median | first call of a "
        "store, median / max |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        added = statistics.median(row.devs) - statistics.median(row.nothing)
        out.append(
            f"| {row.agent} | {row.calls} | {ms(statistics.median(row.devs))} / "
            f"{ms(p99(row.devs))} | {ms(statistics.median(row.nothing))} / "
            f"{ms(p99(row.nothing))} | {ms(added)} | "
            f"{ms(statistics.median(row.first))} / {ms(max(row.first))} |"
        )
    return out


def main_rows(runs: int, agents: list[str] | None = None) -> list[str]:
    """The table's lines for ``agents`` (default: every installed one)."""
    wanted = agents or [a for a in RUNNERS if binary(a) is not None]
    if not wanted:
        return ["no coding agent installed: python -m tests.agents.install"]
    for name in ("DEVS_URL", "DEVS_TASK_ID", "DEVS_DATABASE_URL", "DEVS_DB"):
        os.environ.pop(name, None)
    return lines([measure(agent, runs) for agent in wanted])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--agent",
        action="append",
        choices=list(RUNNERS),
        help="one agent (repeat for more; default: every installed one)",
    )
    args = parser.parse_args()
    print("\n".join(main_rows(args.runs, args.agent)))


if __name__ == "__main__":
    main()
