"""A real, throwaway PostgreSQL server for the history tests, started once per test session
(tests/history/pgserver.py); each test gets a database of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from pgserver import ServerUnavailable, throwaway_server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL (without a database) of a running throwaway server."""
    try:
        with throwaway_server() as url:
            yield url
    except ServerUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh database on the session's server; dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{pg_server}/postgres", autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{pg_server}/{name}"
    finally:
        with psycopg.connect(f"{pg_server}/postgres", autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
