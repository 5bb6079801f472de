"""Shared primitives below every stage: atomic writes, strict YAML models, ports, /metrics, statistics, SVG."""
