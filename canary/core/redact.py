"""What may be printed of a value that can carry a credential: a URL's user information never is, nor the
value of an environment variable whose name says it is a secret."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping


def redact_url(value: str) -> str:
    """The value with any `user:password@` before its host replaced by `***@` (anything else unchanged):
    `postgresql://me:secret@db/x` -> `postgresql://***@db/x`, `me:secret@db:5432` -> `***@db:5432`."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "", value
    authority = rest.split("/", 1)[0]
    at = authority.rfind("@")
    out = f"{scheme}{sep}***{rest[at:]}" if at >= 0 else value
    return _QUERY_PASSWORD.sub(r"\1***", out)  # libpq also takes ?password=...


REDACTED = "***"
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#\s]*", re.IGNORECASE)
_SECRET_NAME = re.compile(
    r"TOKEN|PASSW(OR)?D|SECRET|CREDENTIAL|(^|_)(API_?)?KEY($|_)|(^|_)AUTH($|_|ORIZATION)", re.IGNORECASE
)


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (HF_TOKEN, PGPASSWORD, *_SECRET, *_KEY)."""
    return bool(_SECRET_NAME.search(name))


def has_userinfo(value: str) -> bool:
    """Whether a URL carries `user[:password]@` before its host."""
    return redact_url(value) != value


def redact_env(env: Mapping[str, str], also: Iterable[str] = ()) -> dict[str, str]:
    """An environment with the values of secret-looking names (and of `also`) replaced by ***,
    and any URL's user information removed."""
    hidden = set(also)
    return {
        name: REDACTED if value and (looks_secret(name) or name in hidden) else redact_url(value)
        for name, value in env.items()
    }


def redact_tree(value: object, also: Iterable[str] = ()) -> object:
    """A JSON-like value with every `env` mapping redacted (redact_env) and every URL's user
    information removed, for printing (`canary run --dry-run`, describe)."""
    hidden = tuple(also)
    if isinstance(value, Mapping):
        name, item_value = value.get("name"), value.get("value")  # a Kubernetes EnvVar
        secret_name = isinstance(name, str) and (looks_secret(name) or name in hidden)
        if secret_name and isinstance(item_value, str) and item_value:
            return {**value, "value": REDACTED}
        out: dict[object, object] = {}
        for key, item in value.items():
            if key == "env" and isinstance(item, Mapping) and all(isinstance(v, str) for v in item.values()):
                out[key] = redact_env(item, hidden)
            else:
                out[key] = redact_tree(item, hidden)
        return out
    if isinstance(value, list | tuple):
        return [redact_tree(item, hidden) for item in value]
    if isinstance(value, str) and "@" in value:
        return " ".join(redact_url(word) if "@" in word else word for word in value.split(" "))
    return value
