# Real PostgreSQL for the history tests: tests/history start a throwaway cluster
# (initdb + pg_ctl in a temp dir, a free loopback port, trust auth on 127.0.0.1 only) once per
# test session and stop it at the end. Debian's `postgresql` package (15 on bookworm), installed
# with apt-get, idempotent and cached like mk/prometheus.mk: nothing is started as a service and
# the package's own cluster is not used. As root, the tests run the server as the `postgres` user
# the package creates (initdb refuses root). The stamp is $(TOOLS)/postgres.stamp (.cache/tools).
#
#   make postgres-tools   install the server binaries (part of `make setup`)
#   make test-history     history tests against the real server + the SQLite/unit history tests
#   make bench-history    history benchmark at 100k rows (results/bench/history-bench-*.json)

TOOLS ?= .cache/tools

# The newest installed server's bin directory, exported so tests/history/conftest.py finds it.
PG_BINDIR ?= $(lastword $(sort $(wildcard /usr/lib/postgresql/*/bin)))
export PG_BINDIR

PG_PACKAGES := postgresql
PG_STAMP := $(TOOLS)/postgres.stamp

SETUP_EXTRA += postgres-tools

.PHONY: postgres-tools test-history PG_FORCE

postgres-tools: $(PG_STAMP) ## PostgreSQL server binaries for the history tests (Debian package, cached)

# Rebuilt when the binaries have gone (e.g. a fresh container).
$(PG_STAMP): $(if $(wildcard $(PG_BINDIR)/initdb),,PG_FORCE)
	@mkdir -p $(dir $@)
	@$(STEP) postgres-tools "PostgreSQL server (apt: $(PG_PACKAGES))" '\
	  if ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1; then \
	    echo "already installed"; \
	  else \
	    mk/apt-install.sh $(PG_PACKAGES); \
	  fi; \
	  bindir=$$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1); \
	  for bin in initdb pg_ctl postgres; do \
	    test -x $$bindir/$$bin || { echo "$$bindir/$$bin missing after install" >&2; exit 1; }; \
	  done; \
	  $$bindir/postgres --version > $@.tmp'
	@mv $@.tmp $@

PG_FORCE:

test-history: venv-dev postgres-tools ## history tests: real PostgreSQL (tests/history) + SQLite and statistics
	$(PY) -m pytest tests/history tests/unit/export/history $(PYTEST_ARGS)

# Cost of history queries at 100k metric rows, SQLite and PostgreSQL (tests/bench/history_bench.py):
# writes, one series, one run's numbers, change points of one cell, the run hook.
HISTORY_BENCH_ARGS ?=

.PHONY: bench-history

bench-history: venv-dev postgres-tools ## history benchmark at 100k rows (results/bench/history-bench-*.json + table)
	$(PY) tests/bench/history_bench.py --rows 100000 --out $(BENCH_OUT) $(HISTORY_BENCH_ARGS)
