"""Test support shared by the test suites and benches (not part of the installed canary package)."""
