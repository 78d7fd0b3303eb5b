//! DPDK bindings.
