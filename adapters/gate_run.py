"""One gate run for every surface that runs or reports a gate command.

``devs gate run``, MCP's ``run_gate`` and the agents' hooks all meet a gate
command: :func:`command_line` says it once, so a secret in it is hidden alike
and one command reads the same in every history. :class:`GateCall` is a gate
the referee runs itself: check, run in the sandbox, record
(:func:`run_and_record` for the CLI; MCP runs the command in a thread of its
own). The hooks run nothing: they record what the agent ran.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devs.adapters.sandbox import (
    DEFAULT_OUTPUT_CAP,
    GateRun,
    GateSettings,
    Isolation,
    run_gate,
    store_file,
)
from devs.domain import GateDecision, RecoveryService
from devs.domain.redaction import redact
from devs.domain.values import NAME_MAX, GateName, Strategy, validated

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def command_line(command: Sequence[str] | str) -> str:
    """The command as every surface records and shows it: an argv quoted as
    a shell reads it (``shlex.join``), a shell line as it is; control
    characters (a ``python -c`` script's newlines) and runs of white space
    one space; redacted whole, then cut to ``NAME_MAX`` characters (the
    longest gate name) with ``…``; ``gate`` if nothing is left."""
    line = command if isinstance(command, str) else shlex.join(command)
    # Redacted whole before anything is cut: a secret across a cut would be
    # half kept, too short to be recognised (redact is linear; an argv is
    # bounded: 256 arguments of 4,096 characters).
    flat = " ".join(redact(_CONTROL.sub(" ", line)).split())
    if len(flat) > NAME_MAX:
        flat = flat[: NAME_MAX - 1].rstrip() + "…"
    return flat or "gate"


@dataclass(frozen=True)
class GateCall:
    """One gate the referee runs: which task, which command, how bounded.

    ``gate`` names it in the record (``None``: :func:`command_line`);
    ``settings`` are the environment's (:class:`GateSettings`) unless given;
    the rest are :func:`devs.adapters.sandbox.run_gate`'s arguments.
    """

    task_id: str
    command: tuple[str, ...]
    gate: str | None = None
    strategy: str | None = None
    cwd: str | Path | None = None
    timeout: float = 600.0
    cpu_seconds: int | None = None
    memory_mb: int | None = None
    pass_env: tuple[str, ...] = ()
    output_cap: int = DEFAULT_OUTPUT_CAP
    isolation: Isolation = "auto"
    network: bool = False
    allow_paths: tuple[str, ...] = ()
    in_store_folder: bool = False
    within: Path | None = None
    settings: GateSettings = field(default_factory=GateSettings)

    @property
    def shown(self) -> str:
        """The command as it is recorded and printed (:func:`command_line`)."""
        return command_line(self.command)

    @property
    def name(self) -> str:
        """The gate's name in the record."""
        return self.gate if self.gate is not None else self.shown

    def check(self, service: RecoveryService) -> None:
        """Refuse an unknown task, one that takes no gate now, or a name or
        strategy the record would refuse, before anything runs."""
        service.require_gate_allowed(self.task_id)
        _recordable(self.name, self.strategy)

    def run(self, store: str | None) -> GateRun:
        """Run the command sandboxed, the referee's ``store`` out of its reach
        (:class:`~devs.adapters.sandbox.IsolationUnavailable`: nothing ran)."""
        return run_gate(
            self.command,
            cwd=self.cwd,
            timeout=self.timeout,
            cpu_seconds=self.cpu_seconds,
            memory_mb=self.memory_mb,
            pass_env=self.pass_env,
            output_cap=self.output_cap,
            isolation=self.isolation,
            network=self.network,
            allow_paths=self.allow_paths,
            store=store,
            in_store_folder=self.in_store_folder,
            settings=self.settings,
            within=self.within,
        )

    def record(self, service: RecoveryService, result: GateRun) -> GateDecision:
        """Record how the command ended: its exit code, error line and
        output (redacted by the sandbox already)."""
        return service.record_gate(
            self.task_id,
            result.exit_code,
            gate=self.name,
            strategy=self.strategy,
            error=result.error_line,
            output=result.output,
        )


def run_and_record(
    service: RecoveryService, call: GateCall
) -> tuple[GateRun, GateDecision]:
    """Check, run and record ``call`` on ``service``: what ran, and the
    decision."""
    call.check(service)
    result = call.run(store_file(service))
    return result, call.record(service, result)


@validated
def _recordable(gate: GateName, strategy: Strategy | None) -> None:
    """``InvalidInput`` (naming ``gate`` or ``strategy``) for a value
    ``record_gate`` would refuse after the command ran."""
