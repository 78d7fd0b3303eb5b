//! clusterfw network-namespace test bed.
//!
//! Client and server hosts with real kernel TCP/IP stacks, firewall nodes
//! (`clusterfw` on `net_af_packet` ports) in their own namespaces, all wired
//! with veth pairs. Test traffic never leaves the namespaces the bed makes.
//! [`topology`] says what exists, [`bed`] makes and removes it, [`state`]
//! records it, [`nodeconf`] writes node configs, [`harness`] is what traffic
//! tests need around it (the bed lock, background processes).
//!
//! ```text
//! clusterfw-testbed up [--nodes 1] [--run-dir DIR] [--kernel-router]
//! clusterfw-testbed status [--json]
//! clusterfw-testbed down
//! ```
//!
//! # Self-check: `--kernel-router`
//!
//! With `--kernel-router` the node namespace holds no `clusterfw`: its veth
//! ends get the node addresses and the kernel forwards between them, with
//! the default policy (lower to higher security level denied) stood in for
//! by a policy-routing rule that refuses TCP to ports 1-1023 arriving on
//! the outside interface (no iptables needed). It validates the bed and the
//! traffic tests independently of the DPDK node:
//! `CFW_TESTBED_KERNEL_ROUTER=1 cargo test --release -p testbed` runs the
//! single-node test this way (minus the node's counters), and
//! `scripts/demo.sh --kernel-router` runs the demo this way.
//!
//! # Cleanup
//!
//! Every run records what it made in `RUN/state.json`. `down` stops the
//! node processes (SIGTERM, 5 s, SIGKILL) and anything else still running
//! in a `cfw-*` namespace, deletes the veths and namespaces by name, the
//! DPDK runtime directories `/var/run/dpdk/cfw-tb-*` and the run directory's
//! sockets and pid files (logs and configs stay). `up` runs the same cleanup
//! first, so the remains of a crashed run never get in the way.
#![deny(unsafe_code)]

pub mod bed;
pub mod faults;
pub mod harness;
pub mod losses;
pub mod nodeconf;
pub mod sim;
pub mod pktgen;
pub mod state;
pub mod sys;
pub mod topology;
