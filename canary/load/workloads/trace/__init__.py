"""The trace workload: its settings (settings.py) beside its requests (requests.py)."""
