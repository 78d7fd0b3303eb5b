//! End-to-end test against a real EAL with virtual devices. EAL can be
//! initialised once per process, so everything that needs it is one test
//! function, in phases. Needs root (or enough rights for /var/run/dpdk) and
//! runs without hugepages (`--no-huge`) or NICs (`--no-pci`).

use std::path::PathBuf;

use dpdk_sys::{dev, eal, mempool, Burst, Mbuf, MbufBurst, Mempool, Port};

/// Removes EAL's runtime directory for our file prefix, also when the test
/// fails (declared before the `Eal` guard, so dropped after it).
struct RunDirGuard(PathBuf);

impl Drop for RunDirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 7 + j) as u8).collect()
}

#[test]
fn eal_ports_mbufs_bursts() {
    let prefix = format!("cfwtest-{}", std::process::id());
    let _dir = RunDirGuard(PathBuf::from("/var/run/dpdk").join(&prefix));
    let args = [
        "dpdk-sys-test",
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--file-prefix",
        &prefix,
        "--vdev",
        "net_ring0",
        "--vdev",
        "net_null0",
        "-l",
        "0,1",
        "--log-level",
        "lib.eal:warning",
    ];

    // Before init, constructors refuse instead of touching unmapped state.
    let e = Mempool::new_pktmbuf("early", 63, 0, 256, mempool::SOCKET_ID_ANY).unwrap_err();
    assert_eq!(e.errno(), 19, "{e}");
    assert_eq!(Port::count_avail(), 0);

    let eal = eal::init(&args).expect("EAL init");
    let again = eal::init(&args).unwrap_err();
    assert_eq!(again.errno(), 114, "{again}");
    assert!(eal::is_initialized());

    lcores_and_launch();

    let pool = Mempool::new_pktmbuf(
        "cfwtest_pool",
        4095,
        32,
        mempool::DEFAULT_DATA_ROOM,
        mempool::SOCKET_ID_ANY,
    )
    .expect("pool");
    assert_eq!(pool.capacity(), 4095);
    assert_eq!(pool.in_use_count(), 0);
    assert_eq!(pool.name(), "cfwtest_pool");
    let dup = Mempool::new_pktmbuf("cfwtest_pool", 63, 0, 256, mempool::SOCKET_ID_ANY).unwrap_err();
    assert_eq!(dup.func(), "rte_pktmbuf_pool_create");
    assert_eq!(
        Mempool::lookup("cfwtest_pool").expect("lookup").as_ptr(),
        pool.as_ptr()
    );

    mbuf_editing(&pool);
    burst_ops(&pool);
    assert_eq!(pool.in_use_count(), 0, "mbuf leak after burst ops");
    mbuf_rings(&pool);
    assert_eq!(pool.in_use_count(), 0, "mbuf leak after ring ops");

    // Ports.
    assert_eq!(Port::count_avail(), 2);
    assert_eq!(Port::all().len(), 2);
    let ring = Port::by_name("net_ring0").expect("net_ring0");
    let null = Port::by_name("net_null0").expect("net_null0");
    assert_ne!(ring, null);
    assert_eq!(ring.name().unwrap(), "net_ring0");
    assert_eq!(Port::from_id(ring.id()).unwrap(), ring);
    assert!(Port::from_id(31).is_err());
    let missing = Port::by_name("net_nope0").unwrap_err();
    assert_eq!(missing.func(), "rte_eth_dev_get_port_by_name");
    assert!(missing.to_string().contains("net_nope0"), "{missing}");
    assert_eq!(ring.info().unwrap().driver_name, "net_ring");
    assert_eq!(null.info().unwrap().driver_name, "net_null");

    // More queues than the ring PMD has is a configure error, not a crash.
    let info = ring.info().unwrap();
    let too_many = ring
        .configure(info.max_rx_queues + 1, 1, 512, 512, &pool, 0)
        .unwrap_err();
    assert_eq!(too_many.func(), "rte_eth_dev_configure");

    ring.configure(1, 1, 512, 512, &pool, 0)
        .expect("configure ring");
    null.configure(1, 1, 512, 512, &pool, 0)
        .expect("configure null");
    ring.start().expect("start ring");
    null.start().expect("start null");
    match ring.set_promiscuous(true) {
        Ok(()) => {}
        Err(e) => assert_eq!(e.errno(), 95, "only ENOTSUP is acceptable: {e}"),
    }
    let _mac = ring.mac_addr().expect("mac");
    let link = ring.link().expect("link");
    assert!(link.up, "{link:?}");
    ring.reset_stats().unwrap();

    // Link down and up again (the cluster shuts data ports this way); the
    // ring PMD reports it in its link state.
    ring.set_link_down().expect("link down");
    assert!(!ring.link().expect("link").up, "link down reported");
    ring.set_link_up().expect("link up");
    assert!(ring.link().expect("link").up, "link up reported");

    ring_loopback(ring, &pool);
    ring_partial_tx(ring, &pool);
    null_rx_tx(null, &pool);
    assert_eq!(pool.in_use_count(), 0, "mbuf leak after port traffic");

    // Hot-plug a device after init.
    dev::probe("net_null1").expect("probe net_null1");
    let null1 = Port::by_name(dev::devargs_name("net_null1,size=128")).expect("net_null1");
    assert_eq!(Port::count_avail(), 3);
    // Several queues: configure asks for RSS where the port supports it.
    null1
        .configure(2, 2, 256, 256, &pool, 0)
        .expect("configure 2 queues");
    null1.start().expect("start");
    let mut b = MbufBurst::new();
    assert_eq!(null1.rx_burst(1, &mut b), 64);
    assert_eq!(null1.tx_burst(1, &mut b), 64);
    assert_eq!(null1.rx_burst(2, &mut b), 0, "queue 2 does not exist");
    null1.stop().expect("stop");
    null1.close().expect("close");
    // The PMDs the test bed uses load from Debian's plugin directory (needs
    // root for AF_PACKET / pcap on `lo`).
    for (devargs, driver) in [
        ("net_af_packet0,iface=lo", "net_af_packet"),
        ("net_pcap0,iface=lo", "net_pcap"),
    ] {
        dev::probe(devargs).unwrap_or_else(|e| panic!("{e}"));
        let p = Port::by_name(dev::devargs_name(devargs)).expect("probed port");
        assert_eq!(p.info().unwrap().driver_name, driver);
        p.close().expect("close");
    }
    let bogus = dev::probe("net_bogus0").unwrap_err();
    assert_eq!(bogus.func(), "rte_dev_probe");

    for p in [ring, null] {
        p.stop().expect("stop");
        p.close().expect("close");
    }
    assert_eq!(pool.in_use_count(), 0);
    drop(eal);
    assert!(!eal::is_initialized());
}

