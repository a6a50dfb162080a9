#!/usr/bin/env bash
# Run the hook and plugin tests at the lowest and the highest pluggy that pyproject.toml allows:
#
#     bash scripts/test-pluggy-bounds.sh [pytest arguments]
#
# For each bound, a throwaway virtualenv holds that pluggy alone; everything else (LoopX, its
# plugins, pytest) comes from .venv, through a .pth file that adds .venv's site-packages after the
# throwaway's own, so the pinned pluggy wins. The tests start their loopx processes with
# sys.executable, so those see the same pluggy. pip's cache makes the installs cheap after the
# first run. Needs the .venv of CONTRIBUTING.md's set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "test-pluggy-bounds: $*" >&2; }

PY=.venv/bin/python
[ -x "$PY" ] || { log "no .venv: set it up first (CONTRIBUTING.md)"; exit 2; }
# The requirement as pyproject.toml states it, e.g. "pluggy>=1.5,<2", and its lower bound.
SPEC=$("$PY" -c 'import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(next(d for d in deps if re.match(r"pluggy\b", d)).replace(" ", ""))')
LOW=$(echo "$SPEC" | sed -n 's/.*>=\([0-9.]*\).*/\1/p')
[ -n "$LOW" ] || { log "no lower bound in $SPEC"; exit 2; }
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TESTS=(tests/test_hooks_meta.py tests/test_hook_workers.py tests/test_plugin_api.py tests/test_plugin_hooks.py
       tests/test_plugin_register.py tests/test_plugin_vocabulary.py tests/reliability/test_plugin_faults.py)
[ $# -gt 0 ] && TESTS=("$@")

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
status=0
for want in "pluggy==$LOW" "$SPEC"; do
    env="$WORK/venv"
    rm -rf "$env"
    "$PY" -m venv --without-pip "$env"
    "$PY" -m pip --python "$env/bin/python" install -q "$want" >&2
    own=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "import site; site.addsitedir('$SITE')" > "$own/zz_loopx_dev.pth"
    version=$("$env/bin/python" -c 'import pluggy; print(pluggy.__version__)')
    log "$want: pluggy $version"
    if ! "$env/bin/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}"; then
        log "FAILED with pluggy $version"
        status=1
    fi
done
exit $status
