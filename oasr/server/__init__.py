"""``oasr serve``: an OpenAI-compatible speech-to-text HTTP server over ``AsyncEngine``.

Modules: ``settings`` (``ServerSettings``), ``protocol`` (request / response schemas
and the form-field policy), ``serving`` (options mapping, engine calls, formatting,
SSE), ``routes`` (the HTTP routes), ``metrics`` (Prometheus), ``errors`` (OpenAI's
error shape and the status codes), ``app`` (``create_app``: middleware, auth,
upload limit, error handlers), ``streaming`` (the WebSocket ``/v1/audio/stream``), ``ui``
(the browser page at ``/``, its files in ``ui/``).

Endpoints: ``POST /v1/audio/transcriptions``, ``POST /v1/audio/translations``,
``GET /v1/models`` (and ``/v1/models/{id}``), ``GET /health``, ``GET /metrics``,
``/v1/audio/stream`` (WebSocket), ``GET /`` (the page).

FastAPI, uvicorn, python-multipart and prometheus-client are the ``server`` extra
(``oasr.install.install_hint("server")`` says how to install it); importing this package without them fails.
"""

from oasr.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]


def __getattr__(name: str):
    if name == "create_app":
        from oasr.server.app import create_app

        return create_app
    raise AttributeError(name)
