# Shared by the lab benchmarks (sourced, not run): the linerate binary to measure.

# Sets LINERATE to $1 if given, else to <target>/release/linerate under the repository $2,
# building it when missing; dies (via the caller's `die`) if it is not executable.
find_linerate() {
    LINERATE=$1
    if [ -z "$LINERATE" ]; then
        LINERATE="${CARGO_TARGET_DIR:-$2/target}/release/linerate"
        if [ ! -x "$LINERATE" ]; then
            echo "building $LINERATE (cargo build --release -p linerate)" >&2
            (cd "$2" && cargo build --release -p linerate) >&2 || die "cargo build --release failed"
        fi
    fi
    [ -x "$LINERATE" ] || die "linerate binary not found or not executable: $LINERATE"
}
