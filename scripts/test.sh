#!/usr/bin/env bash
# Install what LoopX's tests need, then run them — leaving the machine as it was found:
#
#     bash scripts/test.sh [pytest arguments]           # everything, as CI runs it
#     bash scripts/test.sh --quick [pytest arguments]   # the quick tier, before each commit
#
# 1. System packages from Debian (PostgreSQL's server binaries, Chromium and its driver, git,
#    jq) when they are missing. The script names them first, and installs them only as root or
#    with passwordless sudo; otherwise the tests that need them are skipped, and pytest says so.
#    Debian's postgresql package creates and starts a cluster "main" when it is installed: the
#    script drops a cluster that this very install created (never one that was there before).
# 2. A virtualenv in .venv with LoopX, its test and postgres extras, and the capability plugins
#    in plugins/, all editable.
# 3. The real agent CLIs the executor tests drive (Claude Code, Codex; pinned versions), with
#    npm into ${XDG_CACHE_HOME:-~/.cache}/loopx-test/agents, reused while the versions match;
#    skipped, saying so, without npm. LOOPX_TEST_AGENTS_DIR names their bin directory.
# 4. pytest over the core and plugin suites. PostgreSQL tests run on a throwaway server the
#    session starts in a temp dir (tests/pg_server.py) and deletes at its end, or on
#    LOOPX_TEST_POSTGRES_URL if you set it (then nothing is started).
#
#    Tests run in parallel (pytest-xdist): the quick tier one worker per core, the full suite one
#    more than that (its tests wait on the processes they start about a third of the time), up
#    to 4 (LOOPX_TEST_JOBS=N to choose; 1 runs them in this process). Each worker has its own throwaway PostgreSQL server.
#
# --quick: the tests that need no PostgreSQL, browser or real agent CLI and are not marked slow
# (pytest -m "not postgres and not browser and not agents and not slow"; CONTRIBUTING.md,
# "Tests"), and no step 1 or 3: nothing is installed outside the checkout. A test that reaches
# for one of those without its marker fails, saying which marker it lacks.
#
# LOOPX_TEST_SYSTEM=0 skips steps 1 and 3's download (nothing installed outside the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "test.sh: $*" >&2; }

QUICK=0
if [ "${1:-}" = --quick ]; then
    QUICK=1
    shift
fi
SYSTEM=${LOOPX_TEST_SYSTEM:-1}
[ "$QUICK" = 0 ] || SYSTEM=0
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=sudo; fi
can_install() { [ "$SYSTEM" = 1 ] && command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; }
clusters() { ls -d /etc/postgresql/*/*/ 2>/dev/null || true; }

