"""The block_residues workload: its settings (settings.py) beside its requests (requests.py)."""
