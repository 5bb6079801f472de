"""vllm-canary: deploy vLLM prefill/decode pairs across a matrix and check every cell."""

__version__ = "0.1.0"
