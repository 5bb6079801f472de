"""The local target (`target.kind: local`): real vLLM processes on this machine. `settings.py` declares the kind and
its `target.local` section (the config layer: nothing here is imported with it), `target.py` implements it."""