fn lcores_and_launch() {
    assert_eq!(eal::lcore_id(), eal::main_lcore());
    assert_eq!(eal::main_lcore(), 0);
    assert_eq!(eal::worker_lcores(), vec![1]);
    assert_eq!(eal::lcore_count(), 2);
    assert!(eal::tsc_hz() > 0);
    let t0 = eal::rdtsc();
    assert!(eal::rdtsc() > t0);

    eal::launch(1, || eal::lcore_id() as i32 + 41).expect("launch");
    assert_eq!(eal::wait_lcore(1), 42);

    // Captured state moves into the worker and is dropped there.
    let v: Vec<i32> = (1..=3).collect();
    eal::launch(1, move || v.iter().sum()).expect("launch");
    assert_eq!(eal::wait_lcore(1), 6);

    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    eal::launch(1, || panic!("boom")).expect("launch");
    assert_eq!(eal::wait_lcore(1), eal::LAUNCH_PANICKED);
    std::panic::set_hook(prev);

    let on_main = eal::launch(0, || 0).unwrap_err();
    assert_eq!(on_main.errno(), 22);
    assert!(eal::launch(7, || 0).is_err());
    assert_eq!(eal::wait_lcore(7), 0);
}

/// A many-producer, one-consumer mbuf ring: order kept, a full ring
/// leaves the rest with the producer, bytes survive, and a producer on
/// another lcore meets the consumer here.
fn mbuf_rings(pool: &Mempool) {
    assert_eq!(dpdk_sys::mbuf_ring("cfwtest_bad", 100, mempool::SOCKET_ID_ANY).unwrap_err().errno(), 22);
    let (tx, mut rx) = dpdk_sys::mbuf_ring("cfwtest_ring", 64, mempool::SOCKET_ID_ANY).expect("ring");
    assert_eq!(dpdk_sys::mbuf_ring("cfwtest_ring", 64, mempool::SOCKET_ID_ANY).unwrap_err().func(), "rte_ring_create");
    assert_eq!(tx.capacity(), 63);
    assert!(rx.is_empty());
    let fill = |k: usize, b: &mut MbufBurst<32>| {
        for i in 0..b.capacity() {
            let m = pool.alloc_from_slice(&payload(k * 100 + i, 60)).expect("alloc");
            assert!(b.push(m).is_ok());
        }
    };
    // 32 + 31 fit, one stays with the producer.
    let (mut a, mut b) = (MbufBurst::<32>::empty(), MbufBurst::<32>::empty());
    fill(0, &mut a);
    fill(1, &mut b);
    assert_eq!(tx.enqueue_burst(&mut a), 32);
    assert!(a.is_empty());
    assert_eq!(tx.enqueue_burst(&mut b), 31, "63 usable slots");
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].data(), &payload(131, 60)[..], "the one that did not fit is the last");
    assert_eq!(rx.len(), 63);
    let mut out = MbufBurst::<32>::empty();
    for k in 0..2 {
        out.clear();
        let n = rx.dequeue_burst(&mut out);
        assert_eq!(n, if k == 0 { 32 } else { 31 });
        for (i, m) in out.iter().enumerate() {
            let j = k * 32 + i;
            assert_eq!(m.data(), &payload((j / 32) * 100 + j % 32, 60)[..], "order kept");
        }
    }
    out.clear();
    assert_eq!(rx.dequeue_burst(&mut out), 0);
    b.clear();

    // Another lcore produces 10 bursts; this one consumes them all.
    let p = pool.clone();
    let tx2 = tx.clone();
    eal::launch(1, move || {
        let mut sent = 0;
        for k in 0..10 {
            let mut b = MbufBurst::<32>::empty();
            for i in 0..32 {
                let _ = b.push(p.alloc_from_slice(&payload(k * 100 + i, 60)).expect("alloc"));
            }
            while !b.is_empty() {
                sent += tx2.enqueue_burst(&mut b);
            }
        }
        sent as i32
    })
    .expect("launch producer");
    let mut got = 0;
    let t0 = std::time::Instant::now();
    while got < 320 && t0.elapsed() < std::time::Duration::from_secs(10) {
        out.clear();
        for m in out.iter() {
            assert_eq!(m.len(), 60);
        }
        got += rx.dequeue_burst(&mut out);
    }
    out.clear();
    assert_eq!(eal::wait_lcore(1), 320);
    assert_eq!(got, 320, "every mbuf the other lcore enqueued arrived");
}

