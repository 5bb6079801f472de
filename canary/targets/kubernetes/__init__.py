"""The Kubernetes target (`target.kind: kubernetes`): the helm/vllm-pd chart's cells, their pod state, waves inside
the GPU budget, chart values. `settings.py` declares the kind and its `target.kubernetes` section, `target.py`
implements it."""
