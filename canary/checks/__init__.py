"""Checks, one folder each: `checks/<name>/check.py` registers it, `settings.py` declares its config section.

This package imports nothing: canary.config finds the folders on its path (and imports only their
settings modules, which sit in the config layer); canary.checks.base.specs() imports every
`check.py` (registering them) on first use.
"""
