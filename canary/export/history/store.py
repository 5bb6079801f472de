"""The history tables in SQLite (embedded default) or PostgreSQL (several canaries, one database).

Both speak the same schema (``SCHEMA``). A run is written in one transaction: its earlier rows,
if any (a re-import), are replaced, so a reader never sees half a run and importing twice is
harmless. Timestamps are ISO-8601 UTC text, which sorts in time order in both databases.

Tables
------
canary_history_runs     one row per run (config, platform, target, baseline image, times, counts)
canary_history_cells    run x cell: image key and reference, topology, backend, verdict, reason
canary_history_checks   run x cell x check: verdict, summary
canary_history_metrics  run x cell x check x metric: value (CheckResult.metrics, finite values only)
canary_history_bisections  run x bisected cell: outcome, culprit (patch file or image; '' when none),
                        cell runs, duration (bisect.json; written by canary bisect and the automatic
                        bisection after a run, read back by `history import`)

A table added later is created on open (CREATE TABLE IF NOT EXISTS) without a new schema version:
additive, so an older canary sharing the database keeps working (it never writes the new table,
and a run it rewrites loses its rows there through the cascade).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from canary.config.secrets import MissingSecret, from_env
from canary.core.redact import redact_url
from canary.errors import CanaryError
from canary.export.history.rows import BisectionRow, RunRows

SCHEMA_VERSION = 1
DEFAULT_SQLITE_NAME = "history.sqlite"

SCHEMA: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS canary_history_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS canary_history_runs (
        run_id TEXT PRIMARY KEY,
        config_name TEXT NOT NULL,
        platform TEXT NOT NULL,
        target TEXT NOT NULL,
        baseline_image TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        canary_version TEXT NOT NULL,
        interrupted INTEGER NOT NULL,
        cells_total INTEGER NOT NULL,
        cells_failing INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS canary_history_cells (
        run_id TEXT NOT NULL REFERENCES canary_history_runs (run_id) ON DELETE CASCADE,
        cell_id TEXT NOT NULL,
        image TEXT NOT NULL,
        image_ref TEXT NOT NULL,
        topology TEXT NOT NULL,
        backend TEXT NOT NULL,
        verdict TEXT NOT NULL,
        reason TEXT NOT NULL,
        PRIMARY KEY (run_id, cell_id))""",
    """CREATE TABLE IF NOT EXISTS canary_history_checks (
        run_id TEXT NOT NULL REFERENCES canary_history_runs (run_id) ON DELETE CASCADE,
        cell_id TEXT NOT NULL,
        check_name TEXT NOT NULL,
        verdict TEXT NOT NULL,
        summary TEXT NOT NULL,
        PRIMARY KEY (run_id, cell_id, check_name))""",
    """CREATE TABLE IF NOT EXISTS canary_history_metrics (
        run_id TEXT NOT NULL REFERENCES canary_history_runs (run_id) ON DELETE CASCADE,
        cell_id TEXT NOT NULL,
        check_name TEXT NOT NULL,
        metric TEXT NOT NULL,
        value DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, cell_id, check_name, metric))""",
    """CREATE TABLE IF NOT EXISTS canary_history_bisections (
        run_id TEXT NOT NULL REFERENCES canary_history_runs (run_id) ON DELETE CASCADE,
        cell_id TEXT NOT NULL,
        outcome TEXT NOT NULL,
        culprit TEXT NOT NULL,
        cell_runs INTEGER NOT NULL,
        duration_s DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, cell_id))""",
    "CREATE INDEX IF NOT EXISTS canary_history_runs_time ON canary_history_runs (started_at, run_id)",
    """CREATE INDEX IF NOT EXISTS canary_history_metrics_series
        ON canary_history_metrics (cell_id, check_name, metric, run_id)""",
)
_TABLES = (
    "canary_history_bisections",
    "canary_history_metrics",
    "canary_history_checks",
    "canary_history_cells",
    "canary_history_runs",
)


