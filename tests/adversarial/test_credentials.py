"""Credentials in common forms (issue "The front door and the agent as
attacker", point 10), from a gate's output to what people would be sent.

A real ``devs gate run`` (under bubblewrap where it can sandbox) prints every
form of ``CREDENTIAL_FORMS`` (``curl -u admin:…``, ``mysql -p…``, ``docker
login -p …``, ``sshpass -p …``, ``-password …``, signed URLs) and every
look-alike of ``NOT_CREDENTIALS`` (``ssh -p 22``, ``pytest -p
no:cacheprovider``, ``PWD=/…``). Afterwards no secret is in anything the CLI
printed, the history, the read models, the raw database files, or the outbox
messages and the webhook, Slack and e-mail bodies made of them; the
look-alikes and what names each secret read back as they were.

Then every text path is linear on hostile repetitions of the new rules'
pieces: the cost of 200,000 characters over that of 20,000, measured in the
same run, stays near 10 (a quadratic path gives 100), never a time limit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devs.adapters.config import Settings, open_service
from devs.adapters.notify.email import email_of
from devs.adapters.notify.slack import slack_body
from devs.adapters.notify.webhook import body_of
from devs.adapters.sandbox import sandbox_unavailable
from devs.domain import Policy
from devs.domain.outbox import OutboxMessage
from devs.domain.redaction import REDACTED, error_hash, redact, secret_kind
from tests.corpus import (
    CREDENTIAL_FORMS,
    HOSTILE_COMMANDS,
    HOSTILE_COMMANDS_HARMLESS,
    NOT_CREDENTIALS,
    hostile,
)

DEVS = str(Path(sys.executable).with_name("devs"))
OK, RETRY, ESCALATED, HANDED_OFF = 0, 1, 3, 5  # docs/cli.md, "Exit codes"
# The gate event keeps the last 2,000 characters of an output (docs/cli.md):
# each gate prints at most this many, so that all of it is recorded.
CHUNK = 1_700
# Shown before each chunk: the working directory, and the one before it.
PWD_LINES = 'echo "PWD=$PWD"; cd / && echo "PWD=$PWD OLDPWD=$OLDPWD"; cd "$OLDPWD"'
# The last line of the last gate, which the hand-off's message quotes: the
# forms the issue names, one after the other.
LAST_LINE = [
    next(form for form in CREDENTIAL_FORMS if form[0].startswith(start))
    for start in (
        "curl -u ",
        "mysql ",
        "docker login ",
        "sshpass -p ",
        "app -password ",
        "GET https://acct.blob.core.windows.net/",
    )
]


def chunks(lines: list[str]) -> list[list[str]]:
    """``lines`` in groups of at most CHUNK characters, in order."""
    groups: list[list[str]] = [[]]
    for line in lines:
        if sum(len(kept) + 1 for kept in groups[-1]) + len(line) + 1 > CHUNK:
            groups.append([])
        groups[-1].append(line)
    return groups


class Devs:
    """The installed ``devs``, one process per call, on one store; its gates
    run in ``work``, a folder apart from the store's."""

    def __init__(self, db: Path, work: Path, env: dict[str, str]) -> None:
        self.db, self.work, self.env = db, work, env
        self.printed: list[str] = []

    def __call__(self, *args: str, code: int = OK) -> str:
        result = subprocess.run(
            [DEVS, "--db", str(self.db), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.work,
            env=self.env,
            check=False,
        )
        assert result.returncode == code, (args, result.stdout, result.stderr)
        self.printed.append(result.stdout + result.stderr)
        return result.stdout

    def gate(self, script: str, *, code: int, as_json: bool = False) -> str:
        options = ["--json"] if as_json else []
        work = str(self.work)
        return self(
            "gate",
            "run",
            "T",
            "--cwd",
            work,
            *options,
            "--",
            "sh",
            "-c",
            script,
            code=code,
        )


def rendered(message: OutboxMessage) -> list[str]:
    """What would be sent of ``message``: the webhook body, the Slack body,
    the e-mail."""
    mail = email_of(
        message, "https://devs.example/t/T", "devs@example.com", ["a@example.com"]
    )
    return [
        body_of(message).decode(),
        json.dumps(slack_body(message, None)),
        mail.as_string(),
    ]


def test_no_credential_form_leaves_a_gate_run(tmp_path: Path) -> None:
    store, work = tmp_path / "store", tmp_path / "work"
    store.mkdir()
    work.mkdir()
    groups = chunks([*NOT_CREDENTIALS, *(text for text, _, _ in CREDENTIAL_FORMS)])
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("DEVS_")
    }
    env["DEVS_ESCALATION_THRESHOLD"] = str(len(groups))  # the last chunk escalates
    env["DEVS_HANDOFF_THRESHOLD"] = str(len(groups) + 1)  # the gate after it hands off
    devs = Devs(store / "s.sqlite", work, env)

    devs("task", "start", "T", "--agent", "coder")
    for number, group in enumerate(groups, 1):
        (work / f"out{number}.txt").write_text("\n".join(group) + "\n")
        script = f"{PWD_LINES}; cat out{number}.txt; exit 1"
        code = ESCALATED if number == len(groups) else RETRY
        if number == 1:  # sandboxed where bwrap can
            ran = json.loads(devs.gate(script, code=code, as_json=True))["run"]
            assert ran["isolation"] == ("none" if sandbox_unavailable() else "bwrap")
        else:  # the command as run is printed, PWD kept
            assert 'echo "PWD=$PWD"' in devs.gate(script, code=code)
    devs("resume", "T", "--actor", "ann", "--reason", "go on")
    last_line = " ; ".join(text for text, _, _ in LAST_LINE)
    (work / "last.txt").write_text(last_line + "\n")
    devs.gate("cat last.txt; exit 1", code=HANDED_OFF)

    history = json.loads(devs("history", "T", "--json"))
    for args in (
        ("task", "show", "T", "--json"),
        ("task", "show", "T"),
        ("history", "T"),
        ("gate", "status", "T", "--json"),
        ("handoffs", "--json"),
        ("status", "--json"),
        ("webhooks", "list", "--json"),
    ):
        devs(*args)
    service = open_service(Settings(db=str(devs.db), database_url=None))
    try:
        messages = service.outbox_messages(limit=1_000)
    finally:
        service.close()
    sent = [text for message in messages for text in rendered(message)]
    raw = b"".join(path.read_bytes() for path in sorted(store.iterdir()))

    # No secret anywhere.
    everything = "\n".join([*devs.printed, *sent])
    for text, secret, _ in CREDENTIAL_FORMS:
        assert secret not in everything, text
        assert secret.encode() not in raw, text
    assert REDACTED in everything

    # What is no secret, and what names each secret, as it was: every line of
    # every chunk is recorded with its gate.
    outputs = "\n".join(
        event["changes"]["failure"]["output_excerpt"]
        for event in history
        if event["event"] == "GateFailed"
    )
    recorded = outputs.splitlines()
    for text in NOT_CREDENTIALS:
        assert text in recorded, text
    for text, _, kept in CREDENTIAL_FORMS:
        assert kept in recorded, text
    assert f"PWD={work}" in recorded
    assert f"PWD=/ OLDPWD={work}" in recorded

    # The messages for people quote the last error, redacted and readable.
    opened = {message.type.value: message for message in messages}
    assert set(opened) >= {"session.opened", "handoff.opened"}
    escalated = opened["session.opened"].data["last_error"]
    assert escalated.endswith(CREDENTIAL_FORMS[-1][2])
    handed = opened["handoff.opened"].data["last_error"]
    # The one error line (at most 300 characters): the run's last line,
    # redacted before it was cut.
    assert len(handed) <= 300
    assert " ; ".join(kept for _, _, kept in LAST_LINE)[:250] in handed
    webhook, slack, mail = rendered(opened["handoff.opened"])
    assert json.loads(webhook)["data"]["last_error"] == handed
    assert "curl -u admin:[REDACTED] https://" in slack
    assert "curl -u admin:[REDACTED] https://" in mail


