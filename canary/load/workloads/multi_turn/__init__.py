"""The multi_turn workload: its settings (settings.py) beside its requests (requests.py)."""
