# The seeded-fault selftest: proves the canary catches what it exists for.
# Included by the top-level Makefile (PY, setup). canary/selftest/ runs configs/selftest.yaml and
# configs/selftest-families.yaml (the KV-family faults' matrix) clean (3 times each) and once per
# fault of tests/faults/faults.yaml, each fault applied to a copy of the engine's vllm
# (canary/images/overlay.py, cached under .cache/overlays), through the real pipeline.
#
#   make selftest                                    everything (~20-40 min on 2 shared cores)
#   make selftest SELFTEST_ARGS="--fault 02 --clean-runs 0"   one fault, no clean runs

SELFTEST_ARGS ?=

.PHONY: selftest

selftest: setup ## seeded faults: a clean run x3 and one run per fault; fails on a miss or a false alarm
	$(PY) -m canary.selftest $(SELFTEST_ARGS)
