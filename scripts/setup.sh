#!/usr/bin/env bash
# Installs what clusterfw needs to build, test and demo on Debian 12 (run as
# root). Idempotent: only missing packages are installed, and `apt-get
# update` runs only when something is missing.
#
#   scripts/setup.sh            # required packages, plus tshark if it installs
#   CFW_SETUP_OPTIONAL=0 scripts/setup.sh    # skip tshark
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# Build: DPDK headers/libs via pkg-config, clang for bindgen.
# Test bed: iproute2 (ip netns, ss), ethtool (veth offloads), util-linux
# (setsid), traffic tools and servers (curl, iperf3, ping, tracepath,
# traceroute, python3, scapy, hping3), inspection (tcpdump, jq, procps),
# collectors and their checkers (prometheus: its promtool checks the
# /metrics text; rsyslog receives the nodes' syslog; nfdump's nfcapd
# receives their IPFIX and nfdump lists it).
required=(
  build-essential pkg-config clang libclang-dev
  dpdk dpdk-dev libdpdk-dev
  iproute2 ethtool util-linux coreutils procps
  curl ca-certificates iperf3 iputils-ping tcpdump
  python3 python3-scapy hping3 jq iputils-tracepath traceroute
  prometheus rsyslog nfdump
)
# Debugging aid only; a failure to install it does not fail setup.
optional=(tshark)

say() { printf 'setup: %s\n' "$*" >&2; }
log=/tmp/cfw-setup-apt.log
# apt-get, its chatter in $log; shows the log's tail if it fails.
apt_get() {
  if ! apt-get "$@" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    return 1
  fi
}

if [ "$(id -u)" -ne 0 ]; then
  say "run as root (installs packages; the test bed needs network namespaces)"
  exit 1
fi

missing() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || printf '%s\n' "$p"
  done
}

updated=0
apt_update() {
  if [ "$updated" -eq 0 ]; then
    say "apt-get update"
    apt_get update -qq
    updated=1
  fi
}

mapfile -t need < <(missing "${required[@]}")
if [ "${#need[@]}" -gt 0 ]; then
  apt_update
  say "installing: ${need[*]}"
  apt_get install -y -qq --no-install-recommends "${need[@]}"
fi

if [ "${CFW_SETUP_OPTIONAL:-1}" != 0 ]; then
  mapfile -t want < <(missing "${optional[@]}")
  if [ "${#want[@]}" -gt 0 ]; then
    # tshark asks whether non-root users may capture; answer no up front.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt_update
    say "installing optional: ${want[*]}"
    apt_get install -y -qq --no-install-recommends "${want[@]}" || say "optional packages not installed (ignored): ${want[*]}"
  fi
fi

# Rust toolchain, if there is none (rustup, stable, minimal profile).
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  say "installing Rust (rustup, stable)"
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
fi

pkg-config --exists libdpdk || { say "pkg-config cannot find libdpdk after install"; exit 1; }
say "ok"
