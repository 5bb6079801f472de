"""The lifecycle check: a P/D pair's prefill server restarts while decode keeps serving (issue 40 item 5)."""