fn mbuf_editing(pool: &Mempool) {
    let mut m = pool.alloc().expect("alloc");
    assert_eq!(m.len(), 0);
    assert!(m.is_empty());
    assert_eq!(m.headroom(), mempool::PKTMBUF_HEADROOM);
    assert_eq!(m.tailroom(), 2048);
    assert!(m.is_contiguous());

    let body = payload(1, 100);
    m.append(100).expect("append").copy_from_slice(&body);
    assert_eq!((m.len(), m.pkt_len()), (100, 100));
    assert_eq!(m.data(), &body[..]);

    m.prepend(14).expect("prepend").copy_from_slice(&[0xee; 14]);
    assert_eq!(m.len(), 114);
    assert_eq!(m.headroom(), mempool::PKTMBUF_HEADROOM - 14);
    assert_eq!(&m.data()[..14], &[0xee; 14]);
    assert_eq!(&m.data()[14..], &body[..]);

    assert!(m.adj(14));
    assert_eq!(m.data(), &body[..]);
    assert!(m.trim(10));
    assert_eq!(m.data(), &body[..90]);
    assert_eq!(m.pkt_len(), 90);

    // Refusals leave the packet unchanged.
    assert!(!m.adj(91));
    assert!(!m.trim(91));
    assert!(m.prepend(mempool::PKTMBUF_HEADROOM + 1).is_none());
    assert!(m.append(m.tailroom() + 1).is_none());
    assert_eq!(m.data(), &body[..90]);

    m.data_mut()[0] = 0xab;
    assert_eq!(m.data()[0], 0xab);
    assert!(m.linearize());
    assert_eq!(m.rss_hash(), None);
    m.set_port(3);
    assert_eq!(m.port(), 3);

    m.reset();
    assert_eq!(m.len(), 0);
    assert_eq!(m.headroom(), mempool::PKTMBUF_HEADROOM);

    // into_raw / from_raw round trip keeps exactly one owner.
    let raw = m.into_raw();
    assert_eq!(pool.in_use_count(), 1);
    // SAFETY: raw came from into_raw just above and is not used again.
    let m = unsafe { Mbuf::from_raw(raw) }.expect("non-null");
    drop(m);
    assert_eq!(pool.in_use_count(), 0);
    // SAFETY: NULL is explicitly allowed.
    assert!(unsafe { Mbuf::from_raw(std::ptr::null_mut()) }.is_none());

    let c = pool.alloc_from_slice(b"hello").expect("alloc_from_slice");
    assert_eq!(c.data(), b"hello");
    assert!(pool.alloc_from_slice(&[0u8; 5000]).is_none());
}

