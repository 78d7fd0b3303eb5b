use super::*;
use crate::types::Epoch;

fn members(n: u8) -> MemberSet {
    MemberSet::from_nodes(Epoch(1), (0..n).map(NodeId)).unwrap()
}

fn pool(n: u32) -> Vec<Ipv4Addr> {
    (0..n).map(|i| Ipv4Addr::from(0xc633_6400 + i)).collect() // 198.51.100.0/24 onwards
}

/// Every block has one holder, a member, with a worker in range; heirs as
/// defined (the holder in the map without the holder).
fn check_holders(m: &BlockMap) {
    let per = m.geometry().blocks();
    for a in 0..m.addresses().len() as u32 {
        for b in 0..per {
            let r = BlockRef { addr: a, block: b };
            let h = m.holder(r).unwrap();
            assert!(m.members() >> h.node.0 & 1 == 1, "{r:?} held by non-member {:?}", h.node);
            assert!(h.worker < m.workers());
        }
    }
    if m.members().count_ones() > 1 {
        for x in member_list(m.members()) {
            let w = m.without(x).unwrap();
            for (r, _) in m.blocks_of(x) {
                assert_eq!(m.heir(r), Some(w.holder(r).unwrap().node), "heir of {r:?}");
            }
        }
    }
}

/// Per address, the members' counts differ by at most one.
fn check_balanced(m: &BlockMap) {
    for a in 0..m.addresses().len() as u32 {
        let c = m.counts(a);
        let held: Vec<u16> = member_list(m.members()).map(|n| c[n.index()]).collect();
        let (lo, hi) = (held.iter().min().unwrap(), held.iter().max().unwrap());
        assert!(hi - lo <= 1, "address {a}: {held:?}");
        assert!(*lo >= 1, "address {a}: a member without a block: {held:?}");
    }
}

/// Pay every debt, releasing the owing member's blocks in order.
fn pay_all(m: &mut BlockMap) {
    while let Some(d) = m.debts().first().copied() {
        let r = m.blocks_of(d.from).find(|(r, _)| r.addr == d.addr).map(|(r, _)| r).unwrap();
        let h = m.release(r, d.from).unwrap();
        assert_eq!(h.node, d.to);
    }
}

#[test]
fn geometry_exact_counts() {
    // (size, reserved ports) → blocks, first port, last block's ports.
    type Golden = (u16, bool, u16, u16, (u16, u16));
    let golden: &[Golden] = &[
        (512, false, 126, 1024, (65024, 65535)), // 64 512 ports / 512, exactly
        (512, true, 128, 1, (65025, 65535)),     // 65 535 ports: the last block 511
        (4096, false, 16, 1024, (62464, 65535)), // 15.75 → 16, the last 3072
        (1000, false, 65, 1024, (65024, 65535)),
        (32, false, 2016, 1024, (65504, 65535)),
        (32, true, 2048, 1, (65505, 65535)),
    ];
    for &(size, reserved, blocks, first, last) in golden {
        let g = Geometry::new(size, reserved).unwrap();
        assert_eq!(g.blocks(), blocks, "{size} {reserved}");
        assert_eq!(g.first_port(), first);
        assert_eq!(g.ports(blocks - 1), Some(last), "{size} {reserved}");
        assert_eq!(g.ports(blocks), None);
        let total: u32 = (0..blocks).map(|b| u32::from(g.block_len(b))).sum();
        assert_eq!(total, 65_536 - u32::from(first), "every port in exactly one block");
    }
    let g = Geometry::new(512, false).unwrap();
    assert_eq!(g.block_of(1023), None);
    assert_eq!(g.block_of(1024), Some(0));
    assert_eq!(g.block_of(1535), Some(0));
    assert_eq!(g.block_of(1536), Some(1));
    assert_eq!(g.block_of(65535), Some(125));
    assert_eq!(g.ports(1), Some((1536, 2047)));
    assert_eq!(Geometry::new(31, false), Err(BlockError::SizeOutOfRange(31)));
    assert_eq!(Geometry::new(4097, true), Err(BlockError::SizeOutOfRange(4097)));
}

