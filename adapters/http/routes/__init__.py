"""One router per resource; :func:`devs.adapters.http.app.create_app`
includes them all."""
