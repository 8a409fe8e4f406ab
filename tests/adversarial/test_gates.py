"""The gate command as an attacker, through the real ``devs gate run``.

A gate runs code the agent wrote. Nothing it runs may open, create or replace
a file of the store (the database, ``-wal``, ``-shm``, ``-journal``, their
folder), reach the server's sockets, read its environment, or write beyond
bounded ``/tmp`` and process limits. Each test attacks as a gate would and
checks the host afterwards, not only what the gate printed.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devs.adapters.sandbox import Isolation, _Cgroup, run_gate
from devs.domain import InvalidInput
from tests import devs_process
from tests.helpers import event_count, require_bwrap

DEVS = str(Path(sys.executable).with_name("devs"))
PY = sys.executable
OK, RETRY, BAD_INPUT = 0, 1, 6
SUFFIXES = ("-journal", "-wal", "-shm")


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder neither under /tmp nor the home directory (both hidden in the
    sandbox anyway), so that what the sandbox shows is what is tested."""
    folder = Path(tempfile.mkdtemp(prefix="devs-adv-", dir="/var/tmp")).resolve()
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def devs(
    db: Path, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return devs_process.run(
        [DEVS, "--db", str(db), *args],
        timeout=60,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def started(db: Path, cwd: Path) -> None:
    done = devs(db, cwd, "task", "start", "t1")
    assert done.returncode == OK, done.stderr


def apart(base: Path) -> tuple[Path, Path]:
    """A store in a folder of its own and a project folder beside it, where
    the gates run, with task t1 started: the layout a gate may run in."""
    db = base / "store" / "devs_state.sqlite"
    db.parent.mkdir()
    work = base / "project"
    work.mkdir()
    started(db, work)
    return db, work


def last_output(db: Path, cwd: Path) -> str:
    import json

    shown = devs(db, cwd, "task", "show", "t1", "--json")
    return str(json.loads(shown.stdout)["failure_history"][-1]["output_excerpt"])


def snapshot(db: Path) -> dict[str, bytes | None]:
    """The store's files as they are on the host (None: absent)."""
    return {
        s: (Path(f"{db}{s}").read_bytes() if Path(f"{db}{s}").exists() else None)
        for s in ("", *SUFFIXES)
    }


# The attack: plant a journal, a WAL and a WAL index beside the store (SQLite
# replays a hot journal at the next open: a forged copy of every page), write
# the database, read it, list its folder, and move the folder away (the
# referee would then open whatever is made in its place).
PLANT = """
import os, sys
db = sys.argv[1]
for suffix in ("-journal", "-wal", "-shm"):
    try:
        with open(db + suffix, "wb") as f:
            f.write(b"\\xd9\\xd5\\x05\\xf9\\x20\\xa1\\x63\\xd7" + b"F" * 4096)
        print("planted", suffix)
    except OSError as e:
        print("no plant", suffix, e.strerror)
try:
    open(db, "ab").write(b"forged"); print("wrote the db")
except OSError as e:
    print("no write", e.strerror)
try:
    print("read the db", len(open(db, "rb").read()))
except OSError as e:
    print("no read", e.strerror)
try:
    print("listed", os.listdir(os.path.dirname(db)))
except OSError as e:
    print("no list", e.strerror)
folder = os.path.dirname(db)
try:
    os.rename(folder, folder + ".moved"); print("moved the folder")
except OSError as e:
    print("no move", e.strerror)
sys.exit(1)
"""


def test_a_gate_cannot_plant_a_journal_or_touch_the_store_below_its_folder(
    base: Path,
) -> None:
    """The store in a folder inside the gate's working directory."""
    require_bwrap()
    work = base / "project"
    (work / "state").mkdir(parents=True)
    db = work / "state" / "devs_state.sqlite"
    started(db, work)
    before, count = snapshot(db), event_count(db)
    (work / "plant.py").write_text(PLANT)
    ran = devs(db, work, "gate", "run", "t1", "--", PY, "plant.py", str(db))
    assert ran.returncode == RETRY, ran.stderr
    said = last_output(db, work)
    assert "planted" not in said, said
    assert "wrote the db" not in said, said
    assert "moved the folder" not in said, said
    assert "read the db" not in said, said
    assert "listed []" in said  # an empty, read-only folder
    after = snapshot(db)
    for suffix in SUFFIXES:  # the referee's own -wal/-shm may come and go
        assert b"F" * 4096 not in (after[suffix] or b""), suffix
    assert after["-journal"] is None
    assert before["-journal"] is None
    assert not (work / "state.moved").exists()
    assert event_count(db) == count + 1  # the gate's own failure, nothing else
    verified = devs(db, work, "verify")
    assert verified.returncode == OK, verified.stdout + verified.stderr


def test_a_gate_never_runs_in_the_store_folder_unless_asked(base: Path) -> None:
    """The default layout: the store in the folder the gate runs in."""
    require_bwrap()
    db = base / "devs_state.sqlite"
    started(db, base)
    count = event_count(db)
    (base / "plant.py").write_text(PLANT)
    refused = devs(db, base, "gate", "run", "t1", "--", PY, "plant.py", str(db))
    assert refused.returncode == BAD_INPUT, refused.stderr
    assert "holds the referee's store 'devs_state.sqlite'" in refused.stderr
    assert "--in-store-folder" in refused.stderr
    assert "DEVS_DB" in refused.stderr
    assert event_count(db) == count  # nothing ran, nothing was recorded
    assert all(not Path(f"{db}{s}").exists() for s in ("-journal",))

    asked = devs(
        db,
        base,
        "gate",
        "run",
        "t1",
        "--in-store-folder",
        "--",
        PY,
        "plant.py",
        str(db),
    )
    assert asked.returncode == RETRY, asked.stderr
    said = last_output(db, base)
    assert "no plant -journal Read-only file system" in said, said
    assert "planted" not in said, said
    assert "wrote the db" not in said, said
    assert "read the db" not in said, said
    assert "moved the folder" not in said, said
    assert not Path(f"{db}-journal").exists()
    assert event_count(db) == count + 1
    assert devs(db, base, "verify").returncode == OK


def test_a_gate_reaches_no_server_socket_nor_its_parents_environment(
    base: Path,
) -> None:
    """A loopback TCP port (``devs serve``), a unix socket in the user's
    runtime folder (the hook server's), and ``/proc/<ppid>/environ``."""
    require_bwrap()
    db, work = apart(base)
    runtime = base / "runtime"
    (runtime / "devs").mkdir(parents=True)
    unix = runtime / "devs" / "hook-test.sock"
    with (
        socket.create_server(("127.0.0.1", 0)) as tcp,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hook,
    ):
        hook.bind(str(unix))
        hook.listen()
        probe = f"""
import os, socket
for name, family, address in (
    ("tcp", socket.AF_INET, ("127.0.0.1", {tcp.getsockname()[1]})),
    ("unix", socket.AF_UNIX, {str(unix)!r}),
):
    try:
        socket.socket(family).connect(address); print("reached", name)
    except OSError as e:
        print("no", name, type(e).__name__)
for pid in (os.getppid(), 1):
    try:
        data = open(f"/proc/{{pid}}/environ", "rb").read()
        print("environ", pid, b"server-secret" in data)
    except OSError as e:
        print("no environ", pid, e.strerror)
raise SystemExit(1)
"""
        env = {
            "XDG_RUNTIME_DIR": str(runtime),
            "DEVS_API_TOKEN": "server-secret-" + "x" * 24,
        }
        ran = devs(db, work, "gate", "run", "t1", "--", PY, "-c", probe, env=env)
        assert ran.returncode == RETRY, ran.stderr
        hook.setblocking(False)
        with pytest.raises(BlockingIOError):
            hook.accept()  # nobody connected
    said = last_output(db, work)
    assert "reached" not in said, said
    assert "no tcp" in said, said
    assert "no unix" in said, said
    # The gate's /proc is its own: no process of the host is in it, and
    # nothing in it holds the server's environment.
    assert "True" not in said, said


SECRETS = {
    "APP_DATABASE_URL": "postgresql://db.internal/app",
    "DEVS_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/xyzzy",
    "DEVS_WEBHOOK_URLS": "https://ci.example.invalid/notify?sig=abc123",
    "DEVS_SMTP_URL": "smtp://mailer.example.invalid:587",
    "DEVS_API_TOKEN": "api-token-" + "a" * 24,
    "DEVS_CONSOLE_SECRET": "console-secret-" + "c" * 32,
    "BUILD_NOTIFY_HOOK": "https://chat.example.invalid/webhook/abc",
    "REPORT_URL": "https://reports.example.invalid/upload?token=abc",
    "DEPLOY_STATUS": "https://discord.com/api/webhooks/1/abc",
    "MIRROR": "https://ghp_abcdef@github.com/org/repo",
}


def test_endpoint_secrets_and_the_referees_settings_never_reach_a_gate(
    base: Path,
) -> None:
    db, work = apart(base)
    env = {**SECRETS, "DEVS_TASK_ID": "t1", "HARMLESS_URL": "https://example.invalid/"}
    show = "import os, json; print(json.dumps(sorted(os.environ))); raise SystemExit(1)"
    ran = devs(db, work, "gate", "run", "t1", "--json", "--", PY, "-c", show, env=env)
    assert ran.returncode == RETRY, ran.stderr
    said = last_output(db, work)
    for name in SECRETS:
        assert f'"{name}"' not in said, name
    assert '"DEVS_TASK_ID"' in said
    assert '"HARMLESS_URL"' in said
    import json

    assert set(SECRETS) <= set(json.loads(ran.stdout)["run"]["scrubbed_env"])


@pytest.mark.parametrize("isolation", ["require", "none"])
def test_the_stores_url_never_reaches_a_gate(base: Path, isolation: Isolation) -> None:
    """``DEVS_DATABASE_URL`` makes ``devs`` itself use PostgreSQL: the runner
    is called directly here, with and without the sandbox."""
    if isolation == "require":
        require_bwrap()
    environ = {
        "PATH": os.environ["PATH"],
        "DEVS_DATABASE_URL": "postgresql://devs@db.internal/devs?sslmode=require",
        "REPLICA_DATABASE_URL": "postgresql://db.internal/replica",
        **SECRETS,
    }
    show = "import os; print(sorted(os.environ))"
    result = run_gate([PY, "-c", show], cwd=base, environ=environ, isolation=isolation)
    assert result.exit_code == 0, result.output
    assert "DATABASE_URL" not in result.output
    assert "DEVS_" not in result.output
    assert set(environ) - {"PATH"} == set(result.scrubbed_env)


def test_private_tmp_and_shared_memory_are_bounded(base: Path) -> None:
    require_bwrap()
    db, work = apart(base)
    fill = """
import sys
for where in ("/tmp/fill", "/dev/shm/fill"):
    written = 0
    try:
        with open(where, "wb") as f:
            for _ in range(64):
                f.write(b"x" * 1048576); f.flush(); written += 1
        print(where, "took 64 MiB")
    except OSError as e:
        print(where, "stopped at", written, "MiB:", e.strerror)
sys.exit(1)
"""
    env = {"DEVS_GATE_TMP_MB": "16"}
    ran = devs(db, work, "gate", "run", "t1", "--", PY, "-c", fill, env=env)
    assert ran.returncode == RETRY, ran.stderr
    said = last_output(db, work)
    assert "took 64 MiB" not in said, said
    assert said.count("No space left on device") == 2, said


def test_the_processes_a_gate_runs_are_bounded(base: Path) -> None:
    require_bwrap()
    if _Cgroup.make(1) is None and os.geteuid() == 0:  # pragma: no cover - host
        pytest.skip("no pids cgroup here, and RLIMIT_NPROC does not bind root")
    db, work = apart(base)
    spawn = """
import os, time, sys
n = 0
try:
    for _ in range(300):
        if os.fork() == 0:
            time.sleep(5); os._exit(0)
        n += 1
    print("spawned", n)
except OSError as e:
    print("stopped at", n, e.strerror)
sys.exit(1)
"""
    env = {"DEVS_GATE_MAX_PROCESSES": "40"}
    ran = devs(db, work, "gate", "run", "t1", "--", PY, "-c", spawn, env=env)
    assert ran.returncode == RETRY, ran.stderr
    said = last_output(db, work)
    assert "spawned 300" not in said, said
    assert "Resource temporarily unavailable" in said, said


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DEVS_GATE_TMP_MB", "lots"),
        ("DEVS_GATE_MAX_PROCESSES", "0"),
        ("DEVS_DANGEROUSLY_ALLOW_UNSANDBOXED_GATES", "maybe"),
    ],
)
def test_a_wrong_gate_setting_is_refused_and_nothing_runs(
    base: Path, name: str, value: str
) -> None:
    db, work = apart(base)
    count = event_count(db)
    marker = work / "ran"
    touch = f"open({str(marker)!r}, 'w').close()"
    ran = devs(db, work, "gate", "run", "t1", "--", PY, "-c", touch, env={name: value})
    assert ran.returncode == BAD_INPUT, ran.stderr
    assert name in ran.stderr
    assert ran.stderr.startswith("devs: error: ")
    assert not marker.exists()
    assert event_count(db) == count