fn burst_ops(pool: &Mempool) {
    let mut b = MbufBurst::<8>::empty();
    assert_eq!(b.capacity(), 8);
    for i in 0..8 {
        b.push(pool.alloc_from_slice(&[i as u8]).unwrap()).unwrap();
    }
    assert!(b.is_full());
    let extra = pool.alloc().unwrap();
    let extra = b.push(extra).unwrap_err();
    drop(extra);
    assert_eq!(pool.in_use_count(), 8);

    let firsts = |b: &MbufBurst<8>| b.iter().map(|m| m.data()[0]).collect::<Vec<_>>();
    assert_eq!(firsts(&b), [0, 1, 2, 3, 4, 5, 6, 7]);
    for m in &mut b {
        m.data_mut()[0] += 10;
    }
    b[0].data_mut()[0] = 100;
    assert_eq!(firsts(&b), [100, 11, 12, 13, 14, 15, 16, 17]);

    assert_eq!(b.pop().unwrap().data(), &[17]);
    assert_eq!(b.swap_remove(0).data(), &[100]);
    assert_eq!(firsts(&b), [16, 11, 12, 13, 14, 15]);
    assert_eq!(b.remove(1).data(), &[11]);
    assert_eq!(firsts(&b), [16, 12, 13, 14, 15]);
    assert_eq!(pool.in_use_count(), 5);

    b.retain_mut(|m| m.data()[0] % 2 == 0);
    assert_eq!(firsts(&b), [16, 12, 14]);
    assert_eq!(pool.in_use_count(), 3);

    let mut d = b.drain();
    assert_eq!(d.len(), 3);
    assert_eq!(d.next().unwrap().data(), &[16]);
    drop(d); // frees the two not yielded
    assert!(b.is_empty());
    assert_eq!(pool.in_use_count(), 0);

    assert!(pool.alloc_bulk(&mut b, 5));
    assert_eq!(b.len(), 5);
    assert!(!pool.alloc_bulk(&mut b, 4), "only 3 free slots");
    assert_eq!(b.len(), 5);
    let mut other = MbufBurst::<4>::empty();
    assert_eq!(other.append_from(&mut b), 4);
    assert_eq!((other.len(), b.len()), (4, 1));
    b.truncate(0);
    assert_eq!(pool.in_use_count(), 4);
    drop(other); // Drop frees in bulk.
    assert_eq!(pool.in_use_count(), 0);
}

