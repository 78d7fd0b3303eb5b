//! Speed sanity check: forward between two `net_null` vdevs on one core for
//! N seconds and print the forwarding rate.
//!
//! ```text
//! cargo run --release -p dpdk-sys --example nullfwd -- [SECONDS] [BURST_PORT_PAIRS]
//! ```
//! net_null makes up 64-byte packets from our pool on RX and frees them on
//! TX, so this measures the binding's burst path plus mempool get/put.

use std::error::Error;
use std::path::PathBuf;

use dpdk_sys::{eal, mempool, Burst, MbufBurst, Mempool, Port};

struct RunDirGuard(PathBuf);

impl Drop for RunDirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(5.0);
    let prefix = format!("nullfwd-{}", std::process::id());
    let _dir = RunDirGuard(PathBuf::from("/var/run/dpdk").join(&prefix));
    let args = [
        "nullfwd",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--file-prefix",
        &prefix,
        "--vdev",
        "net_null0",
        "--vdev",
        "net_null1",
        "-l",
        "0",
        "--log-level",
        "lib.eal:warning",
    ];
    let eal = eal::init(&args)?;
    {
        let pool = Mempool::new_pktmbuf(
            "nullfwd",
            8191,
            256,
            mempool::DEFAULT_DATA_ROOM,
            mempool::SOCKET_ID_ANY,
        )?;
        let ports = [Port::by_name("net_null0")?, Port::by_name("net_null1")?];
        for p in ports {
            p.configure(1, 1, 1024, 1024, &pool, 0)?;
            p.start()?;
        }

        let mut burst: Burst = MbufBurst::new();
        let hz = eal::tsc_hz();
        let start = eal::rdtsc();
        let end = start + (secs * hz as f64) as u64;
        let (mut fwd, mut dropped) = (0u64, 0u64);
        let mut iter = 0u32;
        loop {
            for (i, rx) in ports.iter().enumerate() {
                let tx = ports[1 - i];
                if rx.rx_burst(0, &mut burst) == 0 {
                    continue;
                }
                fwd += tx.tx_burst(0, &mut burst) as u64;
                dropped += burst.len() as u64;
                burst.clear();
            }
            iter = iter.wrapping_add(1);
            if iter % 1024 == 0 && eal::rdtsc() >= end {
                break;
            }
        }
        let elapsed = (eal::rdtsc() - start) as f64 / hz as f64;
        println!(
            "nullfwd: {fwd} packets forwarded in {elapsed:.2} s = {:.2} Mpps on one core ({dropped} dropped)",
            fwd as f64 / elapsed / 1e6
        );
        for p in ports {
            let s = p.stats()?;
            println!(
                "{p}: rx {} tx {} rx_nombuf {}",
                s.ipackets, s.opackets, s.rx_nombuf
            );
            p.stop()?;
            p.close()?;
        }
    }
    drop(eal);
    Ok(())
}