def test_the_store_tampered_from_outside_is_what_verify_reports(base: Path) -> None:
    """An attacker with the file (not a gate) edits an event that has a
    successor: its successor's link no longer matches, and verify names the
    task and the version. (What it cannot see: docs/security.md.)"""
    db, work = apart(base)
    failed = devs(db, work, "gate", "run", "t1", "--", PY, "-c", "exit(1)")
    assert failed.returncode == RETRY, failed.stderr
    assert devs(db, work, "verify").returncode == OK
    with sqlite3.connect(db) as connection:
        connection.execute(
            "UPDATE stored_events SET state = replace(state, "
            'CAST(\'"agent":null\' AS BLOB), CAST(\'"agent":"carol"\' AS BLOB)) '
            "WHERE originator_id = 'task:t1' AND originator_version = 1"
        )
    verified = devs(db, work, "verify")
    assert verified.returncode != OK, verified.stdout
    shown = verified.stdout + verified.stderr
    assert "task 't1': version 1 does not match the hash recorded at version 2" in shown


KEYED = {
    "MYSQL_PWD": "hunter2-but-longer",
    "HF_HUB": "hf_" + "aB3" * 11,
    "NOTIFY": "https://x.example.invalid/?k=Zm9vYmFyYmF6cXV4MTIz",
    "MY_HOOK": "https://ci.example.invalid/notify/3f9a6c0e1b2d4f5a6b7c8d9e",
}
PLAIN = {
    "OLDPWD": "/srv/elsewhere",
    "DOCS_URL": "https://docs.example.invalid/en/latest/getting-started-guide",
    "BUILD_DATE_URL": "https://example.invalid/builds?since=20240101120000",
}


