"""What ``devs hooks install|status`` say of hooks an agent skips until the
user trusts them: Codex (the project, and each hook by its key in
``config.toml``) and Gemini CLI (the folder)."""

from __future__ import annotations

import json
from pathlib import Path

from devs.adapters.hooks import codex, copilot, gemini
from devs.adapters.hooks.install import hook_command, install

COMMAND = hook_command("/bin/devs", "/data/x.sqlite", "codex")


def codex_project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    project = tmp_path / "app"
    settings = project / ".codex" / "hooks.json"
    install(codex.CODEX, settings, COMMAND)
    home = tmp_path / "codex-home"
    home.mkdir()
    return project, settings, {"CODEX_HOME": str(home)}


def test_codex_hooks_in_an_untrusted_project_are_reported(tmp_path: Path) -> None:
    project, settings, environ = codex_project(tmp_path)
    said = codex.trust(settings, project, environ)
    assert said is not None
    assert "the project and 5 of the hooks" in said
    assert "/hooks" in said
    assert "--dangerously-bypass-hook-trust" in said


def test_codex_hooks_trusted_as_codex_records_them_are_not(tmp_path: Path) -> None:
    project, settings, environ = codex_project(tmp_path)
    keys = codex.hook_keys(settings.resolve())
    assert f"{settings.resolve()}:pre_tool_use:0:0" in keys
    assert f"{settings.resolve()}:user_prompt_submit:0:0" in keys
    lines = [
        f"[projects.{json.dumps(str(project.resolve()))}]",
        'trust_level = "trusted"',
    ]
    for key in keys[:-1]:
        lines += [f"[hooks.state.{json.dumps(key)}]", 'trusted_hash = "sha256:ab"']
    config = Path(environ["CODEX_HOME"]) / "config.toml"
    config.write_text("\n".join(lines) + "\n")
    said = codex.trust(settings, project, environ)
    assert said is not None
    assert "(1 of the hooks)" in said  # one left untrusted
    config.write_text(
        config.read_text()
        + f'[hooks.state.{json.dumps(keys[-1])}]\ntrusted_hash = "sha256:cd"\n'
    )
    assert codex.trust(settings, project, environ) is None
    # A user's hooks need no project.
    assert codex.trust(settings, None, environ) is None


def test_a_broken_codex_config_is_said(tmp_path: Path) -> None:
    project, settings, environ = codex_project(tmp_path)
    (Path(environ["CODEX_HOME"]) / "config.toml").write_text("[projects\n")
    said = codex.trust(settings, project, environ)
    assert said is not None
    assert said.startswith("cannot read Codex's")


def test_gemini_needs_a_trusted_folder(tmp_path: Path) -> None:
    project = tmp_path / "work" / "app"
    project.mkdir(parents=True)
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    environ = {"HOME": str(home)}
    settings = project / ".gemini" / "settings.json"
    said = gemini.trust(settings, project, environ)
    assert said is not None
    assert "GEMINI_CLI_TRUST_WORKSPACE=true" in said
    folders = home / ".gemini" / "trustedFolders.json"
    for trusted, level in [
        (project, "TRUST_FOLDER"),
        (tmp_path / "work", "TRUST_FOLDER"),
        (project / "sub", "TRUST_PARENT"),
    ]:
        folders.write_text(json.dumps({str(trusted): level}))
        assert gemini.trust(settings, project, environ) is None, level
    folders.write_text(json.dumps({str(project): "DO_NOT_TRUST"}))
    assert gemini.trust(settings, project, environ) is not None
    assert (
        gemini.trust(
            settings, project, {**environ, "GEMINI_CLI_TRUST_WORKSPACE": "true"}
        )
        is None
    )
    assert gemini.trust(settings, None, environ) is None


def test_copilot_needs_a_trusted_folder_for_a_projects_hooks(tmp_path: Path) -> None:
    project = tmp_path / "work" / "app"
    project.mkdir(parents=True)
    home = tmp_path / "home"
    (home / ".copilot").mkdir(parents=True)
    environ = {"HOME": str(home)}
    settings = project / ".github" / "hooks" / "devs-recovery.json"
    said = copilot.trust(settings, project, environ)
    assert said is not None
    assert "--trust-folder" in said
    config = home / ".copilot" / "config.json"
    config.write_text(json.dumps({"trustedFolders": [str(tmp_path / "work")]}))
    assert copilot.trust(settings, project, environ) is None
    config.write_text(json.dumps({"trustedFolders": [str(tmp_path / "other")]}))
    assert copilot.trust(settings, project, environ) is not None
    allow = {**environ, "COPILOT_ALLOW_ALL": "true"}
    assert copilot.trust(settings, project, allow) is None
    assert copilot.trust(settings, project, {**environ, "COPILOT_ALLOW_ALL": "1"})
    assert copilot.trust(settings, None, environ) is None
