"""The parity check: KV fidelity of P/D against its aggregated control (null-arm calibrated); drift across images."""
