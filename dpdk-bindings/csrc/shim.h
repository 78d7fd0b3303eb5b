/* Hand-written helpers for what bindgen cannot reach or should not be
 * trusted with:
 *  - thread-local variables hidden behind macros (rte_errno);
 *  - the RX/TX burst calls, which in release builds of DPDK do not check
 *    that the queue was set up (an unconfigured queue is a NULL deref in the
 *    PMD). These do the same one-load check that DPDK's debug build does.
 * Other `static inline` functions are wrapped automatically by bindgen's
 * wrap_static_fns (see build.rs). */
#ifndef CFW_DPDK_SHIM_H
#define CFW_DPDK_SHIM_H

#include <stdint.h>

struct rte_mbuf;

/* Current thread's rte_errno (a per-lcore TLS variable behind a macro). */
int rte_shim_errno(void);

/* rte_eth_rx_burst, returning 0 for an out-of-range or unconfigured queue. */
uint16_t rte_shim_rx_burst(uint16_t port_id, uint16_t queue_id,
			   struct rte_mbuf **rx_pkts, uint16_t nb_pkts);

/* rte_eth_tx_burst, returning 0 for an out-of-range or unconfigured queue. */
uint16_t rte_shim_tx_burst(uint16_t port_id, uint16_t queue_id,
			   struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

#endif
