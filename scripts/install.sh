#!/usr/bin/env bash
# Install LoopX from this checkout into a virtualenv of its own, and put `loopx` on the PATH.
#
# It stands in for the seed's `install-from-github.sh`: the user needs no clone of their own
# and no virtualenv; everything lives under ${LOOPX_HOME:-$HOME/.local/share/loopx} and one
# link, $HOME/.local/bin/loopx, points at it. Running it again upgrades in place (idempotent).
#
#   bash scripts/install.sh                       # install or upgrade LoopX
#   bash scripts/install.sh --with ./plugins/issue_fix   # ... plus plugins (repeatable)
#   export PATH="$HOME/.local/bin:$PATH"
#
# Environment: LOOPX_HOME (where the virtualenv goes), LOOPX_PYTHON (the interpreter to build
# it with, 3.11 or newer; default python3), LOOPX_BIN_DIR (where the link goes; default
# $HOME/.local/bin), LOOPX_PIP_ARGS (extra pip arguments, e.g. "--no-index --find-links DIR").
set -euo pipefail

say() { printf 'loopx-install: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

SOURCE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOOPX_HOME=${LOOPX_HOME:-$HOME/.local/share/loopx}
BIN_DIR=${LOOPX_BIN_DIR:-$HOME/.local/bin}
PYTHON=${LOOPX_PYTHON:-python3}
VENV="$LOOPX_HOME/venv"

plugins=()
while [ $# -gt 0 ]; do
    case "$1" in
        --with) [ $# -ge 2 ] || die "--with needs a path"; plugins+=("$(cd "$2" && pwd)"); shift 2 ;;
        --with=*) plugins+=("$(cd "${1#--with=}" && pwd)"); shift ;;
        -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (try --help)" ;;
    esac
done

[ -f "$SOURCE_DIR/pyproject.toml" ] && [ -d "$SOURCE_DIR/loopx" ] \
    || die "$SOURCE_DIR does not look like a LoopX checkout"
command -v "$PYTHON" >/dev/null 2>&1 || die "no Python interpreter '$PYTHON' (set LOOPX_PYTHON)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "LoopX needs Python 3.11 or newer; $PYTHON is $("$PYTHON" -c 'import platform; print(platform.python_version())')"

# A virtualenv whose interpreter no longer runs (Python upgraded or removed) is rebuilt.
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    say "the virtualenv at $VENV is broken; rebuilding it"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    say "creating a virtualenv at $VENV"
    mkdir -p "$LOOPX_HOME"
    "$PYTHON" -m venv "$VENV"
fi

# Build from a copy, so installing never writes build/ or *.egg-info into the checkout.
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/loopx-install.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
stage() {  # stage SRC NAME -> prints the staged path
    local src=$1 dest="$STAGE/$2"
    mkdir -p "$dest"
    (cd "$src" && tar --exclude=.git --exclude=build --exclude='*.egg-info' --exclude=__pycache__ \
        --exclude=.pytest_cache --exclude=.venv -cf - .) | (cd "$dest" && tar -xf -)
    printf '%s\n' "$dest"
}

pip_args=(--disable-pip-version-check --quiet)
# shellcheck disable=SC2206  # LOOPX_PIP_ARGS is a list of words on purpose
[ -n "${LOOPX_PIP_ARGS:-}" ] && pip_args+=($LOOPX_PIP_ARGS)

say "installing LoopX from $SOURCE_DIR"
targets=("$(stage "$SOURCE_DIR" loopx)")
i=0
for p in "${plugins[@]}"; do
    [ -f "$p/pyproject.toml" ] || die "$p has no pyproject.toml: not a plugin distribution"
    targets+=("$(stage "$p" "plugin-$i")")
    i=$((i + 1))
done
# An install from before the distribution was renamed `loopx-control` drops the old name first
# (uninstalled afterwards, it would take the package files the new name shares).
"$VENV/bin/python" -m pip uninstall -q -y loopx >/dev/null 2>&1 || true
# --upgrade rebuilds local projects even when their version number did not change.
"$VENV/bin/python" -m pip install "${pip_args[@]}" --upgrade "${targets[@]}"

mkdir -p "$BIN_DIR"
ln -sfn "$VENV/bin/loopx" "$BIN_DIR/loopx"
"$BIN_DIR/loopx" --version >/dev/null || die "the installed loopx does not run"

say "installed $("$BIN_DIR/loopx" --version) -> $BIN_DIR/loopx"
case ":$PATH:" in
    *":$BIN_DIR:"*) ;;
    *) say "add it to your PATH:  export PATH=\"$BIN_DIR:\$PATH\"" ;;
esac
