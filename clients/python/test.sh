#!/usr/bin/env bash
# The Python client's checks: a cached venv with pinned tools, the package installed from
# this folder, `mypy --strict`, then pytest against a real `spindle serve` ($SPINDLE_BIN, or
# the release binary in $CARGO_TARGET_DIR, built here if missing).
set -euo pipefail
cd "$(dirname "$0")"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/spindle"
venv="$cache/venv-py-client"
python="${PYTHON:-python3}"
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo "python client: installing python3-venv" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv >/dev/null
fi
# The venv is rebuilt when the pinned requirements change.
stamp="$venv/.requirements"
if ! cmp -s requirements-test.txt "$stamp" 2>/dev/null; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r requirements-test.txt
    cp requirements-test.txt "$stamp"
fi
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall .
rm -rf build src/*.egg-info
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
export SPINDLE_BIN="${SPINDLE_BIN:-$CARGO_TARGET_DIR/release/spindle}"
[ -x "$SPINDLE_BIN" ] || (cd ../.. && cargo build --release -p spindle-cli)
"$venv/bin/mypy" --strict --cache-dir "$venv/mypy-cache" src tests tools
# Bounded: a stream that never ends must fail the run, not hang it.
timeout 600 "$venv/bin/pytest" -q -p no:cacheprovider tests
