"""The Kubernetes target: the helm/vllm-pd chart's cells, their pod state, waves inside the GPU budget, chart values."""