def test_passwords_tokens_and_capability_urls_never_reach_a_gate(base: Path) -> None:
    """``*_PWD``, a token known by its shape, and URLs that carry a key in a
    path segment or a query value; ``PWD``/``OLDPWD`` and plain URLs stay."""
    db, work = apart(base)
    show = "import os, json; print(json.dumps(sorted(os.environ))); raise SystemExit(1)"
    env = {**KEYED, **PLAIN}
    ran = devs(db, work, "gate", "run", "t1", "--json", "--", PY, "-c", show, env=env)
    assert ran.returncode == RETRY, ran.stderr
    import json

    seen = json.loads(last_output(db, work))
    assert not set(KEYED) & set(seen), seen
    assert set(PLAIN) | {"PWD"} <= set(seen), seen
    assert set(KEYED) <= set(json.loads(ran.stdout)["run"]["scrubbed_env"])


@pytest.mark.parametrize("through", ["symlink", "dotdot"])
def test_a_store_named_through_a_folder_the_gate_may_write_is_refused(
    base: Path, through: str
) -> None:
    """``--db project/state/s.sqlite`` with ``project/state`` a symlink to the
    store's folder (or ``project/x/../../data/s.sqlite``): a gate running in
    ``project`` could replace that symlink (or ``x``), and the referee would
    open a store of its making ever after. Refused before anything runs."""
    data = base / "data"
    data.mkdir()
    work = base / "project"
    work.mkdir()
    if through == "symlink":
        (work / "state").symlink_to(data)
        db = work / "state" / "devs_state.sqlite"
    else:
        (work / "x").mkdir()
        db = work / "x" / ".." / ".." / "data" / "devs_state.sqlite"
    started(db, work)
    count = event_count(data / "devs_state.sqlite")
    swap = "touch ran; rm -rf state x && mkdir state x; exit 1"
    ran = devs(db, work, "gate", "run", "t1", "--", "sh", "-c", swap)
    assert ran.returncode == BAD_INPUT, ran.stdout + ran.stderr
    assert "a symlink (or '..') in the gate's working directory" in ran.stderr
    assert not (work / "ran").exists()  # nothing ran
    if through == "symlink":
        assert (work / "state").is_symlink()
    else:
        assert (work / "x").is_dir()
    assert event_count(data / "devs_state.sqlite") == count
    # Named by its real path, the same store takes the gate.
    real = data / "devs_state.sqlite"
    ran = devs(real, work, "gate", "run", "t1", "--", PY, "-c", "exit(1)")
    assert ran.returncode == RETRY, ran.stderr
    assert event_count(real) == count + 1


