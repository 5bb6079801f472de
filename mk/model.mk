# The tiny model the canary serves on CPU (canary/model): a 2-layer Llama trained here on
# generated GSM8K-format arithmetic problems. Included by the top-level Makefile, which defines
# ENGINE_PY and the `engine-venv` target.
#
#   make model        build it (~2 min on 2 cores) into $(MODEL_ROOT)/<content hash>/, or reuse it,
#                     and point $(MODEL_ROOT)/$(MODEL_NAME) at it (`builtin:tiny` in configs)
#   make model-path   print that directory (exit 1 if not built yet); no torch needed
#
# The directory name hashes the sources of canary/model/{dataset,params,build}.py and every
# build parameter, so an edit selects a fresh build and an unchanged tree reuses the cached one.
# Other targets can use $(MODEL_DIR) (evaluated lazily, after `model` has run).

PYTHON_BOOT ?= python3.11
MODEL_ROOT ?= .cache/models
MODEL_SEED ?= 0
MODEL_NAME ?= tiny
MODEL_ENV := env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$(CURDIR)
MODEL_DIR = $(shell $(MODEL_ENV) $(PYTHON_BOOT) -m canary.model.params --out-root $(MODEL_ROOT) --seed $(MODEL_SEED))

SETUP_EXTRA += model model-families

.PHONY: model model-path model-families model-prebuilt

# Nothing to do (and nothing printed) when the content-addressed directory is complete and
# $(MODEL_ROOT)/$(MODEL_NAME) points at it. Else the build shipped in canary/model/prebuilt/ when its name is
# the current sources' cache key (canary/model/prebuilt.py: unpacked in a second, no venv needed; off with
# MODEL_PREBUILT=0), else a timed, logged build in the engine venv (mk/step.sh, STEP; ~2 min on 2 cores).
MODEL_PREBUILT ?= 1
model: ## build (or reuse) the tiny model into $(MODEL_ROOT)/$(MODEL_NAME)
	@dir="$$($(MODEL_ENV) $(PYTHON_BOOT) -m canary.model.params --out-root $(MODEL_ROOT) --seed $(MODEL_SEED))" \
	  && [ "$$(readlink -f $(MODEL_ROOT)/$(MODEL_NAME))" = "$$dir" ] \
	  || { [ "$(MODEL_PREBUILT)" = 1 ] \
	       && $(MODEL_ENV) $(PYTHON_BOOT) -m canary.model.prebuilt --shipped --out-root $(MODEL_ROOT) --seed $(MODEL_SEED) >/dev/null \
	       && $(STEP) model "tiny model ($(MODEL_ROOT)/$(MODEL_NAME)) from canary/model/prebuilt" \
	         '$(MODEL_ENV) $(PYTHON_BOOT) -m canary.model.prebuilt --out-root $(MODEL_ROOT) --seed $(MODEL_SEED) --link $(MODEL_NAME)'; } \
	  || { $(MAKE) --no-print-directory engine-venv \
	       && $(STEP) model "tiny model ($(MODEL_ROOT)/$(MODEL_NAME))" \
	         '$(MODEL_ENV) $(ENGINE_PY) -m canary.model.build --out-root $(MODEL_ROOT) --seed $(MODEL_SEED) --link $(MODEL_NAME)'; }

model-prebuilt: ## ship the built tiny model in canary/model/prebuilt/ (after an edit of its recipe)
	$(MAKE) --no-print-directory model MODEL_PREBUILT=0
	$(MODEL_ENV) $(PYTHON_BOOT) -m canary.model.prebuilt --pack --out-root $(MODEL_ROOT) --seed $(MODEL_SEED)

model-path: ## print the tiny model's directory (exit 1 if not built yet)
	@$(MODEL_ENV) $(PYTHON_BOOT) -m canary.model.params --out-root $(MODEL_ROOT) --seed $(MODEL_SEED)

# The tiny random-weight model of each KV family (canary/model/family_params.py: builtin:tiny-gemma3,
# builtin:tiny-deepseek-v3, builtin:tiny-qwen3-next, builtin:tiny-nemotron-h), sharing the tiny model's
# tokenizer. Cached by a hash of their sources, the shape and the tiny model's key; nothing to do (and
# nothing printed) when every one is built and linked.
model-families: model engine-venv ## build (or reuse) the KV family models into $(MODEL_ROOT)/<family name>
	@$(MODEL_ENV) $(PYTHON_BOOT) -m canary.model.family_params --out-root $(MODEL_ROOT) --seed $(MODEL_SEED) --linked \
	  || $(STEP) model-families "KV family models ($(MODEL_ROOT)/tiny-*)" \
	       '$(MODEL_ENV) $(ENGINE_PY) -m canary.model.families --out-root $(MODEL_ROOT) --seed $(MODEL_SEED) --link'
