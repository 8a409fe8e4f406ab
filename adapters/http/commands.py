"""The routes of the commands, made from their declarations: one
:func:`command_route` per command names its path, its body (derived from the
command's domain model, :mod:`devs.adapters.http.contract`) and its answer;
the endpoint is the same for all. A command's parameters are written once, in
:mod:`devs.domain.arguments`, not again in a handler per route.

Every command takes an ``Idempotency-Key``; a person's answer (``human``)
also acts as the operator whose token was sent (:func:`acting`) and for the
task version ``If-Match`` names."""

from __future__ import annotations

import inspect
from inspect import Parameter
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from devs.adapters.http.auth import _operator, acting
from devs.adapters.http.contract import (
    Body,
    IfMatchHeader,
    KeyHeader,
    RunPath,
    TaskPath,
    if_version,
)
from devs.adapters.http.dispatch import Devs
from devs.domain import RecoveryService
from devs.domain.application import unchecked
from devs.domain.arguments import COMMANDS, given_apart


def command_route(
    router: APIRouter,
    path: str,
    command: str,
    body: type[Body],
    answer: type[BaseModel],
    *,
    status: int = 200,
    human: bool = False,
    name: str | None = None,
) -> None:
    """``POST path``: the service's ``command`` with the body's arguments
    (and the path's ``task_id``), answered with ``answer`` and ``status``;
    named ``name`` (default: the command's) in ``/openapi.json``."""
    # The body validated every argument it holds against the command's
    # model (the method's parameters, the same types); what comes from
    # elsewhere is validated apart (given_apart), and the command runs
    # without validating again: each value is checked, and its text
    # redacted, once.
    call = unchecked(getattr(RecoveryService, command))
    in_path = "{task_id}" in path
    run_in_path = "{run_id}" in path
    versioned = "if_version" in COMMANDS[command].model_fields

    async def endpoint(
        served: Any,
        body: Body,
        task_id: str | None = None,
        run_id: str | None = None,
        request: Request | None = None,
        key: str | None = None,
        if_match: str | None = None,
    ) -> Response:
        where = path.format(task_id=task_id, run_id=run_id)
        given: dict[str, Any] = {"task_id": task_id} if in_path else {}
        if run_in_path:
            given["run_id"] = run_id
        if not human:
            return await served.command(  # type: ignore[no-any-return]
                status,
                key,
                where,
                body,
                lambda s: call(s, **body.arguments(**given_apart(**given))),
            )
        assert request is not None  # FastAPI gives it to a human answer's route
        operator = _operator(request)
        version = if_version(if_match) if versioned else None
        # The request an Idempotency-Key names is the path with the body, not
        # the If-Match: a retry of an answer that was recorded answers as the
        # first time, though the task has moved on since (by that answer).
        return await served.command(  # type: ignore[no-any-return]
            status,
            key,
            where,
            body,
            lambda s: call(
                s,
                **body.arguments(
                    **given_apart(
                        **given,
                        actor=acting(s, operator, getattr(body, "actor", None)),
                        if_version=version,
                    ),
                ),
            ),
            caller=operator,
        )

    keyword = Parameter.POSITIONAL_OR_KEYWORD
    parameters = [Parameter("served", keyword, annotation=Devs)]
    if human:
        parameters.append(Parameter("request", keyword, annotation=Request))
    if in_path:
        parameters.append(Parameter("task_id", keyword, annotation=TaskPath))
    if run_in_path:
        parameters.append(Parameter("run_id", keyword, annotation=RunPath))
    parameters.append(Parameter("body", keyword, annotation=body))
    parameters.append(Parameter("key", keyword, annotation=KeyHeader, default=None))
    if human and versioned:
        parameters.append(
            Parameter("if_match", keyword, annotation=IfMatchHeader, default=None)
        )
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=Response
    )
    endpoint.__name__ = name or command
    endpoint.__doc__ = COMMANDS[command].__doc__
    router.add_api_route(
        path,
        endpoint,
        methods=["POST"],
        status_code=status,
        response_model=answer,
        name=name or command,
    )