#[test]
fn deal_is_fair_for_1_to_16_members() {
    let g = Geometry::new(DEFAULT_BLOCK_SIZE, false).unwrap();
    for n in 1..=16u8 {
        for addrs in [1u32, 3, 16, 40] {
            for workers in [1u8, 2, 3] {
                let m = BlockMap::deal(g, &pool(addrs), &members(n), workers).unwrap();
                check_balanced(&m);
                check_holders(&m);
                // Pool totals differ by at most one between members...
                let totals: Vec<usize> = (0..n).map(|i| m.blocks_of(NodeId(i)).count()).collect();
                let (lo, hi) = (totals.iter().min().unwrap(), totals.iter().max().unwrap());
                assert!(hi - lo <= 1, "{n} members, {addrs} addresses: {totals:?}");
                assert_eq!(totals.iter().sum::<usize>(), 126 * addrs as usize);
                // ...and a member's blocks over its workers too.
                for i in 0..n {
                    let mut per = vec![0; usize::from(workers)];
                    for (_, h) in m.blocks_of(NodeId(i)) {
                        per[usize::from(h.worker)] += 1;
                    }
                    assert!(per.iter().max().unwrap() - per.iter().min().unwrap() <= 1, "{per:?}");
                }
            }
        }
    }
    // Exact: 126 blocks over 5 members are 26, 25, 25, 25, 25 for address 0
    // (b mod 5), and the extra block moves on one member per address; 126
    // over 8 leaves 6 extra blocks per address: members 0–5, then 6, 7, 0–3.
    let m = BlockMap::deal(g, &pool(2), &members(5), 1).unwrap();
    assert_eq!(&m.counts(0)[..5], &[26, 25, 25, 25, 25]);
    assert_eq!(&m.counts(1)[..5], &[25, 26, 25, 25, 25]);
    let m = BlockMap::deal(g, &pool(2), &members(8), 1).unwrap();
    assert_eq!(&m.counts(0)[..8], &[16, 16, 16, 16, 16, 16, 15, 15]);
    assert_eq!(&m.counts(1)[..8], &[16, 16, 16, 16, 15, 15, 16, 16]);
}

#[test]
fn lookup_finds_the_holder_from_address_and_port() {
    let g = Geometry::new(512, false).unwrap();
    let addrs = pool(3);
    let m = BlockMap::deal(g, &[addrs[2], addrs[0], addrs[1]], &members(3), 2).unwrap();
    assert_eq!(m.addresses(), &addrs[..], "sorted");
    // Address 1, port 1024 + 512·4 + 7 is block 4: node (4 + 1·(126 mod 3))
    // mod 3 = 1.
    let h = m.lookup(addrs[1], 1024 + 512 * 4 + 7).unwrap();
    assert_eq!(h.node, NodeId(1));
    assert_eq!(m.block(addrs[1], 3071), Some(BlockRef { addr: 1, block: 3 }));
    assert_eq!(m.lookup(addrs[1], 80), None, "below the first port");
    assert_eq!(m.lookup(Ipv4Addr::new(192, 0, 2, 1), 5000), None, "not a pool address");
    assert_eq!(BlockMap::deal(g, &[addrs[0], addrs[0]], &members(3), 1), Err(BlockError::DuplicateAddress(addrs[0])));
    assert_eq!(BlockMap::deal(g, &[], &members(3), 1), Err(BlockError::PoolSize(0)));
    assert_eq!(BlockMap::deal(g, &addrs, &members(3), 0), Err(BlockError::Workers(0)));
    assert_eq!(BlockMap::deal(g, &addrs, &members(0), 1), Err(BlockError::NoMembers));
}

#[test]
fn leave_moves_only_the_leavers_blocks_to_their_heirs() {
    let g = Geometry::new(512, false).unwrap();
    for n in 2..=16u8 {
        let m = BlockMap::deal(g, &pool(4), &members(n), 2).unwrap();
        for x in 0..n {
            let gone = NodeId(x);
            let w = m.without(gone).unwrap();
            check_balanced(&w);
            for a in 0..4u32 {
                for b in 0..g.blocks() {
                    let r = BlockRef { addr: a, block: b };
                    let (before, after) = (m.holder(r).unwrap(), w.holder(r).unwrap());
                    if before.node == gone {
                        assert_eq!(Some(after.node), m.heir(r), "the heir takes {r:?}");
                    } else {
                        assert_eq!(before, after, "{r:?} moved between members that stay");
                    }
                }
            }
            assert_eq!(w.version(), m.version() + 1);
        }
    }
    let one = BlockMap::deal(g, &pool(1), &members(1), 1).unwrap();
    assert_eq!(one.without(NodeId(0)), Err(BlockError::NoMembers));
    assert_eq!(one.heir(BlockRef { addr: 0, block: 0 }), None, "a lone member has no heir");
}

