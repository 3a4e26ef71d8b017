#!/usr/bin/env bash
# Sourced by the run and test scripts: install the system packages the build needs and pick
# a target directory outside the checkout, so repeated builds reuse compiled RocksDB.
set -euo pipefail

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
# RocksDB's bindings are generated with bindgen, which loads libclang.
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
# The status page's browser test drives headless Chromium through chromedriver.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# `spindle top`'s test drives it in a tmux pane (a real pseudo-terminal).
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/spindle/target}"
mkdir -p "$CARGO_TARGET_DIR"
# The JetStream log's tests and benches start real nats-server processes (scripts/nats.sh).
SPINDLE_NATS_SERVER="${SPINDLE_NATS_SERVER:-$(bash scripts/nats.sh)}"
export SPINDLE_NATS_SERVER
