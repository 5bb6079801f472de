"""`canary bisect`: from "this cell is red" to "patch 5 of 8 did it".

search (the pure search over a judge), model (writing bisect.json, bisect.md and bisect.prom; the
file's model is canary.judge.bisection, which the HTML report and the history read), run (reading a
run's results directory, one cell rerun per step on a prefix of the candidate's series or on an
image of a range, then summary.html and the history again), auto (what `canary run` bisects itself
with `bisect.enabled`) and cli (the subcommand). Sits above canary.run: each step is a cell run of
the runner.
"""
