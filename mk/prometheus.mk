# Real Prometheus, promtool and Pushgateway for the export tests, the dashboards and the alert rules.
# Included by the top-level Makefile, which defines PY, TOOLS and the `venv` target.
# Debian packages (prometheus 2.42, prometheus-pushgateway 1.5.1 on bookworm), installed with
# apt-get, idempotent and cached: a second run only checks that the binaries still exist.
# `apt-get update` runs only when apt does not know the packages yet. Nothing is started as a
# service: the tests start their own processes on free loopback ports. The stamp is
# $(TOOLS)/prometheus.stamp (.cache/tools).
#
#   make prometheus-tools   install the binaries (part of `make setup`)
#   make test-prometheus    integration tests against real Prometheus + Pushgateway, promtool rule tests
#   make dashboards         regenerate configs/dashboards/*.json from canary/export/prometheus/dashboards/
#   make alerts-check       promtool check rules + promtool test rules

TOOLS ?= .cache/tools

# Binary paths, exported so the tests (tests/prometheus/conftest.py) find them.
PROMETHEUS_BIN ?= /usr/bin/prometheus
PROMTOOL_BIN ?= /usr/bin/promtool
PUSHGATEWAY_BIN ?= /usr/bin/prometheus-pushgateway
export PROMETHEUS_BIN PROMTOOL_BIN PUSHGATEWAY_BIN

PROM_PACKAGES := prometheus prometheus-pushgateway
PROM_STAMP := $(TOOLS)/prometheus.stamp

SETUP_EXTRA += prometheus-tools

.PHONY: prometheus-tools test-prometheus dashboards alerts-check

prometheus-tools: $(PROM_STAMP) ## Prometheus, promtool, Pushgateway (Debian packages, cached)

# The stamp records the versions; it is rebuilt when a binary has gone (e.g. a fresh container).
$(PROM_STAMP): $(if $(wildcard $(PROMETHEUS_BIN)),,PROM_FORCE) $(if $(wildcard $(PROMTOOL_BIN)),,PROM_FORCE) $(if $(wildcard $(PUSHGATEWAY_BIN)),,PROM_FORCE)
	@mkdir -p $(dir $@)
	@$(STEP) prometheus-tools "Prometheus, promtool, Pushgateway (apt: $(PROM_PACKAGES))" '\
	  if [ -x "$(PROMETHEUS_BIN)" ] && [ -x "$(PROMTOOL_BIN)" ] && [ -x "$(PUSHGATEWAY_BIN)" ]; then \
	    echo "already installed"; \
	  else \
	    mk/apt-install.sh $(PROM_PACKAGES); \
	  fi; \
	  for bin in $(PROMETHEUS_BIN) $(PROMTOOL_BIN) $(PUSHGATEWAY_BIN); do \
	    test -x $$bin || { echo "$$bin missing after install" >&2; exit 1; }; \
	  done; \
	  { $(PROMETHEUS_BIN) --version 2>&1 | head -1; $(PUSHGATEWAY_BIN) --version 2>&1 | head -1; } > $@.tmp'
	@mv $@.tmp $@

.PHONY: PROM_FORCE
PROM_FORCE:

test-prometheus: venv-dev prometheus-tools ## integration tests against real Prometheus + Pushgateway
	$(PY) -m pytest tests/prometheus tests/unit/export/prometheus/test_schema.py tests/unit/export/report $(PYTEST_ARGS)

dashboards: venv-dev ## regenerate configs/dashboards/*.json (commit the result)
	$(PY) -m canary.export.prometheus.dashboards --out configs/dashboards

alerts-check: prometheus-tools ## promtool check rules + test rules on configs/alerts
	$(PROMTOOL_BIN) check rules configs/alerts/canary-rules.yaml
	cd configs/alerts/tests && $(PROMTOOL_BIN) test rules *.yaml
