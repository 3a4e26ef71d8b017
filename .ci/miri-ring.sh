#!/usr/bin/env bash
# Runs the ring crate's tests under Miri when a nightly toolchain with Miri is installed;
# otherwise says why it skipped and exits 0. Miri is slow, so proptest case counts are cut.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri-ring: skipped (no nightly toolchain with the miri component; install with" \
        "'rustup toolchain install nightly --component miri')"
    exit 0
fi

export PROPTEST_CASES="${PROPTEST_CASES:-4}"
# Unit tests and the small deterministic behaviour tests; Miri checks every slot access and
# atomic against the Rust memory model. The proptest suites take minutes under Miri
# (ring_schedule_model: about 5 minutes here), so they are left to the normal test run.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}"
cargo +nightly miri test -p spindle-ring --lib \
    --test ring_backpressure \
    --test ring_leave_ungates \
    --test pipeline_observability