#[test]
fn join_moves_nothing_until_free_blocks_are_released() {
    let g = Geometry::new(512, false).unwrap();
    for n in 1..16u8 {
        let m = BlockMap::deal(g, &pool(3), &members(n), 2).unwrap();
        let joiner = NodeId(n);
        let j = m.with(joiner).unwrap();
        assert_eq!(j.holders, m.holders, "a join moves no block by itself");
        // The joiner is owed its share of every address: ⌊126 / (n+1)⌋.
        for a in 0..3u32 {
            let owed: u16 = j.debts().iter().filter(|d| d.addr == a && d.to == joiner).map(|d| d.count).sum();
            assert_eq!(usize::from(owed), 126 / (usize::from(n) + 1), "{n} members, address {a}");
        }
        let mut paid = j.clone();
        pay_all(&mut paid);
        check_balanced(&paid);
        check_holders(&paid);
        // Only blocks that went to the joiner changed.
        for (i, (before, after)) in m.holders.iter().zip(&paid.holders).enumerate() {
            assert!(before == after || after.node == joiner, "block {i}: {before:?} → {after:?}");
        }
    }
}

#[test]
fn release_refuses_what_is_not_owed_or_not_held() {
    let g = Geometry::new(512, false).unwrap();
    let m = BlockMap::deal(g, &pool(1), &members(2), 1).unwrap();
    let mut j = m.with(NodeId(2)).unwrap();
    let r0 = j.blocks_of(NodeId(0)).next().unwrap().0;
    assert_eq!(j.release(r0, NodeId(1)), Err(BlockError::NotHolder(NodeId(1))));
    assert_eq!(j.release(BlockRef { addr: 9, block: 0 }, NodeId(0)), Err(BlockError::NoSuchBlock));
    let before = j.clone();
    assert_eq!(j.release(r0, NodeId(0)).unwrap().node, NodeId(2));
    assert_eq!(j.version(), before.version() + 1);
    // Node 0 owes 21 (63 → 42); after paying them all, nothing more.
    while j.owed(0, NodeId(0)) > 0 {
        let r = j.blocks_of(NodeId(0)).next().unwrap().0;
        j.release(r, NodeId(0)).unwrap();
    }
    let r = j.blocks_of(NodeId(0)).next().unwrap().0;
    assert_eq!(j.release(r, NodeId(0)), Err(BlockError::NothingOwed(NodeId(0))));
    assert_eq!(j.counts(0)[..3], [42, 63, 21], "node 1 has not paid yet");
    assert_eq!(j.owed(0, NodeId(1)), 21);
}

/// Random join and leave sequences between 1 and 16 members, debts paid
/// partly: the invariants hold after every step, and a block changes
/// holder only by a leave (to its heir) or a release (to the one owed).
#[test]
fn random_join_leave_sequences_keep_the_invariants() {
    let g = Geometry::new(1024, true).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..12 {
        let mut m = BlockMap::deal(g, &pool(5), &members(1 + rnd(16) as u8), 1 + rnd(3) as u8).unwrap();
        for _ in 0..30 {
            let present: Vec<NodeId> = member_list(m.members()).collect();
            let absent: Vec<NodeId> = (0..16).map(NodeId).filter(|n| !present.contains(n)).collect();
            let before = m.clone();
            match rnd(3) {
                0 if present.len() > 1 => {
                    let gone = present[rnd(present.len() as u64) as usize];
                    m = m.without(gone).unwrap();
                    for (i, (b, a)) in before.holders.iter().zip(&m.holders).enumerate() {
                        if b.node == gone {
                            assert_eq!(a.node, before.heirs[i]);
                        } else {
                            assert_eq!(a, b);
                        }
                    }
                    assert!(m.debts().iter().all(|d| d.from != gone && d.to != gone));
                }
                1 if !absent.is_empty() => {
                    m = m.with(absent[rnd(absent.len() as u64) as usize]).unwrap();
                    assert_eq!(m.holders, before.holders);
                }
                _ => {
                    // Pay some debts.
                    for _ in 0..rnd(40) {
                        let Some(d) = m.debts().first().copied() else {
                            break;
                        };
                        let r = m.blocks_of(d.from).find(|(r, _)| r.addr == d.addr).unwrap().0;
                        m.release(r, d.from).unwrap();
                    }
                }
            }
            check_holders(&m);
            let mut paid = m.clone();
            pay_all(&mut paid);
            paid.rebalance();
            assert!(paid.debts().is_empty(), "paid debts leave the map balanced: {:?}", paid.debts());
            check_balanced(&paid);
        }
    }
}

