"""`python -m canary.selftest`: prove the canary catches what it exists for (seeded faults).

Like mutation testing: real bugs, one per bug class the canary was built for, are planted into
the real engine (patch series under tests/faults/, applied to a copy of the engine's vllm by the
local target: canary.images.overlay), and each is run through the real pipeline (plan -> deploy -> check
-> judge, `canary.run.cells.execute`) with configs/selftest.yaml. A clean run (three times by
default) must raise no alarm; every fault must make its expected check fail.

How a fault's run is derived from the selftest config (see tests/faults/faults.yaml):
- the image under test is the config's (single, clean) image with `patches` set to the fault's
  series, keyed `fault-<id>`;
- `config` names another selftest config to derive it from (configs/selftest-families.yaml for the
  KV-family faults), `models` the models of it that run; every config a selected fault uses runs
  clean as well (a false alarm on its cells must show);
- `topologies` limits the cells; `checks` limits the checks (startup always runs);
- `baseline_image: true` also deploys the clean image, as the config's baseline, so the
  throughput check's regression gates compare the faulty cell with the clean one measured
  minutes earlier on the same machine (see FAULTS_FILE for why).

Time to verdict: from the start of the fault's run to the moment the first expected check
reported its failing verdict (taken from the runner's progress lines; the end of the cell when
they cannot be matched). Results: every run's results.json (and the usual views) under
OUT/<run>/, the summary in OUT/selftest.json, the table on stdout. Exit 0 when every fault was
detected and no clean run raised an alarm, 1 otherwise, 2 on configuration errors.
"""
