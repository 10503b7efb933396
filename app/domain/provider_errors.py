"""Why a model turn could not be had: the code a run fails with when its provider gives up.
Pure.

These are not results the model sees (``model_errors``): the model was never answered. The
run ends ``FAILED`` with ``model provider failed: <message> [<CODE>]``; the message names the
HTTP status and the vendor's error type, never the remote body. The manual lists them under
"Why a model turn failed" (``docs/graphql/errors.md``), and a unit test holds that list to
this enum. A provider plugin may use a code of its own, in upper snake case.
"""

from __future__ import annotations

import enum


class ProviderErrorCode(enum.StrEnum):
    PROVIDER_RATE_LIMITED = "PROVIDER_RATE_LIMITED"
    """The vendor answered 429 on every try (``Retry-After`` honoured, capped at 60 s)."""
    PROVIDER_UNAVAILABLE = "PROVIDER_UNAVAILABLE"
    """5xx, 529 (overloaded), timeouts or connection errors on every try."""
    PROVIDER_AUTH_FAILED = "PROVIDER_AUTH_FAILED"
    """The vendor refused the key (401, 403)."""
    PROVIDER_REQUEST_INVALID = "PROVIDER_REQUEST_INVALID"
    """Any other 4xx (an unknown model, a parameter the endpoint does not take); not retried."""
    CONTEXT_TOO_LONG = "CONTEXT_TOO_LONG"
    """The vendor said the prompt (instructions, memories, history) exceeds the context."""
    OUTPUT_TRUNCATED = "OUTPUT_TRUNCATED"
    """The answer stopped at the token limit (``length``, ``max_tokens``) before it was whole."""
    PROVIDER_REFUSED = "PROVIDER_REFUSED"
    """The model refused (``refusal``, ``content_filter``)."""
    PROVIDER_BAD_RESPONSE = "PROVIDER_BAD_RESPONSE"
    """The answer could not be read (not JSON, no choice, bad tool arguments, too large)."""
    PROVIDER_NOT_ALLOWED = "PROVIDER_NOT_ALLOWED"
    """Nothing was sent: the key is unset or may not go there, or the address is private."""
    PROVIDER_FAILED = "PROVIDER_FAILED"
    """Any other provider failure (a scripted template over its cap, a plugin's error)."""
