#!/usr/bin/env bash
# The test command (README): installs what the build needs, then checks formatting, lints
# and runs every test in the release profile (one profile for tests and benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets --all-features -- -D warnings
cargo test --release --workspace --all-features
if [ -x .ci/miri-ring.sh ]; then
    .ci/miri-ring.sh
fi
