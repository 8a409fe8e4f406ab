"""``devs operator add|list|remove|rotate``: the people who may answer for
people over HTTP and in the console (docs/security.md)."""

from __future__ import annotations

import click

from devs.adapters.cli.base import (
    TIME,
    Context,
    actor_option,
    cli,
    emit_json,
    handles_errors,
    json_option,
    pass_context,
    plain,
    show_rows,
)
from devs.domain.operators import IssuedToken


@cli.group()
def operator() -> None:
    """Operators: the people whose tokens answer for people."""


def _issued(issued: IssuedToken, as_json: bool) -> None:
    # The token alone on stdout (TOKEN=$(devs operator add alice)); it is
    # shown this once and kept nowhere but as its hash.
    if as_json:
        emit_json(issued)
    else:
        click.echo(issued.token)


@operator.command("add")
@click.argument("name")
@actor_option
@json_option
@pass_context
@handles_errors
def operator_add(ctx: Context, name: str, actor: str, as_json: bool) -> None:
    """Add operator NAME and print its token (once: only its hash is kept)."""
    _issued(ctx.app.add_operator(name, actor=actor), as_json)


@operator.command("rotate")
@click.argument("name")
@actor_option
@json_option
@pass_context
@handles_errors
def operator_rotate(ctx: Context, name: str, actor: str, as_json: bool) -> None:
    """Give NAME a new token and print it; the old token and its console
    sessions stop working."""
    _issued(ctx.app.rotate_operator(name, actor=actor), as_json)


@operator.command("remove")
@click.argument("name")
@actor_option
@json_option
@pass_context
@handles_errors
def operator_remove(ctx: Context, name: str, actor: str, as_json: bool) -> None:
    """Remove operator NAME: its token and sessions stop working."""
    entry = ctx.app.remove_operator(name, actor=actor)
    if as_json:
        emit_json(entry)
    else:
        plain(f"operator {name} removed by {actor}")


@operator.command("list")
@json_option
@pass_context
@handles_errors
def operator_list(ctx: Context, as_json: bool) -> None:
    """Every operator: who added it and when, and its last rotation."""
    show_rows(
        ctx.app.operators(),
        as_json,
        empty="no operators: human actions over HTTP take the service token "
        "(`devs operator add NAME` adds one)",
        title="Operators",
        columns=("name", "added by", "added at", "rotated"),
        row=lambda entry: (
            entry.name,
            entry.added_by,
            entry.added_at.strftime(TIME),
            "-"
            if entry.rotated_at is None
            else f"{entry.rotated_at.strftime(TIME)} by {entry.rotated_by}",
        ),
    )