def test_a_gate_name_the_record_would_refuse_is_refused_before_it_runs(
    base: Path,
) -> None:
    db, work = apart(base)
    count = event_count(db)
    touch = "open('ran', 'w').close()"
    for option, value, why in (
        ("--gate", "unit\ntests", "must not contain control characters"),
        ("--strategy", "   ", "must not be empty"),
    ):
        ran = devs(db, work, "gate", "run", "t1", option, value, "--", PY, "-c", touch)
        assert ran.returncode == BAD_INPUT, ran.stdout + ran.stderr
        assert f"{option.lstrip('-')} {why}" in ran.stderr, ran.stderr
        assert not (work / "ran").exists()
    assert event_count(db) == count


def test_the_stores_socket_directory_and_var_tmp_are_out_of_reach(base: Path) -> None:
    """A PostgreSQL store whose URL names a socket directory (``?host=/dir``)
    with ``peer`` or ``trust`` authentication takes any local connection: that
    directory is empty in the sandbox. So is ``/var/tmp``, where other
    servers keep sockets too. (No PostgreSQL here: a listening unix socket
    named as PostgreSQL's in a directory the URL names.)"""
    require_bwrap()
    work = base / "project"
    sockets = work / "run" / "pg"  # in sight but for the sandbox: in the project
    sockets.mkdir(parents=True)
    shared = base / "shared"  # in /var/tmp
    shared.mkdir()
    url = f"postgresql://devs@/devs?host={sockets}&port=5432"
    probe = f"""
import os, socket
for name, where in (("pg", {str(sockets)!r}), ("var-tmp", {str(shared)!r})):
    path = os.path.join(where, ".s.PGSQL.5432")
    print(name, "listed", sorted(os.listdir(where)) if os.path.isdir(where) else None)
    try:
        socket.socket(socket.AF_UNIX).connect(path); print("reached", name)
    except OSError as e:
        print("no", name, type(e).__name__)
"""
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as pg,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other,
    ):
        pg.bind(str(sockets / ".s.PGSQL.5432"))
        pg.listen()
        other.bind(str(shared / ".s.PGSQL.5432"))
        other.listen()
        result = run_gate(
            [PY, "-c", probe], cwd=work, store=url, isolation="require", timeout=60
        )
        for listening in (pg, other):
            listening.setblocking(False)
            with pytest.raises(BlockingIOError):
                listening.accept()  # nobody connected
    assert result.exit_code == 0, result.output
    assert "reached" not in result.output, result.output
    assert "pg listed []" in result.output, result.output
    assert "no pg FileNotFoundError" in result.output, result.output
    assert "var-tmp listed None" in result.output, result.output
    # The folder the URL names is refused as the working directory.
    with pytest.raises(InvalidInput, match="PostgreSQL socket directory"):
        run_gate(["true"], cwd=sockets, store=url, isolation="require")
