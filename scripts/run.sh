#!/usr/bin/env bash
# The run command (README): build the `spindle` binary and run the main job with the
# arguments given (default: `spindle serve`, the embedded node on ./spindle-data).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -p spindle-cli
if [ $# -eq 0 ]; then
    set -- serve
fi
exec "$CARGO_TARGET_DIR/release/spindle" "$@"
