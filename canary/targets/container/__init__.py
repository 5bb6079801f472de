"""The container target (`target.kind: container`): engines from their images through docker or podman.
`settings.py` declares the kind and its `target.container` section, `target.py` implements it."""
