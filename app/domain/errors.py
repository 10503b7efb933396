"""Expected failures, each with a stable public code.

    EnverifError                      (code)
     ├── Unauthenticated              UNAUTHENTICATED
     ├── Forbidden                    FORBIDDEN
     ├── NotFound                     NOT_FOUND   (also for another workspace's objects)
     ├── ValidationFailed             VALIDATION_FAILED (names the field)
     ├── Conflict                     CONFLICT
     ├── CredentialRejected           CREDENTIAL_REJECTED
     ├── InvalidTransition            INVALID_TRANSITION
     └── Unavailable                  UNAVAILABLE (the database or Redis is unreachable;
                                      ``extensions.retryAfter`` says when to try again)

The GraphQL edge maps ``code`` to ``extensions.code``; anything that is not an
``EnverifError`` is unexpected and is masked before it reaches a client. (``RATE_LIMITED``,
one operation too many on a websocket, is answered by ``app.graphql.ws_auth`` itself.)
"""

from __future__ import annotations


class EnverifError(Exception):
    code = "INTERNAL"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def extensions(self) -> dict[str, object]:
        ext: dict[str, object] = {"code": self.code}
        if self.field is not None:
            ext["field"] = self.field
        return ext


class Unauthenticated(EnverifError):
    code = "UNAUTHENTICATED"


class Forbidden(EnverifError):
    code = "FORBIDDEN"


class NotFound(EnverifError):
    code = "NOT_FOUND"


class ValidationFailed(EnverifError):
    code = "VALIDATION_FAILED"


class Conflict(EnverifError):
    code = "CONFLICT"


class CredentialRejected(EnverifError):
    code = "CREDENTIAL_REJECTED"


class InvalidTransition(EnverifError):
    code = "INVALID_TRANSITION"


class Unavailable(EnverifError):
    """A service the request needs (the database, Redis) is not answering. Nothing is wrong
    with the request: the same request is expected to work after ``retry_after_s``."""

    code = "UNAVAILABLE"

    def __init__(
        self, message: str = "the service is temporarily unavailable; retry later", *, retry_after_s: int = 2
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def extensions(self) -> dict[str, object]:
        return {**super().extensions(), "retryAfter": self.retry_after_s}
