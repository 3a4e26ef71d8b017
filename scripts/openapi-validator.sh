#!/usr/bin/env bash
# Installs the pinned OpenAPI validator (PyPI `openapi-spec-validator`) into a venv under the
# cache directory, idempotently, and prints the path of its command-line tool. The test of
# `/openapi.json` runs it (env SPINDLE_OPENAPI_VALIDATOR); it exits non-zero when the
# validator cannot be installed.
set -euo pipefail

VALIDATOR_VERSION="0.7.2"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/spindle"
venv="$cache/openapi-spec-validator-$VALIDATOR_VERSION"
bin="$venv/bin/openapi-spec-validator"

if [ ! -x "$bin" ]; then
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
        echo "openapi-validator: installing python3-venv" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq python3-venv >/dev/null
    fi
    echo "openapi-validator: installing openapi-spec-validator==$VALIDATOR_VERSION into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "openapi-spec-validator==$VALIDATOR_VERSION"
fi
echo "$bin"
