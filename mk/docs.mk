# The documentation site: mkdocs.yml at the repository root, the pages under docs/ (material theme).
# Included by the top-level Makefile, which defines PY, TOOLS, PYTHON_BOOT and the `venv` target.
# mkdocs and mkdocs-material live in their own venv ($(DOCS_VENV)), installed --no-deps from the
# pinned requirements/tools-docs.txt like checkov's (mk/k8s.mk) and cached: a second run does nothing.
# The build is strict: a broken link or anchor, or a page left out of the nav, fails it.
# Some pages are generated from the code (docs/generate.py: the config, metrics and exit-code
# references, the architecture picture and layer table); docs-check fails when one is stale.
#
#   make docs-tools      mkdocs + mkdocs-material in $(DOCS_VENV) (part of `make test`, through docs-check)
#   make docs            mkdocs build --strict into $(DOCS_SITE)
#   make docs-generate   regenerate the generated pages (commit the result)
#   make docs-check      the generated pages are current and the site builds strictly (part of `make test`)
#   make docs-serve      serve the site on http://127.0.0.1:8008 while editing

TOOLS ?= .cache/tools
DOCS_VENV := $(TOOLS)/docs-venv
MKDOCS := $(DOCS_VENV)/bin/mkdocs
MKDOCS_VERSION := 1.6.1
DOCS_SITE := .cache/site
# Material 9.7+ prints a banner about MkDocs 2.0 on every build; it is not a warning of this site.
MKDOCS_ENV := NO_MKDOCS_2_WARNING=1

TEST_EXTRA += docs-check

.PHONY: docs-tools docs docs-generate docs-check docs-serve

docs-tools: $(MKDOCS) ## mkdocs + mkdocs-material in their own venv (pinned, cached)

$(MKDOCS): requirements/tools-docs.txt
	@echo "== mkdocs $(MKDOCS_VERSION) + mkdocs-material in their own venv ($(DOCS_VENV))"
	rm -rf $(DOCS_VENV)
	$(PYTHON_BOOT) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install --quiet --no-deps -r requirements/tools-docs.txt
	$(DOCS_VENV)/bin/pip check
	$(MKDOCS) --version | grep -q '^mkdocs, version $(MKDOCS_VERSION) ' \
	  || { echo "$@: expected mkdocs $(MKDOCS_VERSION), got $$($(MKDOCS) --version)" >&2; exit 1; }
	touch $@

docs: docs-tools ## build the documentation site strictly into .cache/site (a broken link fails)
	$(MKDOCS_ENV) $(MKDOCS) build --strict -d $(DOCS_SITE)

docs-generate: venv ## regenerate the pages generated from the code (docs/reference/*, the architecture picture)
	$(PY) docs/generate.py --write

docs-check: venv docs ## the generated pages are current and the site builds strictly
	$(PY) docs/generate.py --check

docs-serve: docs-tools ## serve the site on loopback while editing (Ctrl-C stops it)
	$(MKDOCS_ENV) $(MKDOCS) serve --strict -a 127.0.0.1:8008
