"""The HTTP service: every command and query of ``RecoveryService`` as JSON.

FastAPI over the same service the Python API and the CLI use, with one error
shape, an ``Idempotency-Key`` on every command and ``X-Devs-Position`` on
every command answer (docs/http.md). ``contract`` (headers, bodies, errors),
``front_door`` and ``auth`` (what is checked before a route), ``dispatch``
(writer threads, read-your-writes), ``errors``, ``routes/`` (one router per
resource), ``streams`` (server-sent events), ``app`` (:func:`create_app`).
"""

from devs.adapters.http.app import app_from_env, create_app

__all__ = ["app_from_env", "create_app"]