class HistoryError(CanaryError):
    """The history store cannot be opened, read or written, or a run or cell named is not in it
    (the CLI exits 2, as for other user errors)."""

    exit_code = 2


@dataclass(frozen=True)
class Point:
    """One value of a series: a run, the cell's image there, the check's verdict, the value."""

    run_id: str
    started_at: str
    image: str
    image_ref: str
    check_verdict: str
    value: float


@dataclass(frozen=True)
class RunInfo:
    """One run as the history knows it."""

    run_id: str
    config_name: str
    started_at: str
    cells_total: int
    cells_failing: int
    interrupted: bool


class HistoryStore:
    """A connection to the history (use as a context manager; `open_store` makes one)."""

    def __init__(self, conn: Any, *, placeholder: str, where: str) -> None:
        self._conn = conn
        self._ph = placeholder
        self.where = where

    # ------------------------------------------------------------------ plumbing

    def _sql(self, sql: str) -> str:
        return sql if self._ph == "?" else sql.replace("?", self._ph)

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        cur = self._conn.cursor()
        try:
            cur.execute(self._sql(sql), tuple(params))
            return [tuple(row) for row in cur.fetchall()]
        finally:
            cur.close()
            self._conn.commit()  # end the read transaction: no idle-in-transaction session, fresh snapshots

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        cur = self._conn.cursor()
        try:
            yield cur
            self._conn.commit()
        except BaseException:
            self._conn.rollback()
            raise
        finally:
            cur.close()

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init_schema(self) -> None:
        """Create the tables if they do not exist; refuse a store of a newer schema."""
        with self._transaction() as cur:
            for statement in SCHEMA:
                cur.execute(statement)
        found = self._rows("SELECT value FROM canary_history_meta WHERE key = 'schema_version'")
        if not found:
            with self._transaction() as cur:
                cur.execute(
                    self._sql("INSERT INTO canary_history_meta (key, value) VALUES ('schema_version', ?)"),
                    (str(SCHEMA_VERSION),),
                )
        elif int(found[0][0]) > SCHEMA_VERSION:
            raise HistoryError(
                f"{self.where}: history schema {found[0][0]} is newer than this canary's {SCHEMA_VERSION}"
            )

    # ------------------------------------------------------------------ writing

    def write(self, rows: RunRows) -> None:
        """Write one run atomically, replacing any earlier rows of the same run id."""
        run_id = rows.run.run_id
        with self._transaction() as cur:
            for table in _TABLES:
                cur.execute(self._sql(f"DELETE FROM {table} WHERE run_id = ?"), (run_id,))
            cur.execute(self._sql(f"INSERT INTO canary_history_runs VALUES ({_marks(11)})"), astuple(rows.run))
            if rows.cells:
                cur.executemany(
                    self._sql(f"INSERT INTO canary_history_cells VALUES ({_marks(8)})"),
                    [astuple(c) for c in rows.cells],
                )
            if rows.checks:
                cur.executemany(
                    self._sql(f"INSERT INTO canary_history_checks VALUES ({_marks(5)})"),
                    [astuple(c) for c in rows.checks],
                )
            if rows.metrics:
                cur.executemany(
                    self._sql(f"INSERT INTO canary_history_metrics VALUES ({_marks(5)})"),
                    [astuple(m) for m in rows.metrics],
                )
            self._insert_bisections(cur, rows.bisections)

    def _insert_bisections(self, cur: Any, rows: Sequence[BisectionRow]) -> None:
        if rows:
            cur.executemany(
                self._sql(f"INSERT INTO canary_history_bisections VALUES ({_marks(6)})"),
                [astuple(b) for b in rows],
            )

    def write_bisections(self, run_id: str, rows: Sequence[BisectionRow]) -> None:
        """Replace the bisections of a run already in the history (one transaction)."""
        if not self._rows("SELECT 1 FROM canary_history_runs WHERE run_id = ?", [run_id]):
            raise HistoryError(
                f"{self.where}: run {run_id} is not in the history, so its bisection is not recorded "
                "(canary history import RUN_DIR records both)"
            )
        with self._transaction() as cur:
            cur.execute(self._sql("DELETE FROM canary_history_bisections WHERE run_id = ?"), (run_id,))
            self._insert_bisections(cur, rows)

    # ------------------------------------------------------------------ reading

    def runs(self, config_name: str | None = None) -> list[RunInfo]:
        """Runs in time order (oldest first), optionally of one config."""
        sql = "SELECT run_id, config_name, started_at, cells_total, cells_failing, interrupted FROM canary_history_runs"
        params: list[object] = []
        if config_name:
            sql += " WHERE config_name = ?"
            params.append(config_name)
        sql += " ORDER BY started_at, run_id"
        return [RunInfo(r[0], r[1], r[2], int(r[3]), int(r[4]), bool(r[5])) for r in self._rows(sql, params)]

    def series(self, cell_id: str, check_name: str, metric: str, config_name: str | None = None) -> list[Point]:
        """A cell's metric over the runs, oldest first, with the cell's image and the check's verdict."""
        sql = (
            "SELECT m.run_id, r.started_at, c.image, c.image_ref, k.verdict, m.value "
            "FROM canary_history_metrics m "
            "JOIN canary_history_runs r ON r.run_id = m.run_id "
            "JOIN canary_history_cells c ON c.run_id = m.run_id AND c.cell_id = m.cell_id "
            "JOIN canary_history_checks k ON k.run_id = m.run_id AND k.cell_id = m.cell_id "
            "AND k.check_name = m.check_name "
            "WHERE m.cell_id = ? AND m.check_name = ? AND m.metric = ?"
        )
        params: list[object] = [cell_id, check_name, metric]
        if config_name:
            sql += " AND r.config_name = ?"
            params.append(config_name)
        sql += " ORDER BY r.started_at, m.run_id"
        return [Point(r[0], r[1], r[2], r[3], r[4], float(r[5])) for r in self._rows(sql, params)]

    def cell_ids(self) -> list[str]:
        """Every cell id in the history."""
        return [r[0] for r in self._rows("SELECT DISTINCT cell_id FROM canary_history_cells ORDER BY cell_id")]

    def metric_names(self) -> dict[str, list[str]]:
        """check -> the metric keys the history holds for it (sorted)."""
        rows = self._rows("SELECT DISTINCT check_name, metric FROM canary_history_metrics ORDER BY check_name, metric")
        out: dict[str, list[str]] = {}
        for check, metric in rows:
            out.setdefault(str(check), []).append(str(metric))
        return out

    def cells_of(self, run_id: str) -> dict[str, tuple[str, str, str]]:
        """cell id -> (verdict, image_ref, reason) of one run."""
        rows = self._rows(
            "SELECT cell_id, verdict, image_ref, reason FROM canary_history_cells WHERE run_id = ?", [run_id]
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def checks_of(self, run_id: str) -> dict[tuple[str, str], str]:
        """(cell, check) -> verdict of one run."""
        rows = self._rows("SELECT cell_id, check_name, verdict FROM canary_history_checks WHERE run_id = ?", [run_id])
        return {(r[0], r[1]): r[2] for r in rows}

    def metrics_of(self, run_id: str) -> dict[tuple[str, str, str], float]:
        """(cell, check, metric) -> value of one run."""
        rows = self._rows(
            "SELECT cell_id, check_name, metric, value FROM canary_history_metrics WHERE run_id = ?", [run_id]
        )
        return {(r[0], r[1], r[2]): float(r[3]) for r in rows}

    def bisections_of(self, run_id: str) -> list[BisectionRow]:
        """The bisected cells of one run, by cell id."""
        rows = self._rows(
            "SELECT run_id, cell_id, outcome, culprit, cell_runs, duration_s FROM canary_history_bisections "
            "WHERE run_id = ? ORDER BY cell_id",
            [run_id],
        )
        return [BisectionRow(r[0], r[1], r[2], r[3], int(r[4]), float(r[5])) for r in rows]

    def resolve_run(self, ref: str) -> str:
        """A run id from a full id, a unique prefix, or 'latest' / 'previous'."""
        runs = [r.run_id for r in self.runs()]
        if not runs:
            raise HistoryError(f"{self.where}: the history holds no runs (canary history import results/*)")
        if ref == "latest":
            return runs[-1]
        if ref == "previous":
            if len(runs) < 2:
                raise HistoryError(f"{self.where}: only one run in the history, no previous run")
            return runs[-2]
        if ref in runs:
            return ref
        matches = [r for r in runs if r.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise HistoryError(f"{self.where}: no run {ref!r} in the history ({len(runs)} runs)")
        raise HistoryError(f"{self.where}: run {ref!r} is ambiguous: {', '.join(matches[:5])}")

    def count_rows(self) -> int:
        """Rows of the metrics table."""
        return int(self._rows("SELECT COUNT(*) FROM canary_history_metrics")[0][0])


def _marks(count: int) -> str:
    return ", ".join("?" * count)


def sqlite_path(results_dir: Path, path: str | None = None) -> Path:
    """The SQLite file: `path` (relative to the results dir unless absolute), else the default name."""
    chosen = Path(path or DEFAULT_SQLITE_NAME)
    return chosen if chosen.is_absolute() else results_dir / chosen


def open_store(
    *,
    url: str | None = None,
    sqlite: Path | None = None,
    create: bool = True,
    connect_timeout_s: float = 10.0,
    password_env: str | None = None,
) -> HistoryStore:
    """Open (and create the tables of) the history: PostgreSQL when `url` is given, else SQLite.

    create=False: a missing SQLite file is an error (readers never leave an empty history behind).
    password_env names the variable holding PostgreSQL's password (export.history.password_env; the
    URL carries none); unset, libpq's own PGPASSWORD or ~/.pgpass apply.
    """
    if url:
        if not url.startswith(("postgresql://", "postgres://")):
            raise HistoryError(f"export.history.url must be a postgresql:// URL, got {url.split('@')[-1]!r}")
        import psycopg

        where = "postgresql://" + redact_url(url).split("@")[-1]  # never print a password
        password: str | None = None
        if password_env:
            try:
                password = from_env(password_env, "export.history.password_env")
            except MissingSecret as exc:
                raise HistoryError(f"cannot connect to the history database {where}: {exc}") from None
        try:
            timeout = max(1, int(connect_timeout_s))
            if password is None:
                conn = psycopg.connect(url, connect_timeout=timeout)
            else:  # a keyword wins over the URL's (which has none: the config refuses one)
                conn = psycopg.connect(url, connect_timeout=timeout, password=password)
        except psycopg.Error as exc:
            raise HistoryError(f"cannot connect to the history database {where}: {exc}") from exc
        store = HistoryStore(conn, placeholder="%s", where=where)
    else:
        if sqlite is None:
            raise HistoryError("open_store needs a PostgreSQL url or an SQLite path")
        if not create and not sqlite.is_file():
            raise HistoryError(f"no history at {sqlite} (record runs with `canary run`, or `canary history import`)")
        sqlite.parent.mkdir(parents=True, exist_ok=True)
        try:
            # the default rollback journal: WAL needs shared memory, which network volumes may not offer
            conn_lite = sqlite3.connect(sqlite, timeout=connect_timeout_s)
            conn_lite.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot open the history {sqlite}: {exc}") from exc
        store = HistoryStore(conn_lite, placeholder="?", where=str(sqlite))
    try:
        store.init_schema()
    except HistoryError:
        store.close()
        raise
    except Exception as exc:
        store.close()
        raise HistoryError(f"{store.where}: cannot create the history tables: {exc}") from exc
    return store
