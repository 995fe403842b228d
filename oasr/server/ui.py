"""The browser page at ``/`` (``oasr serve --no-ui`` leaves it out): plain HTML, JS and CSS from
``oasr/server/ui/``, no build step and nothing fetched from elsewhere.

The page lists ``/v1/models`` into a picker, streams the microphone (an AudioWorklet turns it
into 16-bit PCM) over the WebSocket ``/v1/audio/stream`` and shows partial text in place and
final text as it comes, and posts dropped or picked files to ``/v1/audio/transcriptions``. With
an API key it sends ``Authorization: Bearer`` over HTTP and the ``openai-insecure-api-key.<key>``
subprotocol on the WebSocket (``oasr.server.app.websocket_api_key``). A stream the server refuses
is explained from ``GET /v1/audio/stream``, which answers over HTTP what the upgrade got.

Only the files named in ``FILES`` are served (no path from the request reaches the file
system), each with its content type and a Content-Security-Policy that lets the page load
its own scripts and styles and talk to its own origin only.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from oasr.server.errors import APIError

UI_DIR = Path(__file__).with_name("ui")

FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "transport.js": "text/javascript; charset=utf-8",
    "worklet.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@functools.cache
def _read(name: str) -> bytes:
    return (UI_DIR / name).read_bytes()


def _file(name: str) -> Response:
    if name not in FILES:
        raise APIError(404, f"no such file: /ui/{name}", code="not_found")
    return Response(_read(name), media_type=FILES[name], headers=HEADERS)


@router.get("/")
async def page() -> Response:
    return _file("index.html")


@router.get("/ui/{name}")
async def asset(name: str) -> Response:
    return _file(name)
