"""``devs hooks install|uninstall|status``: the breaker's entries in a coding
agent's hook settings, merged with what the file holds.

Every agent here reads one JSON file of Claude Code's shape, give or take a
:class:`Layout`; the breaker's own entries are recognised by their command
(``... devs ... hook AGENT``) and replaced, so installing twice changes nothing
and uninstalling removes exactly those; other hooks and settings are left as
they were, in their order (docs/agents.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from devs.domain.errors import InvalidInput
from devs.domain.redaction import redact


@dataclass(frozen=True)
class Layout:
    """Where one agent keeps its hooks, and which events the breaker hears."""

    agent: str
    project_file: str
    """Relative to the project folder."""
    user_file: str
    """Relative to the home folder."""
    events: tuple[tuple[str, str | None], ...]
    """Each event and its matcher (``None``: the event takes none)."""
    timeout: int | None = 30
    """The seconds the agent gives the hook (the breaker answers in far less)."""
    wrapped: bool = True
    """The events are under ``"hooks"`` (else at the top level, unless the
    file already wraps them)."""
    aliases: tuple[tuple[str, str], ...] = ()
    """Another spelling of an event's key that the agent reads too (the
    entries go under whichever the file already uses)."""
    flat: bool = False
    """Each event lists its entries directly (no matcher groups)."""
    command_key: str = "command"
    """The entry's key for the command line."""
    timeout_key: str = "timeout"
    """The entry's key for :attr:`timeout`."""
    entry: tuple[tuple[str, Any], ...] = (("type", "command"),)
    """The fields every entry starts with."""
    header: tuple[tuple[str, Any], ...] = ()
    """Keys the file must hold at its top (``"version": 1``), set when
    installing if absent."""
    own_file: bool = False
    """The file is the breaker's alone: uninstalling removes it when nothing
    but :attr:`header` is left."""
    no_http: frozenset[str] = frozenset()
    """Events the agent sends no ``http`` hook (Claude Code's
    ``SessionStart``): left out when the hooks POST to ``devs serve``."""

    def own(self, hook: Any) -> bool:
        """Whether ``hook`` (an entry) is the breaker's for this agent: its
        command, or an ``http`` hook to ``devs serve``'s ``/hooks/AGENT``."""
        if not isinstance(hook, dict):
            return False
        if hook.get("type") == "http":
            # Exactly the shape http_hook writes: a user's own http hook to
            # some other /hooks/AGENT is not the breaker's.
            url = hook.get("url")
            return (
                isinstance(url, str)
                and url.rstrip("/").endswith(f"/hooks/{self.agent}")
                and hook.get("headers") == {"Authorization": f"Bearer ${TOKEN_ENV}"}
                and hook.get("allowedEnvVars") == [TOKEN_ENV]
            )
        return own_agent(hook.get(self.command_key)) == self.agent

    def entries(self, groups: Any) -> list[Any]:
        """The entries of one event's value (flat, or inside its groups)."""
        if not isinstance(groups, list):
            return []
        if self.flat:
            return list(groups)
        return [
            hook
            for group in groups
            if isinstance(group, dict) and isinstance(group.get("hooks"), list)
            for hook in group["hooks"]
        ]

    def key(self, container: Mapping[str, Any], event: str) -> str:
        """The key ``event`` has in ``container``: the spelling already there."""
        if event in container:
            return event
        for name, alias in self.aliases:
            if name == event and alias in container:
                return alias
        return event

    def container(self, data: dict[str, Any]) -> dict[str, Any]:
        """The object of ``data`` that holds the events (a copy, to fill)."""
        if self.wrapped or "hooks" in data:
            return dict(data.get("hooks") or {})
        return {k: v for k, v in data.items() if k in self.known}

    @property
    def known(self) -> frozenset[str]:
        return frozenset(
            [e for e, _ in self.events] + [a for pair in self.aliases for a in pair]
        )

    def put(self, data: dict[str, Any], container: dict[str, Any]) -> None:
        """Write ``container`` back into ``data`` (empty: the key goes)."""
        if self.wrapped or "hooks" in data:
            if container:
                data["hooks"] = container
            else:
                data.pop("hooks", None)
            return
        for key in self.known:
            data.pop(key, None)
        data.update(container)


_AGENT_NAME = re.compile(r"[a-z-]{1,40}")


def own_agent(command: Any) -> str | None:
    """The agent a breaker command answers for, if ``command`` is one:
    ``… devs … hook AGENT`` (its words read once: linear)."""
    if not isinstance(command, str) or len(command) > 8_192:
        return None
    words = command.split()
    if len(words) < 3 or words[-2] != "hook" or not _AGENT_NAME.fullmatch(words[-1]):
        return None
    for word in words[:-2]:
        program = word.strip("'\"")
        if program == "devs" or program.endswith("/devs"):
            return words[-1]
    return None


TOKEN_ENV = "DEVS_API_TOKEN"


def http_hook(url: str, agent: str) -> dict[str, Any]:
    """An ``http`` hook that POSTs the event to ``devs serve`` at ``url``
    (``/hooks/AGENT``), with the API token the agent's environment holds
    (the agent fills in ``$DEVS_API_TOKEN`` only for a variable it is told it
    may read): the token never enters the settings file."""
    return {
        "type": "http",
        "url": f"{url.rstrip('/')}/hooks/{agent}",
        "headers": {"Authorization": f"Bearer ${TOKEN_ENV}"},
        "allowedEnvVars": [TOKEN_ENV],
    }


