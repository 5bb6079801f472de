"""The KV-transfer check: did KV really move between prefill and decode (NIXL counters)."""
