#!/usr/bin/env bash
# What the test command must leave as it found it, one fact per line, sorted:
#
#   postmaster PID DATADIR   a running PostgreSQL server (a `postgres` process whose parent is
#                            not `postgres`, `initdb` or `pg_ctl`)
#   etc FILE                 a file under /etc/postgresql
#   tmp PATH                 a /tmp/loopx-* entry
#   shm FILE                 a PostgreSQL shared memory segment in /dev/shm (a killed server's;
#                            the machine's own server, run as `postgres`, is not counted)
#
#     bash scripts/machine-state.sh > before; bash scripts/test.sh; bash scripts/machine-state.sh | comm -13 before -
#
# prints what the test command left behind (.ci/run does this after the suite). Servers are
# matched by PID and data directory, so connections to a server that was already running (its
# backend processes come and go) are not counted. A throwaway test server (loopx-pg-*) whose
# owner.pid names a live process belongs to a test session still running (on a shared machine,
# someone else's) and is not listed; once its owner is gone it is an orphan, and listed.
set -euo pipefail
export LC_ALL=C
live_session() {  # DIR is a loopx-pg-* dir whose owner.pid is a running process
    case "$1" in */loopx-pg-*) ;; *) return 1 ;; esac
    local owner
    owner=$(cat "$1/owner.pid" 2>/dev/null) || return 1
    [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null
}
{
    ps -eo pid=,ppid=,comm= | awk '
        { comm[$1] = $3; parent[$1] = $2 }
        END { for (p in comm) if (comm[p] == "postgres" && comm[parent[p]] != "postgres" && comm[parent[p]] != "initdb" && comm[parent[p]] != "pg_ctl") print p }' |
    while read -r pid; do
        args=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null) || true
        [ -n "$args" ] || continue  # it ended since ps listed it
        datadir=$(sed -n '/^-D$/{n;p;q}' <<< "$args")
        live_session "${datadir%/data}" || echo "postmaster $pid ${datadir:-?}"
    done
    if [ -d /etc/postgresql ]; then find /etc/postgresql -type f | sed 's/^/etc /'; fi
    for path in /tmp/loopx-*; do if [ -e "$path" ] && ! live_session "$path"; then echo "tmp $path"; fi; done
    if [ -d /dev/shm ]; then
        if id postgres >/dev/null 2>&1; then not_system=(! -user postgres); else not_system=(); fi
        find /dev/shm -maxdepth 1 -name 'PostgreSQL.*' "${not_system[@]}" | sed 's/^/shm /'
    fi
} | sort
