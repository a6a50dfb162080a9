#!/usr/bin/env bash
# What the test command must leave as it found it, one fact per line, sorted:
#
#   postmaster PID DATADIR   a running PostgreSQL server (a `postgres` process whose parent is not one)
#   etc FILE                 a file under /etc/postgresql
#   tmp PATH                 a /tmp/loopx-* entry
#
#     bash scripts/machine-state.sh > before; bash scripts/test.sh; bash scripts/machine-state.sh | comm -13 before -
#
# prints what the test command left behind (.ci/run does this after the suite). Servers are
# matched by PID and data directory, so connections to a server that was already running (its
# backend processes come and go) are not counted.
set -euo pipefail
export LC_ALL=C
{
    ps -eo pid=,ppid=,comm= | awk '
        { comm[$1] = $3; parent[$1] = $2 }
        END { for (p in comm) if (comm[p] == "postgres" && comm[parent[p]] != "postgres") print p }' |
    while read -r pid; do
        datadir=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | sed -n '/^-D$/{n;p;q}') || true
        echo "postmaster $pid ${datadir:-?}"
    done
    if [ -d /etc/postgresql ]; then find /etc/postgresql -type f | sed 's/^/etc /'; fi
    for path in /tmp/loopx-*; do if [ -e "$path" ]; then echo "tmp $path"; fi; done
} | sort
