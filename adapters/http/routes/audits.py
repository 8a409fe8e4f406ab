"""The audit: the hash chains, the replay check and what-if."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from devs.adapters.http.contract import WhatIfBody
from devs.adapters.http.dispatch import Devs, HttpRoute
from devs.domain import (
    Verification,
)
from devs.domain.audit import ReplayCheckReport, WhatIfReport
from devs.domain.values import ID_MAX, ID_PATTERN

router = APIRouter(tags=["audit"], route_class=HttpRoute)


# -------------------------------------------------------------------- audit


@router.get("/verify")
def verify(served: Devs) -> Verification:
    """``verify()``: every read model against a fold of the log, every
    event decodable, every hash chain unbroken; writes nothing."""
    return served.service.verify()


QueriedId = Annotated[
    str, Field(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN.regex)
]


@router.get("/replay-check")
def replay_check(
    served: Devs,
    task_id: Annotated[
        list[
            Annotated[
                str, Field(min_length=1, max_length=ID_MAX, pattern=ID_PATTERN.regex)
            ]
        ]
        | None,
        Query(description="only these tasks (repeatable)"),
    ] = None,
) -> ReplayCheckReport:
    """``replay_check()``: every recorded history re-decided by today's
    code under its own policy; writes nothing."""
    return served.service.replay_check(task_ids=task_id)


@router.post("/what-if")
def what_if(served: Devs, body: WhatIfBody) -> WhatIfReport:
    """``what_if(policy)``: every recorded history (or the named tasks, or
    a run's) re-decided under the policy in force with ``policy``'s
    changes; writes nothing (a POST for its body, not a command)."""
    arguments = dict(body)
    changes = arguments["policy"].model_dump(exclude_none=True)
    return served.service.what_if(
        changes, task_ids=arguments["task_ids"], run_id=arguments["run_id"]
    )
