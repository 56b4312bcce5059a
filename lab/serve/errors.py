"""The errors the server answers with, in the shape OpenAI's clients already parse.

Every refusal names the request field at fault (`param`), so a caller can fix the request
without reading server logs, and OpenAI's own client raises it as a typed error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi.responses import JSONResponse

INVALID = "invalid_request_error"
OVERLOADED = "overloaded_error"
UNAVAILABLE = "unavailable_error"
SERVER = "server_error"


@dataclass(eq=False)
class ApiError(Exception):
    """A request the server will not or cannot serve, with the status it answers (compared
    by identity, as exceptions are, so it stays hashable)."""

    status: int
    message: str
    param: str | None = None
    kind: str = INVALID
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(param: str, message: str, status: int = 400) -> ApiError:
    """A field the client got wrong; `message` says what and why."""
    return ApiError(status, message, param=param, code=f"invalid_{param}")


def retry_later(status: int, message: str, retry_after_s: int, kind: str, code: str) -> ApiError:
    """The server is busy or short of memory: the request was fine, and may succeed later."""
    return ApiError(status, message, kind=kind, code=code,
                    headers={"Retry-After": str(retry_after_s)})


class EngineGone(RuntimeError):
    """The process that held the pipeline has exited (`lab.serve.engine_process`); nothing
    it held can finish, and nothing more can start until the server restarts."""
