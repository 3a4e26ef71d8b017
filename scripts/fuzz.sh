#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ (one per decoder of bytes from disk or the network)
# for FUZZ_SECONDS each (default 60), when a nightly toolchain and cargo-fuzz are installed;
# otherwise says why it skipped and exits 0. The stable-toolchain counterpart is the
# proptest suites `decode_random_*` that `scripts/test.sh` runs.
#
#   scripts/fuzz.sh                       every target, 60 s each
#   FUZZ_SECONDS=300 scripts/fuzz.sh chunk_hints log_frames
#
# The build is cargo-fuzz's default: optimised, with debug assertions, overflow checks and
# AddressSanitizer. The view targets compile the view crate's frame and key modules on their
# own (#[path]), so nothing here builds RocksDB.
#
# Corpora grow in fuzz/corpus/<target> (not committed); a crash is saved in
# fuzz/artifacts/<target> and fails the script. docs/benchmarks/faults.md has the results.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: skipped (no nightly toolchain; install with 'rustup toolchain install nightly')"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: skipped (cargo-fuzz is not installed; install with 'cargo install cargo-fuzz')"
    exit 0
fi

seconds="${FUZZ_SECONDS:-60}"
# FUZZ_TARGET_DIR puts the (nightly, instrumented) build somewhere other than fuzz/target.
target_dir=()
if [ -n "${FUZZ_TARGET_DIR:-}" ]; then
    target_dir=(--target-dir "$FUZZ_TARGET_DIR")
fi
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi

for target in "${targets[@]}"; do
    echo "fuzz: $target for ${seconds}s"
    mkdir -p "fuzz/corpus/$target"
    # -rss_limit_mb catches an allocation sized by a damaged length field; -max_len lets
    # inputs grow to a few frames or hint entries.
    (cd fuzz && cargo +nightly fuzz run "${target_dir[@]}" "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=1024 -malloc_limit_mb=256 -max_len=8192 \
        -print_final_stats=1)
done
