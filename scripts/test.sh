#!/usr/bin/env bash
# The whole test suite, as root: installs what is missing (setup.sh), builds
# every binary and every test binary once in release mode, then runs two
# lanes side by side and exits non-zero if anything in either fails:
#
#   bed lane   the network-namespace test bed tests, one at a time under
#              the bed lock (they share the fixed cfw-* names), with 1
#              worker per node and then the cluster ones again with 2;
#   cpu lane   the layout checks (docs/layout.md), every in-process test
#              (unit, property, golden tables, DPDK vdevs, the simulator),
#              the doc tests.
#
# The bed lane mostly waits (timers, paced transfers) and the cpu lane
# mostly computes, so on 2 cores the two together take about as long as
# the bed alone. The cpu lane runs at the lowest priority (nice 19): it
# takes what the bed leaves idle and never a bed node's heartbeat slot
# (at nice 0 beside it, the bed's 100/300 ms membership timers lapsed and
# members were removed for silence). The bed tests hold their bounds on
# slower hosts: where the host is too slow to carry a flood they say so
# and waive the timing bound, never silently (testbed/src/losses.rs).
# Always tears the test bed down.
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
work=$(mktemp -d /tmp/cfw-test.XXXXXX)

teardown() {
  local rc=$?
  if [ -n "${cpu_pid:-}" ] && kill -0 "$cpu_pid" 2>/dev/null; then
    kill -- "-$cpu_pid" 2>/dev/null || kill "$cpu_pid" 2>/dev/null || true
  fi
  if [ -x "$CLUSTERFW_BIN_DIR/clusterfw-testbed" ]; then
    mkdir -p "$(dirname "$lock")"
    CFW_TESTBED_LOCK_HELD=1 flock -w 60 "$lock" "$CLUSTERFW_BIN_DIR/clusterfw-testbed" down --run-dir "$CFW_TESTBED_DIR" >&2 \
      || echo "test.sh: test bed down failed" >&2
  fi
  rm -rf "$work"
  exit "$rc"
}
trap teardown EXIT

# Cluster bed tests that run again with 2 workers per node.
two_workers=(cluster_three_nodes cluster_failover nat_cluster nat_cluster_dynamic metrics export cluster_view flood flood_kinds limits
  syn_proxy cluster_ipv6)

say "build: the binaries (release), every test binary (profile ci), once"
cargo build --release --workspace --bins
# The test binaries in profile `ci` (Cargo.toml: release without link-time
# optimisation or debug info: a quarter of the build time, the same run
# time); the bed tests drive the release binaries above. One feature
# resolution for every test binary (a `cargo test -p X` after `cargo test
# --workspace` would build the shared crates again), then the binaries are
# run directly: the lanes never wait on cargo's build lock.
cargo test --profile ci --workspace --no-run --message-format=json-render-diagnostics >"$work/artifacts.json"
# executable, package directory, test target name, kind (lib/bin/test), package name
jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
  | [.executable, (.manifest_path | rtrimstr("/Cargo.toml")), .target.name, .target.kind[0],
     (.manifest_path | rtrimstr("/Cargo.toml") | split("/") | last)] | @tsv' "$work/artifacts.json" | sort -t$'\t' -k5,5 -k3,3 >"$work/tests.tsv"

# One test binary, from its package's directory (as cargo runs it), with
# the arguments after the listing fields; prints a line per binary and
# appends its name to $failed_file when it fails.
run_bin() {
  local exe=$1 dir=$2 name=$3 failed_file=$4
  shift 4
  printf '\n     Running %s (%s)\n' "$name" "${exe#"$root"/}"
  if ! (cd "$dir" && "$exe" "$@"); then
    echo "$name" >>"$failed_file"
  fi
}

# The bed tests: the testbed package's test targets but the simulator's.
is_bed() { [ "$5" = testbed ] && [ "$4" = test ] && [[ "$3" != sim_* ]]; }

cpu_lane() {
  local failed_file=$work/cpu.failed exe dir name kind pkg
  # Lowest priority, for this lane and all it starts (see the top).
  renice -n 19 -p "$BASHPID" >/dev/null
  : >"$failed_file"
  say "layout checks (docs/layout.md; known violations in tools/layout-check/pending.txt)"
  "$CLUSTERFW_BIN_DIR/layout-check" --root "$root" || echo "layout checks" >>"$failed_file"
  say "in-process tests: unit, property, golden tables, DPDK vdevs, the simulator"
  while IFS=$'\t' read -r exe dir name kind pkg; do
    is_bed "$exe" "$dir" "$name" "$kind" "$pkg" && continue
    run_bin "$exe" "$dir" "$pkg/$name" "$failed_file"
  done <"$work/tests.tsv"
  say "doc tests"
  cargo test --profile ci --workspace --doc || echo "doc tests" >>"$failed_file"
}

bed_lane() {
  local failed_file=$work/bed.failed exe dir name kind pkg
  : >"$failed_file"
  say "test bed tests (root, one at a time), 1 worker per node"
  while IFS=$'\t' read -r exe dir name kind pkg; do
    is_bed "$exe" "$dir" "$name" "$kind" "$pkg" || continue
    run_bin "$exe" "$dir" "$name" "$failed_file" --test-threads=1 --nocapture
  done <"$work/tests.tsv"
  say "cluster test bed tests again, 2 workers per node"
  while IFS=$'\t' read -r exe dir name kind pkg; do
    is_bed "$exe" "$dir" "$name" "$kind" "$pkg" || continue
    [[ " ${two_workers[*]} " == *" $name "* ]] || continue
    CFW_BED_WORKERS=2 run_bin "$exe" "$dir" "$name (2 workers)" "$failed_file" --test-threads=1 --nocapture
  done <"$work/tests.tsv"
}

started=$(date +%s)
# The cpu lane in its own process group (teardown stops it whole), its
# output kept for the end so that the bed's stays readable.
set -m
cpu_lane >"$work/cpu.log" 2>&1 &
cpu_pid=$!
set +m
bed_lane
say "test bed lane done in $(( $(date +%s) - started )) s; waiting for the cpu lane"
wait "$cpu_pid" || true
cat "$work/cpu.log"
say "both lanes done in $(( $(date +%s) - started )) s"

mapfile -t failed < <(cat "$work/cpu.failed" "$work/bed.failed" 2>/dev/null)
if [ "${#failed[@]}" -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all tests passed"
