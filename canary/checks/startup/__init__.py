"""The startup check: time to ready, failure signatures, start phases, live config and KV layout gates."""
