"""The history database's password comes from the variable export.history.password_env names, handed
to libpq beside a URL that carries none; an unset variable is named, never a value. Against the
real throwaway PostgreSQL of these tests (trust auth: it cannot refuse a wrong password, so the test
reads back the password the connection was opened with)."""

from __future__ import annotations

import pytest

from canary.export.history.store import HistoryError, open_store

SECRET = "pg-s3cret-Value"


def test_the_password_comes_from_the_named_variable(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_TEST_HISTORY_PW", SECRET)
    with open_store(url=pg_url, password_env="CANARY_TEST_HISTORY_PW") as store:
        assert store._conn.info.password == SECRET
        assert SECRET not in store.where
    monkeypatch.delenv("CANARY_TEST_HISTORY_PW")
    with pytest.raises(HistoryError, match="password_env names the environment variable CANARY_TEST_HISTORY_PW"):
        open_store(url=pg_url, password_env="CANARY_TEST_HISTORY_PW")