fn ring_loopback(ring: Port, pool: &Mempool) {
    let mut tx: Burst = MbufBurst::new();
    let mut want = Vec::new();
    for i in 0..10 {
        let p = payload(i, 60 + i);
        tx.push(pool.alloc_from_slice(&p).unwrap()).unwrap();
        want.push(p);
    }
    assert_eq!(ring.tx_burst(0, &mut tx), 10);
    assert!(tx.is_empty());
    // Unconfigured queues are refused by the shim, not dereferenced.
    let mut one: Burst = MbufBurst::new();
    one.push(pool.alloc().unwrap()).unwrap();
    assert_eq!(ring.tx_burst(5, &mut one), 0);
    assert_eq!(one.len(), 1);
    assert_eq!(ring.rx_burst(5, &mut one), 0);
    one.clear();

    let mut rx: Burst = MbufBurst::new();
    let mut rxq = ring.rx_queue(0).expect("claim rx queue 0");
    assert!(ring.rx_queue(0).is_err(), "one handle per queue");
    assert_eq!(rxq.rx_burst(&mut rx), 10);
    drop(rxq);
    let got: Vec<Vec<u8>> = rx.iter().map(|m| m.data().to_vec()).collect();
    assert_eq!(got, want);
    // net_ring passes mbufs through untouched: `port` is not set on RX.
    assert_eq!(ring.rx_burst(0, &mut rx), 0, "ring is empty again");

    let bytes: u64 = want.iter().map(|p| p.len() as u64).sum();
    let s = ring.stats().unwrap();
    assert_eq!((s.opackets, s.ipackets), (10, 10), "{s:?}");
    // net_ring counts packets but (in DPDK 22.11) not bytes.
    assert!(
        [0, bytes].contains(&s.obytes) && [0, bytes].contains(&s.ibytes),
        "{s:?}"
    );
    assert_eq!(
        (s.oerrors, s.ierrors, s.imissed, s.rx_nombuf),
        (0, 0, 0, 0),
        "{s:?}"
    );

    // Received mbufs can be sent again (forwarding).
    assert_eq!(ring.tx_burst(0, &mut rx), 10);
    assert_eq!(ring.rx_burst(0, &mut rx), 10);
    rx.clear();
    assert_eq!(pool.in_use_count(), 0);
}

fn ring_partial_tx(ring: Port, pool: &Mempool) {
    ring.reset_stats().unwrap();
    // Fill the ring PMD's ring until a burst is only partly accepted.
    let mut sent = 0usize;
    let mut tx: Burst = MbufBurst::new();
    let (accepted, offered) = loop {
        let base = sent;
        for i in 0..tx.free_slots() {
            tx.push(
                pool.alloc_from_slice(&((base + i) as u32).to_be_bytes())
                    .unwrap(),
            )
            .unwrap();
        }
        let offered = tx.len();
        let n = ring.tx_burst(0, &mut tx);
        sent += n;
        if n < offered {
            break (n, offered);
        }
        assert!(sent < 100_000, "ring never filled");
    };
    assert_eq!(tx.len(), offered - accepted);
    // The unsent ones moved to the front, in order.
    let first_unsent = u32::from_be_bytes(tx[0].data().try_into().unwrap());
    assert_eq!(first_unsent as usize, sent);
    let s = ring.stats().unwrap();
    assert_eq!(s.opackets, sent as u64);
    // Whether a refused TX counts as oerrors is up to the PMD.
    assert!(
        [0, (offered - accepted) as u64].contains(&s.oerrors),
        "{s:?}"
    );
    tx.clear();

    // Drain and check order.
    let mut rx: Burst = MbufBurst::new();
    let mut next = 0u32;
    loop {
        let n = ring.rx_burst(0, &mut rx);
        if n == 0 {
            break;
        }
        for m in rx.drain() {
            assert_eq!(u32::from_be_bytes(m.data().try_into().unwrap()), next);
            next += 1;
        }
    }
    assert_eq!(next as usize, sent);
    assert_eq!(pool.in_use_count(), 0);
}

fn null_rx_tx(null: Port, pool: &Mempool) {
    null.reset_stats().unwrap();
    let mut b = MbufBurst::new();
    // net_null makes up packets (64 bytes by default) from our pool.
    assert_eq!(null.rx_burst(0, &mut b), b.capacity());
    assert!(b.iter().all(|m| m.len() == 64 && m.port() == null.id()));
    assert_eq!(pool.in_use_count(), 64);
    assert_eq!(null.rx_burst(0, &mut b), 0, "burst full");
    assert_eq!(null.tx_burst(0, &mut b), 64);
    assert!(b.is_empty());
    assert_eq!(pool.in_use_count(), 0, "net_null frees what it sends");
    let s = null.stats().unwrap();
    assert_eq!((s.ipackets, s.opackets), (64, 64), "{s:?}");
}
