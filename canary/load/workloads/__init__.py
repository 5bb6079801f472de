"""Workload kinds, one folder each: `settings.py` declares the kind's fields, `requests.py` generates its requests.

This package imports nothing: canary.config.workloads finds the folders on its path and imports their
settings modules (which sit in the config layer: canary.LAYERS), canary.load.shapes imports their
`requests.py` (each registers its generator) on first use.
"""
