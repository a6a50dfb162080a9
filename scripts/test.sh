#!/usr/bin/env bash
# Install everything LoopX's tests need, then run them:
#
#     bash scripts/test.sh [pytest arguments]
#
# 1. System packages from Debian (PostgreSQL, Chromium and its driver, git, jq) when they are
#    missing and this machine can install them (root or sudo with apt-get). Without them the
#    PostgreSQL and browser tests are skipped, and pytest says so.
# 2. A virtualenv in .venv with LoopX, its test and postgres extras, and the capability plugins
#    in plugins/, all editable.
# 3. A local PostgreSQL server (scripts/postgres.sh) unless LOOPX_TEST_POSTGRES_URL is set.
# 4. pytest over the core and plugin suites.
#
# LOOPX_TEST_SYSTEM=0 skips steps 1 and 3 (no system changes): the suite then runs on SQLite only.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "test.sh: $*" >&2; }

SYSTEM=${LOOPX_TEST_SYSTEM:-1}
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=sudo; fi
can_install() { [ "$SYSTEM" = 1 ] && command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; }

want=()
command -v git >/dev/null || want+=(git)
command -v jq >/dev/null || want+=(jq)
command -v chromium >/dev/null || want+=(chromium)
command -v chromedriver >/dev/null || want+=(chromium-driver)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || want+=(postgresql)
if [ ${#want[@]} -gt 0 ]; then
    if can_install; then
        log "installing from Debian's packages: ${want[*]}"
        export DEBIAN_FRONTEND=noninteractive
        $SUDO apt-get update -qq >&2
        $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >&2
    else
        log "not installing ${want[*]} (no root/sudo, or LOOPX_TEST_SYSTEM=0): tests that need them skip"
    fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    "$PY" -m venv .venv
fi
log "installing LoopX and the repository's plugins into .venv"
.venv/bin/python -m pip install -q --upgrade pip >&2 || true
.venv/bin/python -m pip install -q -e '.[test,postgres]' >&2
# The capabilities shipped here. The example third-party plugin (examples/plugins/) is not
# installed: it offers its actions to every goal, as the seed walkthrough wants; its tests and
# the walkthrough install it where they need it.
for plugin in plugins/*/; do
    [ -f "$plugin/pyproject.toml" ] && .venv/bin/python -m pip install -q -e "$plugin" >&2
done

if [ -z "${LOOPX_TEST_POSTGRES_URL:-}" ] && [ "$SYSTEM" = 1 ] && [ "$(id -u)" = 0 ]; then
    if url=$(bash scripts/postgres.sh); then
        export LOOPX_TEST_POSTGRES_URL=$url
        log "PostgreSQL tests run against $url"
    else
        log "could not start PostgreSQL: its tests skip"
    fi
fi
[ -n "${LOOPX_TEST_POSTGRES_URL:-}" ] || log "LOOPX_TEST_POSTGRES_URL is not set: PostgreSQL tests are SKIPPED"

export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest -rs "$@"
