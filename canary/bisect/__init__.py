"""`canary bisect`: from "this cell is red" to "patch 5 of 8 did it".

search (the pure search over a judge), model (bisect.json and bisect.md), run (reading a run's
results directory, one cell rerun per step on a prefix of the candidate's series or on an image of a
range) and cli (the subcommand). Sits above canary.run: each step is a cell run of the runner.
"""
