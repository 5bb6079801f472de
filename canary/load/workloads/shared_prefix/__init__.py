"""The shared_prefix workload: its settings (settings.py) beside its requests (requests.py)."""
