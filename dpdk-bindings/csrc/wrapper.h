/* Input to bindgen: the DPDK API surface used by clusterfw. Keep it small;
 * build.rs also allowlists only `rte_*` / `RTE_*` items from these. */
#ifndef CFW_DPDK_WRAPPER_H
#define CFW_DPDK_WRAPPER_H

#include <rte_config.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_ethdev.h>
#include <rte_dev.h>

#include "shim.h"

#endif