# ------------------------------------------------------------ linear time

# A linear path: about 10 (ten times the text, ten times the work); a
# quadratic one about 100. The bound leaves room for a shared machine.
RATIO_BOUND = 30
SMALL, LARGE = 20_000, 200_000


def cost(path: Callable[[str], object], text: str, repeat: int = 5) -> float:
    """The least time of ``repeat`` calls (the least is the least disturbed)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        path(text)
        best = min(best, time.perf_counter() - start)
    return best


def ratio(path: Callable[[str], object], unit: str, small: int, large: int) -> float:
    """How much longer ``path`` takes on ``unit`` repeated to ``large``
    characters than to ``small``, both measured now (the small text more
    often: a short call is the more easily disturbed)."""
    cheap = cost(path, hostile(unit, small), repeat=15)
    return cost(path, hostile(unit, large)) / max(cheap, 1e-6)


@pytest.mark.timing  # a ratio of two timings: in one process
def test_the_ratio_tells_a_quadratic_pattern_from_a_linear_one() -> None:
    """The check below can fail: a pattern that scans the rest of the text
    from every "mysql" (an unbounded, backtracking run of words before -p)
    is far above the bound, measured the same way on smaller texts."""
    naive = re.compile(r"mysql(?:[ \t]+\S+)*?[ \t]+-p(\S+)")

    def scan(text: str) -> object:
        return naive.findall(text)

    assert ratio(scan, "mysql ", 1_000, 10_000) > 2 * RATIO_BOUND  # about 100
    assert ratio(redact, "mysql ", 1_000, 10_000) < RATIO_BOUND


@pytest.mark.timing  # a ratio of two timings: in one process
@pytest.mark.parametrize("unit", HOSTILE_COMMANDS + HOSTILE_COMMANDS_HARMLESS)
def test_every_text_path_is_linear_on_the_new_forms(unit: str) -> None:
    """redact, secret_kind (an id is refused by it), and redaction then the
    error hash, as a gate's output is recorded."""
    paths: list[Callable[[str], object]] = [
        redact,
        secret_kind,
        lambda text: error_hash(redact(text)),
    ]
    measured = [ratio(path, unit, SMALL, LARGE) for path in paths]
    assert max(measured) < RATIO_BOUND, (unit, measured)


@pytest.mark.timing  # a ratio of two timings: in one process
def test_recording_a_hostile_output_is_linear(tmp_path: Path) -> None:
    """Through the service, as ``devs gate run`` records an output: the
    gate's output and error, redacted, hashed, cut and stored."""
    service = open_service(Settings(db=str(tmp_path / "s.sqlite"), database_url=None))
    service.policy = Policy(escalation_threshold=1_000, handoff_threshold=1_000)
    tasks = iter(range(1_000_000))

    def record(text: str) -> object:
        task = f"t{next(tasks)}"
        service.start_task(task)
        return service.record_gate(task, 1, output=text, error=text[-1_000:])

    try:
        for unit in ("mysql -p", "curl -u a:", "sig=", "mysql ", "docker login "):
            measured = ratio(record, unit, SMALL, LARGE)
            assert measured < RATIO_BOUND, (unit, measured)
    finally:
        service.close()