want=()
command -v git >/dev/null || want+=(git)
command -v jq >/dev/null || want+=(jq)
command -v chromium >/dev/null || want+=(chromium)
command -v chromedriver >/dev/null || want+=(chromium-driver)
command -v bwrap >/dev/null || want+=(bubblewrap)  # every confined step's world (loopx/sandbox/world.py)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || want+=(postgresql)
if [ ${#want[@]} -gt 0 ]; then
    if can_install; then
        log "installing from Debian's packages: ${want[*]}"
        before=$(clusters)
        export DEBIAN_FRONTEND=noninteractive
        $SUDO apt-get update -qq >&2
        $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >&2
        # The tests need only the server binaries. A cluster the package's install script just
        # created (and started) is dropped again, so no server keeps running and /etc/postgresql
        # holds what it held before.
        for dir in $(clusters); do
            case "$before" in *"$dir"*) continue ;; esac
            version=$(basename "$(dirname "$dir")") name=$(basename "$dir")
            log "dropping the cluster $version/$name that installing postgresql just created"
            $SUDO pg_dropcluster --stop "$version" "$name" >&2
        done
    else
        log "would install from Debian's packages: ${want[*]} — not installing (needs root or passwordless" \
            "sudo, and LOOPX_TEST_SYSTEM=1): the tests that need them skip"
    fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    "$PY" -m venv .venv
fi
# The installs are editable, so a .venv made from the same pyproject files already runs this
# tree's code: it is reused (five pip runs cost ~25 s, a fifth of the quick tier's budget). What
# it was made from is kept in .venv/loopx-installed; another pyproject (dependencies, entry
# points) or interpreter installs again.
installed_from() { cat pyproject.toml plugins/*/pyproject.toml; .venv/bin/python -V; }
if [ "$(installed_from | sha256sum)" = "$(cat .venv/loopx-installed 2>/dev/null)" ]; then
    log "reusing .venv: installed from these pyproject files (.venv/loopx-installed)"
else
    log "installing LoopX and the repository's plugins into .venv"
    rm -f .venv/loopx-installed
    .venv/bin/python -m pip install -q --upgrade pip >&2 || true
    # LoopX's distribution was named `loopx` before `loopx-control` (a different project owns that
    # name on the package index): a .venv from before loses the old name first.
    .venv/bin/python -m pip uninstall -q -y loopx >/dev/null 2>&1 || true
    .venv/bin/python -m pip install -q -e '.[test,postgres]' >&2
    # The capabilities shipped here. The example third-party plugin (examples/plugins/) is not
    # installed: its tests and the seed walkthrough install it where they need it.
    for plugin in plugins/*/; do
        [ -f "$plugin/pyproject.toml" ] && .venv/bin/python -m pip install -q -e "$plugin" >&2
    done
    installed_from | sha256sum > .venv/loopx-installed
fi

# The real agent CLIs, pinned, in a cache of their own (never in the checkout or system paths).
AGENTS=("@anthropic-ai/claude-code@2.1.328" "@openai/codex@0.169.0")
AGENTS_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/loopx-test/agents
agents_current() {
    local spec name version
    for spec in "${AGENTS[@]}"; do
        name=${spec%@*} version=${spec##*@}
        [ "$(.venv/bin/python -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' \
            "$AGENTS_DIR/node_modules/$name/package.json" 2>/dev/null)" = "$version" ] || return 1
    done
}
if [ "$QUICK" = 1 ]; then
    log "agent CLIs: not used by the quick tier"
elif agents_current; then
    log "agent CLIs: reusing $AGENTS_DIR (${AGENTS[*]})"
elif [ "$SYSTEM" != 1 ]; then
    log "agent CLIs: not installing ${AGENTS[*]} (LOOPX_TEST_SYSTEM=0): their tests skip"
elif ! command -v npm >/dev/null; then
    log "agent CLIs: npm is not installed, so ${AGENTS[*]} are not: their tests skip"
else
    log "agent CLIs: installing ${AGENTS[*]} into $AGENTS_DIR"
    mkdir -p "$AGENTS_DIR"
    if ! npm install --prefix "$AGENTS_DIR" --save-exact --no-audit --no-fund --loglevel=error "${AGENTS[@]}" >&2; then
        log "agent CLIs: npm install failed: their tests skip"
    fi
fi
if [ "$QUICK" = 0 ] && agents_current; then
    export LOOPX_TEST_AGENTS_DIR=$AGENTS_DIR/node_modules/.bin
    log "agent CLIs: LOOPX_TEST_AGENTS_DIR=$LOOPX_TEST_AGENTS_DIR"
fi

if [ "$QUICK" = 1 ]; then
    log "quick tier: no PostgreSQL, browser, agent CLI or slow test"
elif [ -n "${LOOPX_TEST_POSTGRES_URL:-}" ]; then
    log "PostgreSQL tests run against LOOPX_TEST_POSTGRES_URL (nothing is started)"
else
    log "PostgreSQL tests run against a throwaway server in a temp dir, deleted when they end"
fi

# Parallel unless told otherwise (-n/-p no:xdist among the arguments, or LOOPX_TEST_JOBS=1).
args=()
# The quick tier's tests are short and many: a worker that runs out takes tests queued for the
# other (worksteal). The full suite keeps a file on one worker (loadfile): its long files hold
# module-wide servers and set-up that splitting would build twice.
dist=loadfile
[ "$QUICK" = 0 ] || dist=worksteal
cores=$(nproc 2>/dev/null || echo 1)
# On 2 cores the full suite took 633 s with 2 workers, 515 s with 3 and 593 s with 4 (its tests
# slowed by sharing the cores): a worker waits on the processes its tests start a third of the time.
[ "$QUICK" = 1 ] || cores=$((cores + 1))
jobs=${LOOPX_TEST_JOBS:-$(( cores < 4 ? cores : 4 ))}
case " $* " in
    *" -n "* | *" -n"[0-9a]* | *" --numprocesses"* | *"no:xdist"*) ;;
    *) if [ "$jobs" -gt 1 ]; then args+=(-n "$jobs" --dist "$dist"); fi ;;
esac
if [ "$QUICK" = 1 ]; then
    export LOOPX_TEST_QUICK=1
    args+=(-m "not postgres and not browser and not agents and not slow")
fi

# Workers' temp dirs gain a "popen-gwN" level: a short base of our own keeps the unix socket paths
# tests make under them (the broker's) within AF_UNIX's 108 bytes. Removed when pytest ends.
if [ ${#args[@]} -gt 0 ] && [ "${args[0]}" = -n ]; then
    base=$(mktemp -d "${TMPDIR:-/tmp}/pt-XXXXXX")
    trap 'rm -rf "$base"' EXIT
    args+=(--basetemp "$base/t")
fi

# Bytecode caches are written (in the checkout's __pycache__ directories, which git ignores) even
# where PYTHONDONTWRITEBYTECODE is set: without them every pytest worker compiles and
# assertion-rewrites every test module again (about 10 s of CPU each), and every `loopx` process
# a test starts compiles the modules it imports.
unset PYTHONDONTWRITEBYTECODE
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/python -m pytest -rs "${args[@]}" "$@"
