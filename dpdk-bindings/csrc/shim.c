#include <rte_errno.h>
#include <rte_ethdev.h>
#include "shim.h"

int rte_shim_errno(void)
{
	return rte_errno;
}

/* Stopped ports point at DPDK's dummy queue array (never NULL); a started
 * port has NULL for every queue that was never set up. */
static inline int queue_usable(void **qdata, uint16_t queue_id)
{
	return queue_id < RTE_MAX_QUEUES_PER_PORT && qdata != NULL &&
	       qdata[queue_id] != NULL;
}

uint16_t rte_shim_rx_burst(uint16_t port_id, uint16_t queue_id,
			   struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{
	if (unlikely(port_id >= RTE_MAX_ETHPORTS ||
		     !queue_usable(rte_eth_fp_ops[port_id].rxq.data, queue_id)))
		return 0;
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t rte_shim_tx_burst(uint16_t port_id, uint16_t queue_id,
			   struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{
	if (unlikely(port_id >= RTE_MAX_ETHPORTS ||
		     !queue_usable(rte_eth_fp_ops[port_id].txq.data, queue_id)))
		return 0;
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}
