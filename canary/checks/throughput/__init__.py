"""The throughput check: load runs judged against floors and the baseline image; host-load validity."""