#[test]
fn encoding_golden_bytes() {
    // One address of 16 4096-port blocks over members 1 and 2, one worker:
    // block b to member (b mod 2) in id order → nodes 1, 2, 1, 2, …
    let g = Geometry::new(4096, false).unwrap();
    let m = BlockMap::deal(
        g,
        &[Ipv4Addr::new(198, 51, 100, 7)],
        &MemberSet::from_nodes(Epoch(1), [NodeId(1), NodeId(2)]).unwrap(),
        1,
    )
    .unwrap();
    let b = m.encode();
    let mut want = vec![
        MAP_FORMAT, 0x10, 0x00, // block size 4096
        0, 1, // no reserved ports, one worker
        0x00, 0x06, // members 1 and 2
        0, 0, 0, 0, 0, 0, 0, 1, // version 1
        0, 0, 0, 1, 198, 51, 100, 7, // one address
    ];
    for b in 0..16u16 {
        want.extend_from_slice(&(if b % 2 == 0 { 1u16 << 5 } else { 2 << 5 }).to_be_bytes());
    }
    want.extend_from_slice(&[0, 0]); // no debts
    assert_eq!(b, want);
    assert_eq!(BlockMap::decode(&b).unwrap(), m);
    // A debt after a join: 16 blocks over 3 members are 6, 5, 5 (the extra
    // to node 1: among those holding most, the lowest id), so node 1 owes
    // node 3 two blocks and node 2 three.
    let j = m.with(NodeId(3)).unwrap();
    let e = j.encode();
    assert_eq!(&e[e.len() - 18..], &[0, 2, 0, 0, 0, 0, 1, 3, 0, 2, 0, 0, 0, 0, 2, 3, 0, 3][..], "{:?}", j.debts());
    assert_eq!(BlockMap::decode(&e).unwrap(), j);
}

#[test]
fn every_map_of_a_random_history_reads_back_equal() {
    let g = Geometry::new(512, true).unwrap();
    let mut m = BlockMap::deal(g, &pool(3), &members(4), 3).unwrap();
    for step in 0..40u8 {
        m = match step % 5 {
            0 => m.with(NodeId(4 + step / 5)).unwrap(),
            1 | 2 => {
                let mut p = m.clone();
                if let Some(d) = p.debts().first().copied() {
                    let r = p.blocks_of(d.from).find(|(r, _)| r.addr == d.addr).unwrap().0;
                    p.release(r, d.from).unwrap();
                }
                p
            }
            _ => m.without(member_list(m.members()).next().unwrap()).unwrap_or(m),
        };
        let b = m.encode();
        assert_eq!(BlockMap::decode(&b).as_ref(), Ok(&m), "step {step}");
    }
}

#[test]
fn hostile_map_bytes_are_refused_never_panic() {
    let g = Geometry::new(1024, false).unwrap();
    let m = BlockMap::deal(g, &pool(2), &members(3), 2).unwrap().with(NodeId(5)).unwrap();
    let b = m.encode();
    for n in 0..b.len() {
        assert!(BlockMap::decode(&b[..n]).is_err(), "a prefix of {n} bytes");
    }
    let mut long = b.clone();
    long.push(0);
    assert_eq!(BlockMap::decode(&long), Err(MapDecodeError::Trailing));
    let with = |i: usize, v: u8| {
        let mut x = b.clone();
        x[i] = v;
        BlockMap::decode(&x)
    };
    assert_eq!(with(0, 2), Err(MapDecodeError::Format));
    assert_eq!(with(3, 2), Err(MapDecodeError::Invalid("reserved-ports flag")));
    assert_eq!(with(4, 0), Err(MapDecodeError::Invalid("worker count")));
    assert_eq!(with(1, 0), Err(MapDecodeError::Invalid("block size")));
    // The first holder (after the 19-byte header and two addresses) names
    // node 15, not a member.
    let first_holder = 19 + 8;
    assert_eq!(with(first_holder, 15 << 1), Err(MapDecodeError::Invalid("holder")));
    // Addresses out of order.
    assert_eq!(with(19 + 3, 5), Err(MapDecodeError::Invalid("addresses not ascending")));
    // Random bytes: an answer, never a panic.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for len in 0..400 {
        let v: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = BlockMap::decode(&v);
        let mut y = b.clone();
        y[len % b.len()] ^= x as u8 | 1;
        let _ = BlockMap::decode(&y);
    }
}
