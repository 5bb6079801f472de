"""Read facts from vLLM's own source (the pinned sdist), without importing vLLM or CUDA code.

- `tree`: the pinned sdist (version and sha256 from mk/k8s.mk) or an installed vllm package, read file by file.
- `pyast`: parse modules, resolve classes and their bases, read static return values and class attributes.
- `backends`: per attention backend: kernel block sizes, KV cache dtypes, MLA, derived from the source.
- `messages`: the log/error message templates in the source, filled into sample lines for regexes.
- `catalog_check`: configs/backends.yaml against what `backends` derives (`canary catalog --check/--write`).
"""
