"""The HTTP service: every command and query of ``RecoveryService`` as JSON.

FastAPI over the same service the Python API and the CLI use; the request
bodies and the answers are pydantic models, so ``/openapi.json`` documents
them. Errors are one JSON shape (:class:`~devs.adapters.http.contract.ErrorBody`),
bad input never writes, every command takes an ``Idempotency-Key`` and every
command answer carries ``X-Devs-Position`` (docs/http.md says it all).

- ``contract``: headers, bodies, answers and the error shape;
- ``front_door`` and ``auth``: what is checked before a request reaches a
  route (host, size, time, cross-site; the token);
- ``dispatch``: the writer threads, the app's state, read-your-writes;
- ``errors``: every refusal in one shape;
- ``routes/``: one router per resource; ``streams``: server-sent events;
- ``app``: :func:`create_app` and :func:`app_from_env` (``devs serve``).
"""

from devs.adapters.http.app import app_from_env, create_app

__all__ = ["app_from_env", "create_app"]
