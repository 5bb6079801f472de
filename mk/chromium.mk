# A real headless browser for the report tests: tests/report/test_report_browser.py loads
# summary.html in Debian's `chromium` at 1400 and 900 px wide, takes screenshots and checks that
# the page never scrolls sideways. Installed with apt-get, idempotent and cached like
# mk/postgres.mk: `command -v chromium` first, apt-get update only when apt does not know the
# package or the install fails. The stamp is $(TOOLS)/chromium.stamp (.cache/tools).
#
#   make chromium-tools   install chromium (part of `make setup`, so of `make test`)
#   make test-report      the report tests: the browser check + the comparison with the history

TOOLS ?= .cache/tools

CHROMIUM_PACKAGES := chromium
CHROMIUM_STAMP := $(TOOLS)/chromium.stamp
CHROMIUM_APT_SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

SETUP_EXTRA += chromium-tools

.PHONY: chromium-tools test-report CHROMIUM_FORCE

chromium-tools: $(CHROMIUM_STAMP) ## Debian's chromium for the report's browser test (cached)

# Rebuilt when the browser has gone (e.g. a fresh container).
$(CHROMIUM_STAMP): $(if $(shell command -v chromium),,CHROMIUM_FORCE)
	@mkdir -p $(dir $@)
	@if command -v chromium > /dev/null 2>&1; then \
	  echo "== chromium already installed"; \
	else \
	  echo "== apt-get install $(CHROMIUM_PACKAGES) (~1 min)"; \
	  if ! apt-cache show $(CHROMIUM_PACKAGES) > /dev/null 2>&1; then \
	    echo "== apt-get update (apt does not know $(CHROMIUM_PACKAGES) yet)"; \
	    $(CHROMIUM_APT_SUDO) apt-get update -qq; \
	  fi; \
	  DEBIAN_FRONTEND=noninteractive $(CHROMIUM_APT_SUDO) apt-get install -y -qq --no-install-recommends $(CHROMIUM_PACKAGES) > /dev/null \
	  || { echo "== apt-get update (install failed: package lists out of date?) and retry"; \
	       $(CHROMIUM_APT_SUDO) apt-get update -qq && \
	       DEBIAN_FRONTEND=noninteractive $(CHROMIUM_APT_SUDO) apt-get install -y -qq --no-install-recommends $(CHROMIUM_PACKAGES) > /dev/null; }; \
	fi
	@command -v chromium > /dev/null || { echo "$@: chromium missing after install" >&2; exit 1; }
	@timeout 60 chromium --version > $@.tmp
	@mv $@.tmp $@
	@cat $@

CHROMIUM_FORCE:

test-report: venv chromium-tools ## report tests: summary.html in chromium at 1400/900 px, history comparison
	$(PY) -m pytest tests/report tests/unit/export/report $(PYTEST_ARGS)
