"""URL fields of the config, checked at load: a URL the canary cannot use is refused with exit 2, naming its key.

Found late, a URL without a scheme (`127.0.0.1:8000`) made the endpoint target wait out the whole startup
timeout and report a vLLM startup failure; a bad Pushgateway or history URL failed only after the run.
The loader echoes a rejected value without its user information (canary.core.redact): a password never
reaches a terminal or a log.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

HTTP_SCHEMES = ("http", "https")
DATABASE_SCHEMES = ("postgresql", "postgres")


def url_problem(value: str, schemes: tuple[str, ...], example: str = "http://127.0.0.1:8000") -> str | None:
    """Why `value` is not a URL of one of `schemes` with a host (and a valid port); None when it is. The value
    itself is not repeated (the loader adds it, without a password: canary.core.redact)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises ValueError on a port that is no number or out of range)
    except ValueError as exc:
        return f"not a URL: {exc}"
    if parts.scheme not in schemes:
        return (
            f"no {' or '.join(s + '://' for s in schemes)} scheme"
            + (f" (it reads {parts.scheme!r} as one)" if parts.scheme else "")
            + f", e.g. {example}"
        )
    if not parts.hostname:
        return "no host"
    return None


def _checked(schemes: tuple[str, ...], example: str) -> AfterValidator:
    def check(value: str) -> str:
        problem = url_problem(value, schemes, example)
        if problem is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


HttpUrl = Annotated[str, _checked(HTTP_SCHEMES, "http://127.0.0.1:8000")]
"""An http:// or https:// URL with a host."""
DatabaseUrl = Annotated[str, _checked(DATABASE_SCHEMES, "postgresql://canary@db.example:5432/canary")]
"""A postgresql:// URL with a host."""
