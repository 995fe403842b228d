"""Errors the server answers with, in OpenAI's shape:
``{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}``.

Status codes and ``type`` values:

====  ========================  ==================================================
400   invalid_request_error     bad audio, bad / unknown / unsupported form fields
401   authentication_error      missing or wrong ``Authorization: Bearer`` key
404   not_found_error           unknown ``model`` name, unknown route
405   invalid_request_error     wrong method for a route
408   timeout_error             the upload sent nothing for ``--upload-idle-timeout``
413   invalid_request_error     request body over ``--max-upload-mb``
429   rate_limit_error          the engine queue is full (``--max-queue``); retry
499   client_closed_request     (logged / counted only: the client went away)
500   server_error              a bug; the server keeps serving
503   service_unavailable       the engine has stopped, or the server is shutting down
504   timeout_error             the request ran past ``--request-timeout``
====  ========================  ==================================================
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi.responses import JSONResponse

from oasr.server.protocol import ErrorInfo, ErrorResponse

CLIENT_CLOSED_REQUEST = 499  # nginx's code for "the client closed the connection first"

_DEFAULT_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    CLIENT_CLOSED_REQUEST: "client_closed_request",
    503: "service_unavailable",
    504: "timeout_error",
}


class APIError(Exception):
    """An error answered as ``status`` with OpenAI's error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _DEFAULT_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict:
        return ErrorResponse(
            error=ErrorInfo(message=self.message, type=self.type, param=self.param, code=self.code)
        ).model_dump()

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class UploadTooLarge(Exception):
    """The request body grew past ``--max-upload-mb`` while being received."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"the request body is larger than the {limit_bytes / 1048576:g} MiB upload limit")
        self.limit_bytes = limit_bytes

    def api_error(self) -> APIError:
        return APIError(413, str(self), code="upload_too_large")


class UploadIdle(Exception):
    """The request body stopped arriving for ``--upload-idle-timeout`` seconds."""

    def __init__(self, idle_s: float) -> None:
        super().__init__(f"the upload sent nothing for {idle_s:g} s (--upload-idle-timeout); closing it")
        self.idle_s = idle_s

    def api_error(self) -> APIError:
        return APIError(408, str(self), code="upload_idle_timeout", headers={"Connection": "close"})


def bad_request(message: str, param: str | None = None, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def error_for_status(status: int, message: str | None = None) -> APIError:
    """An ``APIError`` for a plain HTTP status (Starlette's own 404 / 405 / 400 ...)."""
    if message is None:
        try:
            message = HTTPStatus(status).phrase
        except ValueError:
            message = f"HTTP {status}"
    return APIError(status, message)
