"""A tiny model the canary builds itself, and the GSM8K-format data it is trained on.

``dataset`` generates the arithmetic word problems (stdlib only, importable from the
controller venv); ``build`` trains the model and needs the engine venv (torch, transformers).
"""
