#!/usr/bin/env bash
# The whole test suite, as root: installs what is missing (setup.sh), builds
# every binary in release mode, runs the layout checks (docs/layout.md) and
# all unit and integration tests, including the network-namespace test bed
# tests (serially, under the bed lock). Exits non-zero if anything fails;
# always tears the test bed down.
#
#   scripts/test.sh
#   CFW_TESTBED_KERNEL_ROUTER=1 scripts/test.sh   # bed self-check: Linux router instead of clusterfw
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

say() { printf '\n== %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: run as root (packages, network namespaces)" >&2
  exit 1
fi

scripts/setup.sh
# A toolchain setup.sh just installed is not on PATH yet.
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  . "$HOME/.cargo/env"
fi

export CLUSTERFW_BIN_DIR=$root/target/release
export CFW_TESTBED_DIR=${CFW_TESTBED_DIR:-/tmp/cfw-testbed-test}
lock=${CFW_TESTBED_LOCK:-/run/lock/cfw-testbed.lock}

teardown() {
  local rc=$?
  if [ -x "$CLUSTERFW_BIN_DIR/clusterfw-testbed" ]; then
    mkdir -p "$(dirname "$lock")"
    CFW_TESTBED_LOCK_HELD=1 flock -w 60 "$lock" "$CLUSTERFW_BIN_DIR/clusterfw-testbed" down --run-dir "$CFW_TESTBED_DIR" >&2 \
      || echo "test.sh: test bed down failed" >&2
  fi
  exit "$rc"
}
trap teardown EXIT

say "build (release, all binaries)"
cargo build --release --workspace --bins

failed=()
say "layout checks (docs/layout.md; known violations in tools/layout-check/pending.txt)"
"$CLUSTERFW_BIN_DIR/layout-check" --root "$root" || failed+=("layout checks")

say "unit and integration tests (all crates but the test bed)"
cargo test --workspace --release --exclude testbed --no-fail-fast || failed+=("workspace tests")

say "test bed tests (root, one at a time)"
cargo test --release -p testbed --no-fail-fast -- --test-threads=1 --nocapture || failed+=("test bed tests")

say "cluster test bed tests again, 2 workers per node (issue 12)"
CFW_BED_WORKERS=2 cargo test --release -p testbed --no-fail-fast --test cluster_three_nodes --test cluster_failover --test nat_cluster \
  --test nat_cluster_dynamic --test metrics --test export --test cluster_view --test flood --test flood_kinds --test limits --test syn_proxy \
  --test cluster_ipv6 \
  -- --test-threads=1 --nocapture || failed+=("cluster test bed tests with 2 workers")

if [ "${#failed[@]}" -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all tests passed"
