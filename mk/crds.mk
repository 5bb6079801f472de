# Vendored CRD schemas for the chart tests (tests/k8s/crds/): verify them, or refresh them from their
# pinned upstream releases. Included by the top-level Makefile.
#
#   make crds                     check tests/k8s/crds/*.yaml against tests/k8s/crds/SHA256SUMS (offline)
#   make crds CRDS_REFRESH=1      download the pinned releases' files again, then rewrite SHA256SUMS
#                                 (needs a network that reaches GitHub; none of the registries carries them)
#
# The pins (project, tag, file path in the project's repository) live here and nowhere else;
# tests/k8s/crds/README.md explains them.

CRDS_DIR := tests/k8s/crds
CRDS_REFRESH ?=
CRDS_PROMETHEUS_OPERATOR_REPO := prometheus-operator/prometheus-operator
CRDS_PROMETHEUS_OPERATOR_TAG := v0.93.0
CRDS_PROMETHEUS_OPERATOR_FILES := \
  example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml \
  example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml \
  example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml
CRDS_LWS_REPO := kubernetes-sigs/lws
CRDS_LWS_TAG := v0.10.0
CRDS_LWS_FILES := config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml
CRDS_RAW_BASE ?= https://raw.githubusercontent.com

.PHONY: crds

crds: ## verify the vendored CRD schemas (CRDS_REFRESH=1: download the pinned releases again first)
	@if [ -n "$(CRDS_REFRESH)" ]; then \
	  set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  for f in $(CRDS_PROMETHEUS_OPERATOR_FILES); do \
	    echo "== $(CRDS_PROMETHEUS_OPERATOR_REPO)@$(CRDS_PROMETHEUS_OPERATOR_TAG):$$f"; \
	    curl -fsSL --max-time 120 -o "$$tmp/$$(basename $$f)" \
	      "$(CRDS_RAW_BASE)/$(CRDS_PROMETHEUS_OPERATOR_REPO)/$(CRDS_PROMETHEUS_OPERATOR_TAG)/$$f"; \
	  done; \
	  for f in $(CRDS_LWS_FILES); do \
	    echo "== $(CRDS_LWS_REPO)@$(CRDS_LWS_TAG):$$f"; \
	    curl -fsSL --max-time 120 -o "$$tmp/$$(basename $$f)" "$(CRDS_RAW_BASE)/$(CRDS_LWS_REPO)/$(CRDS_LWS_TAG)/$$f"; \
	  done; \
	  cp "$$tmp"/*.yaml $(CRDS_DIR)/; \
	  (cd $(CRDS_DIR) && sha256sum *.yaml > SHA256SUMS); \
	  echo "refreshed $(CRDS_DIR); review the diff (git diff --stat $(CRDS_DIR))"; \
	fi
	cd $(CRDS_DIR) && sha256sum --check --strict --quiet SHA256SUMS
	@test "$$(cd $(CRDS_DIR) && ls *.yaml | sort)" = "$$(cut -c67- $(CRDS_DIR)/SHA256SUMS | sort)" \
	  || { echo "$(CRDS_DIR): *.yaml and SHA256SUMS list different files" >&2; exit 1; }
	@echo "$(CRDS_DIR): $$(wc -l < $(CRDS_DIR)/SHA256SUMS) CRD files match SHA256SUMS"
