#!/usr/bin/env bash
# Run a command in a session of its own and end every process of that session when this
# script gets SIGTERM, SIGINT or SIGHUP; exit with the command's status.
#
#   scripts/group.sh make -j3 test-pytest test-asv-1 test-asv-2
#
# `kill` of make reaches only make's own children: a recipe's shell dies and what it started
# (asv, pytest's workers) runs on under PID 1. Killing a process group is not enough either:
# asv puts its forkserver in a group of its own. A session holds them all (a process that
# starts a session of its own, as the tests' run_group does, is stopped by whoever started
# it). `make test` starts its streams through this script, so one SIGTERM stops them all.
set -u
if [ $# -eq 0 ]; then
    echo "usage: scripts/group.sh COMMAND [ARG...]" >&2
    exit 2
fi
if ! command -v setsid > /dev/null || ! command -v pkill > /dev/null; then
    echo "scripts/group.sh: needs setsid and pkill (util-linux, procps)" >&2
    exit 2
fi
# A background job of a script ignores SIGINT; restore it, so that the command's Python
# processes still turn Ctrl-C into KeyboardInterrupt. setsid then makes this process (not
# a group leader) the leader of a new session, without forking: its PID is the session's ID.
(
    trap - INT QUIT
    exec setsid "$@"
) &
pid=$!
stop() {
    pkill -TERM -s "$pid" 2>/dev/null
}
trap stop TERM INT HUP
# `wait` returns early when a trapped signal arrives; wait until the session's leader has ended
while :; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2>/dev/null || break
done
exit "$rc"
