#!/usr/bin/env bash
# The run command (README): build the `spindle` binary and run the main job with the
# arguments given (default: the durable-log benchmark on its defaults).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -p spindle-cli
if [ $# -eq 0 ]; then
    set -- bench log
fi
exec "$CARGO_TARGET_DIR/release/spindle" "$@"
