#!/usr/bin/env bash
# One timed, logged install step: the only place the Makefile's install recipes print anything.
#
#   mk/step.sh NAME TITLE COMMAND
#
# Runs COMMAND (a bash -eu -o pipefail string) with its stdout and stderr in $STEP_LOG_DIR/NAME.log
# (default .cache/logs) and prints one line, `== TITLE ... 142 s`. On failure it prints the log's
# path and its last 30 lines to stderr and exits with the command's status. A log from an earlier
# run of the same step is replaced.
set -euo pipefail

if [ "$#" -ne 3 ]; then
  echo "usage: mk/step.sh NAME TITLE COMMAND" >&2
  exit 2
fi
name=$1 title=$2 command=$3
log_dir=${STEP_LOG_DIR:-.cache/logs}
mkdir -p "$log_dir"
log="$log_dir/$name.log"

# Under `make -j` (MAKEFLAGS names a job server) steps run side by side: a line when one starts and
# a whole line when it ends, so two steps never share a line.
parallel=0
case " ${MAKEFLAGS:-} " in *jobserver*|*" -j"*) parallel=1 ;; esac
if [ "$parallel" = 1 ]; then
  printf '== %s (started)\n' "$title"
  end_prefix="== $title: "
else
  printf '== %s ... ' "$title"
  end_prefix=""
fi
start=$(date +%s)
rc=0
bash -eu -o pipefail -c "$command" > "$log" 2>&1 < /dev/null || rc=$?
seconds=$(( $(date +%s) - start ))
if [ "$rc" -eq 0 ]; then
  printf '%s%d s\n' "$end_prefix" "$seconds"
  exit 0
fi
printf '%sFAILED after %d s (exit %d)\n' "$end_prefix" "$seconds" "$rc"
{
  echo "$title failed; full log: $log (last 30 lines below)"
  tail -n 30 "$log" | sed 's/^/  | /'
} >&2
exit "$rc"