def hook_command(devs: str, db: str | None, agent: str) -> str:
    parts = [devs]
    if db is not None:
        parts += ["--db", db]
    parts += ["hook", agent]
    return shlex.join(parts)


def settings_path(layout: Layout, *, project: Path, user: bool, home: Path) -> Path:
    return home / layout.user_file if user else project / layout.project_file


def _load(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    if not raw.strip():
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        msg = f"{path} is not JSON ({error}): fix or move it, nothing was written"
        raise InvalidInput(msg, field="settings") from None
    if not isinstance(data, dict):
        msg = f"{path} holds no JSON object: fix or move it, nothing was written"
        raise InvalidInput(msg, field="settings")
    hooks = data.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        msg = f'{path}: "hooks" is not an object: fix it, nothing was written'
        raise InvalidInput(msg, field="settings")
    return data


def _save(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"
    handle, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=".devs-", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(text)
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o777)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _without_own(groups: Any, layout: Layout) -> list[Any]:
    """The event's matcher groups without the breaker's entries for the
    layout's agent (a group left with no hook is dropped)."""
    if not isinstance(groups, list):
        return []
    if layout.flat:
        return [hook for hook in groups if not layout.own(hook)]
    kept: list[Any] = []
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
            kept.append(group)
            continue
        hooks = [h for h in group["hooks"] if not layout.own(h)]
        if len(hooks) == len(group["hooks"]):
            kept.append(group)
        elif hooks:
            kept.append({**group, "hooks": hooks})
    return kept


def install(
    layout: Layout, path: Path, command: str, *, url: str | None = None
) -> bool:
    """Write the breaker's entries into ``path``; whether the file changed.
    A link (a dotfiles repository's) is followed: its target is written.
    With ``url``, the entries POST the events to ``devs serve`` there
    (:func:`http_hook`) instead of running ``command``."""
    path = path.resolve()
    data = _load(path)
    before = orjson.dumps(data)
    hooks = layout.container(data)
    for event, matcher in layout.events:
        key = layout.key(hooks, event)
        groups = _without_own(hooks.get(key), layout)
        if url is not None and event in layout.no_http:
            if groups:
                hooks[key] = groups
            else:
                hooks.pop(key, None)
            continue
        entry: dict[str, Any] = dict(layout.entry)
        entry[layout.command_key] = command
        if url is not None:
            entry = http_hook(url, layout.agent)
        if layout.timeout is not None:
            entry[layout.timeout_key] = layout.timeout
        if layout.flat:
            hooks[key] = [*groups, entry]
            continue
        group: dict[str, Any] = {} if matcher is None else {"matcher": matcher}
        group["hooks"] = [entry]
        hooks[key] = [*groups, group]
    for name, value in layout.header:
        data.setdefault(name, value)
    layout.put(data, hooks)
    if orjson.dumps(data) == before and path.exists():
        return False
    _save(path, data)
    return True


def uninstall(layout: Layout, path: Path) -> bool:
    """Remove the breaker's entries from ``path``; whether the file changed."""
    path = path.resolve()
    if not path.exists():
        return False
    data = _load(path)
    hooks = layout.container(data)
    kept: dict[str, Any] = {}
    changed = False
    for event, groups in hooks.items():
        left = _without_own(groups, layout) if isinstance(groups, list) else groups
        if left != groups:
            changed = True
            if not left:
                continue  # emptied by us: the event goes
        kept[event] = left
    if not changed:
        return False
    layout.put(data, kept)
    if layout.own_file and set(data) <= {name for name, _ in layout.header}:
        path.unlink()  # the breaker's own file, with nothing else left in it
        return True
    _save(path, data)
    return True


@dataclass(frozen=True)
class Installed:
    """What ``devs hooks status`` shows of one settings file."""

    agent: str
    path: Path
    events: tuple[str, ...]
    commands: tuple[str, ...]
    missing: tuple[str, ...]
    """Events the breaker should hear and the file does not send it."""
    error: str | None = None


def status(layout: Layout, path: Path) -> Installed:
    try:
        data = _load(path)
    except InvalidInput as error:
        return Installed(layout.agent, path, (), (), (), error=str(error))
    hooks = layout.container(data)
    events: list[str] = []
    commands: list[str] = []
    posting = False
    for event, groups in hooks.items():
        for hook in layout.entries(groups):
            if layout.own(hook):
                events.append(event)
                posting = posting or hook.get("type") == "http"
                said = hook.get("url") if hook.get("type") == "http" else None
                said = said or hook.get(layout.command_key)
                if said not in commands:
                    commands.append(said)
    missing = tuple(
        e
        for e, _ in layout.events
        if events
        and layout.key(hooks, e) not in events
        and not (posting and e in layout.no_http)
    )
    return Installed(layout.agent, path, tuple(events), tuple(commands), missing)


def describe(found: Sequence[Installed]) -> list[str]:
    lines: list[str] = []
    for item in found:
        if item.error:
            lines.append(f"{item.agent}: {item.path}: unreadable: {item.error}")
        elif not item.events:
            lines.append(f"{item.agent}: {item.path}: not installed")
        else:
            lines.append(
                f"{item.agent}: {item.path}: installed for {', '.join(item.events)}"
            )
            lines.extend(redact(f"  command: {c}") for c in item.commands)
            if item.missing:
                lines.append(f"  missing: {', '.join(item.missing)} (install again)")
    return lines
