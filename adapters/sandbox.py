"""The sandboxed gate runner: run a real command and judge it by its exit code.

The command runs in its own process group (a new session) and working directory,
with a wall-clock timeout after which the whole group is killed; optionally with
CPU-seconds and memory limits (``setrlimit`` in the child). Its environment is
scrubbed of secret-looking variables unless they are passed through by name. Its
stdout and stderr are merged and captured up to a size cap (the end is kept),
then redacted and hashed (SHA-256) before anything else sees them.

A process that had to be killed (timeout, or a signal such as the CPU limit's
``SIGXCPU``) has no exit code: the gate sees ``None`` -> ``PROCESS_KILLED``.
"""

from __future__ import annotations

import io
import os
import re
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from devs.domain.errors import InvalidInput
from devs.domain.redaction import error_hash, redact

DEFAULT_OUTPUT_CAP = 1_048_576  # bytes of output kept (the last ones)
KILL_GRACE_SECONDS = 2.0

_SECRET_NAME = re.compile(
    r"(?i)(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY"
    r"|CREDENTIAL|AUTH|SESSION|COOKIE|SIGNATURE|^AWS_|^GH_|^GITHUB_|^OPENAI|^ANTHROPIC"
    r"|^DATABASE_URL$|_DSN$)"
)
_SECRET_VALUE = re.compile(r"://[^\s/:@]*:[^\s/@]+@")


def scrub_environment(
    environ: Mapping[str, str], pass_through: Iterable[str] = ()
) -> tuple[dict[str, str], list[str]]:
    """The environment without secret-looking variables, and the names removed.

    A variable is secret-looking when its name says so (``*TOKEN*``,
    ``*SECRET*``, ``*PASSWORD*``, ``*API_KEY*``, ``AWS_*``, ...) or its value
    holds a URL with a password. Names in ``pass_through`` are always kept.
    """
    keep = set(pass_through)
    clean: dict[str, str] = {}
    removed: list[str] = []
    for name, value in environ.items():
        if name not in keep and (
            _SECRET_NAME.search(name) or _SECRET_VALUE.search(value)
        ):
            removed.append(name)
        else:
            clean[name] = value
    return clean, sorted(removed)


@dataclass(frozen=True)
class GateRun:
    """What a gate command did."""

    command: tuple[str, ...]
    exit_code: int | None
    output: str
    output_hash: str
    duration_seconds: float
    timed_out: bool = False
    signal_name: str | None = None
    truncated_bytes: int = 0
    scrubbed_env: tuple[str, ...] = field(default_factory=tuple)

    @property
    def error(self) -> str:
        """A one-line account of how the command ended."""
        if self.timed_out:
            return f"killed after the {self.duration_seconds:.1f}s timeout"
        if self.signal_name is not None:
            return f"killed by {self.signal_name}"
        return f"exited with code {self.exit_code}"


class _TailBuffer:
    """Keeps the last ``cap`` bytes written to it and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    def write(self, chunk: bytes) -> None:
        self.data += chunk
        excess = len(self.data) - self.cap
        if excess > 0:
            del self.data[:excess]
            self.dropped += excess


def _limits(cpu_seconds: int | None, memory_mb: int | None) -> None:
    """Runs in the child before exec."""
    if cpu_seconds is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    if memory_mb is not None:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _positive(name: str, value: float | None, maximum: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        msg = f"{name} must be a number"
        raise InvalidInput(msg)
    if not 0 < value <= maximum:
        msg = f"{name} {value} is out of range (0, {maximum:g}]"
        raise InvalidInput(msg)


def run_gate(
    command: Sequence[str],
    *,
    cwd: str | Path | None = None,
    timeout: float = 600.0,
    cpu_seconds: int | None = None,
    memory_mb: int | None = None,
    pass_env: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    output_cap: int = DEFAULT_OUTPUT_CAP,
) -> GateRun:
    """Run ``command`` sandboxed and report how it ended."""
    if not command:
        msg = "command must not be empty"
        raise InvalidInput(msg)
    _positive("timeout", timeout, 86_400)
    _positive("cpu_seconds", cpu_seconds, 86_400)
    _positive("memory_mb", memory_mb, 1_048_576)
    _positive("output_cap", output_cap, 1 << 30)
    workdir = Path(cwd) if cwd is not None else Path.cwd()
    if not workdir.is_dir():
        msg = f"working directory {str(workdir)!r} does not exist"
        raise InvalidInput(msg)
    env, scrubbed = scrub_environment(
        os.environ if environ is None else environ, pass_env
    )

    buffer = _TailBuffer(int(output_cap))
    start = time.monotonic()
    try:
        process = subprocess.Popen(
            list(command),
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(
                (lambda: _limits(cpu_seconds, memory_mb))
                if cpu_seconds is not None or memory_mb is not None
                else None
            ),
        )
    except FileNotFoundError:
        msg = f"command not found: {command[0]!r}"
        raise InvalidInput(msg) from None
    except PermissionError:
        msg = f"command is not executable: {command[0]!r}"
        raise InvalidInput(msg) from None

    stdout = cast(io.BufferedReader, process.stdout)

    def pump() -> None:
        for chunk in iter(lambda: stdout.read1(65_536), b""):
            buffer.write(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(process, grace=KILL_GRACE_SECONDS)
    finally:
        # Members left behind by the leader die with the gate (and free the pipe).
        _kill_group(process, grace=0.0)
        reader.join(timeout=KILL_GRACE_SECONDS)
        if not reader.is_alive():
            # A process that left the group may still hold the pipe; closing it
            # under the reader would block until that process exits.
            stdout.close()
    duration = time.monotonic() - start

    returncode = process.returncode
    signal_name: str | None = None
    exit_code: int | None = returncode
    if timed_out:
        exit_code = None
    elif returncode is not None and returncode < 0:
        signal_name = signal.Signals(-returncode).name
        exit_code = None

    text = buffer.data.decode("utf-8", errors="replace")
    if buffer.dropped:
        text = f"[{buffer.dropped:,} earlier bytes of output dropped]\n" + text
    clean = redact(text)
    return GateRun(
        command=tuple(command),
        exit_code=exit_code,
        output=clean,
        output_hash=error_hash(clean),
        duration_seconds=duration,
        timed_out=timed_out,
        signal_name=signal_name,
        truncated_bytes=buffer.dropped,
        scrubbed_env=tuple(scrubbed),
    )


def _kill_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``grace``.

    With ``start_new_session`` the leader's pid is the group id; the group
    outlives its leader while any member lives.
    """
    if grace > 0:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
