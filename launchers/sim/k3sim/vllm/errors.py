"""Failures that end a start-up the way the real process does: log lines, then a non-zero exit."""
from __future__ import annotations


class StartupError(Exception):
    """``exc_type: message`` raised by the real module ``where`` (e.g. ``vllm/config/model.py``).

    ``stage`` says which process would raise it: ``api`` (config, before any engine) or
    ``engine`` (EngineCore/worker init, reported by the front-end as a failed core proc).
    """

    def __init__(self, exc_type: str, message: str, where: str = "", stage: str = "api",
                 pre_log: list[tuple[str, str, str]] | None = None) -> None:
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message
        self.where = where
        self.stage = stage
        self.pre_log = pre_log or []  # (level, file:line, text) lines logged before the traceback


class RequestError(Exception):
    """An OpenAI-protocol error answered as ``{"error": {...}}`` with an HTTP status."""

    TYPES = {400: "BadRequestError", 401: "Unauthorized", 404: "NotFoundError",
             500: "InternalServerError", 501: "NotImplementedError", 503: "ServiceUnavailableError"}

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 err_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.err_type = err_type or self.TYPES.get(status, "BadRequestError")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.err_type,
                          "param": self.param, "code": self.status}}
