"""The endpoint target (`target.kind: endpoint`): a server or P/D router that already runs. `settings.py`
declares the kind and its `target.endpoint` section, `target.py` implements it."""
