"""What may be printed of a value that can carry a credential: a URL's user information never is."""

from __future__ import annotations


def redact_url(value: str) -> str:
    """The value with any `user:password@` before its host replaced by `***@` (anything else unchanged):
    `postgresql://me:secret@db/x` -> `postgresql://***@db/x`, `me:secret@db:5432` -> `***@db:5432`."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "", value
    authority = rest.split("/", 1)[0]
    at = authority.rfind("@")
    return f"{scheme}{sep}***{rest[at:]}" if at >= 0 else value
