"""schemathesis hooks for the runs against ``/openapi.json``
(``SCHEMATHESIS_HOOKS=tests.schemathesis_hooks``).

One, on ``Idempotency-Key``: a key names one command, so a client sends a new
one for each new command. schemathesis draws keys from the header's schema
like any string, so two different generated commands often share a key
(``0``); the second is then refused, as a key reused with another request
must be (422, as the IETF draft on ``Idempotency-Key`` says), which
schemathesis would read as a valid request refused. A key the schema allows
is made unique per request here; a key the schema refuses (a negative case)
is sent as drawn. Reuse itself is tested apart
(tests/integration/test_idempotency*.py)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import schemathesis

KEY = "Idempotency-Key"
_VALID_KEY = re.compile(r"[!-~]{1,255}")


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    headers = case.headers
    if not headers or KEY not in headers:
        return
    key = headers[KEY]
    if isinstance(key, str) and _VALID_KEY.fullmatch(key):
        headers[KEY] = f"{key[:200]}-{uuid.uuid4().hex}"
