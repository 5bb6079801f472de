"""Plan: cells, the matrix and its reduction, GPU waves and the nightly rotation (pure, no I/O but state)."""
