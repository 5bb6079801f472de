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

SETUP_EXTRA += chromium-tools

.PHONY: chromium-tools test-report CHROMIUM_FORCE

chromium-tools: $(CHROMIUM_STAMP) ## Debian's chromium for the report's browser test (cached)

# Rebuilt when the browser has gone (e.g. a fresh container).
$(CHROMIUM_STAMP): $(if $(shell command -v chromium),,CHROMIUM_FORCE)
	@mkdir -p $(dir $@)
	@$(STEP) chromium-tools "chromium (apt: $(CHROMIUM_PACKAGES))" '\
	  if command -v chromium > /dev/null 2>&1; then \
	    echo "already installed"; \
	  else \
	    mk/apt-install.sh $(CHROMIUM_PACKAGES); \
	  fi; \
	  command -v chromium > /dev/null || { echo "chromium missing after install" >&2; exit 1; }; \
	  timeout 60 chromium --version > $@.tmp'
	@mv $@.tmp $@

CHROMIUM_FORCE:

test-report: venv-dev chromium-tools ## report tests: summary.html in chromium at 1400/900 px, history comparison
	$(PY) -m pytest tests/report tests/unit/export/report $(PYTEST_ARGS)
