#!/usr/bin/env bash
# Run a command in a process group of its own and end the whole group when this script gets
# SIGTERM, SIGINT or SIGHUP; exit with the command's status.
#
#   scripts/group.sh make -j3 test-pytest test-asv-1 test-asv-2
#
# `kill` of make reaches only make's own children: a recipe's shell dies and what it started
# (asv, its forkserver, pytest's workers) runs on under PID 1. `make test` starts its streams
# through this script, so one SIGTERM stops them all.
set -u
if [ $# -eq 0 ]; then
    echo "usage: scripts/group.sh COMMAND [ARG...]" >&2
    exit 2
fi
set -m # job control: the background job below leads a process group of its own
"$@" &
pid=$!
stop() {
    kill -TERM -- "-$pid" 2>/dev/null
}
trap stop TERM INT HUP
# `wait` returns early when a trapped signal arrives; wait until the group's leader has ended
while :; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2>/dev/null || break
done
exit "$rc"
