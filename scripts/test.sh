#!/usr/bin/env bash
# The test command (README): installs what the build needs, then checks formatting, lints
# and runs every test in the release profile (one profile for tests and benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

# A full disk fails the tests far from its cause (ENOSPC inside RocksDB or nats-server), so
# say up front when the target directory's or the temporary directory's file system is low:
# a fresh build takes about 20 GiB, and the tests write a few GiB under the temporary
# directory at once.
for dir in "$CARGO_TARGET_DIR" "${TMPDIR:-/tmp}"; do
    free_kib="$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')"
    if [ -n "$free_kib" ] && [ "$free_kib" -lt $((20 * 1024 * 1024)) ]; then
        echo "test: only $((free_kib / 1024 / 1024)) GiB free for $dir; a fresh build and" \
            "the tests need about 20 GiB, and a full disk fails them with ENOSPC" >&2
    fi
done

if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --all -- --check
else
    echo "test: rustfmt is not installed for this toolchain; skipping the format check" >&2
fi
if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --release --workspace --all-targets --all-features -- -D warnings
else
    echo "test: clippy is not installed for this toolchain; skipping lints" >&2
fi
# The validator the OpenAPI description's test runs; where it cannot be installed that test
# says it skipped.
SPINDLE_OPENAPI_VALIDATOR="$(bash scripts/openapi-validator.sh)" || {
    echo "test: openapi-spec-validator could not be installed; openapi_spec_valid will skip" >&2
    SPINDLE_OPENAPI_VALIDATOR=""
}
export SPINDLE_OPENAPI_VALIDATOR
cargo test --release --workspace --all-features
# The Python client (clients/python): mypy --strict and its tests against the binary just built.
SPINDLE_BIN="$CARGO_TARGET_DIR/release/spindle" bash clients/python/test.sh
# The ring's sequence protocol under the loom model checker (its own cfg, its own target dir).
LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$CARGO_TARGET_DIR-loom" \
    cargo test --release -p spindle-ring --test loom_sequence_protocol
# The ring under Miri where a nightly toolchain with Miri exists (skips with a message if not).
bash .ci/miri-ring.sh
