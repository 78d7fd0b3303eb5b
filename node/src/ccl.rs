//! The driver side of the cluster control link (CCL): which queue gets
//! what, the hand-off between the worker and the control lcore, and the
//! control lcore's heartbeats.
//!
//! The CCL port has two RX/TX queue pairs where the device offers them
//! (af_packet: `qpairs=2`). Queue 0 is the worker's: it polls it like a data
//! port and runs every frame through `Pipeline::process` (forwarded packets,
//! owner queries and replies, flow records, ARP on the CCL). Queue 1 is the
//! control lcore's (SPEC P2). A NIC or af_packet spreads received frames
//! over the two queues by a flow hash, not by message kind, so each side
//! passes on what belongs to the other:
//!
//! - control-channel messages (UDP source port `CCL_UDP_PORT + 255`: the
//!   heartbeats) go to the control lcore, which opens them with its own
//!   `Opener` (its own replay windows for channel 255);
//! - everything else goes to the worker.
//!
//! The hand-off queues are bounded lock-free `ArrayQueue`s of mbufs; a full
//! queue frees the mbuf and counts a drop. With one queue pair the worker
//! receives everything, and the control lcore's heartbeats reach the wire
//! through the worker's TX (queue `tx_via_worker`).
//!
//! Invariant: the worker never blocks on, and never allocates for, the
//! hand-off; the control lcore only touches queue 1 of the CCL port.

use crossbeam_queue::ArrayQueue;
use dataplane::ccl::{
    CclCounters, CclKey, FramePath, Heartbeat, Message, Opener, Sealer, CCL_UDP_PORT, CONTROL_CHANNEL,
};
use dataplane::cluster::MemberSet;
use dataplane::NodeId;
use dpdk_sys::{Mbuf, MbufBurst, Mempool, Port};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Capacity of each hand-off queue (mbufs).
pub const HANDOFF_CAPACITY: usize = 2048;
/// Heartbeat period.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// The UDP source port of control-channel messages.
pub const CONTROL_SRC_PORT: u16 = CCL_UDP_PORT + CONTROL_CHANNEL as u16;

/// What the worker and the control lcore share about the CCL.
pub struct CclShared {
    /// Frames the control lcore received on queue 1 that are the worker's.
    pub to_worker: ArrayQueue<Mbuf>,
    /// Control-channel frames the worker received on queue 0.
    pub to_control: ArrayQueue<Mbuf>,
    /// Frames the control lcore wants sent when the port has one queue.
    pub tx_via_worker: ArrayQueue<Mbuf>,
    pub to_worker_drops: AtomicU64,
    pub to_control_drops: AtomicU64,
    pub tx_via_worker_drops: AtomicU64,
    /// Frames handed over, per direction.
    pub to_worker_frames: AtomicU64,
    pub to_control_frames: AtomicU64,
}

impl CclShared {
    pub fn new() -> CclShared {
        CclShared {
            to_worker: ArrayQueue::new(HANDOFF_CAPACITY),
            to_control: ArrayQueue::new(HANDOFF_CAPACITY),
            tx_via_worker: ArrayQueue::new(64),
            to_worker_drops: AtomicU64::new(0),
            to_control_drops: AtomicU64::new(0),
            tx_via_worker_drops: AtomicU64::new(0),
            to_worker_frames: AtomicU64::new(0),
            to_control_frames: AtomicU64::new(0),
        }
    }
}

/// Whether `frame` is a control-channel CCL message (Ethernet, optional
/// 802.1Q tags, IPv4, UDP from `CONTROL_SRC_PORT` to `CCL_UDP_PORT`). Only
/// peeks at header bytes; a frame too short to tell is not (the worker's
/// pipeline then counts it).
pub fn is_control_frame(frame: &[u8]) -> bool {
    let mut off = 12;
    let mut ethertype = match frame.get(off..off + 2) {
        Some(b) => u16::from_be_bytes([b[0], b[1]]),
        None => return false,
    };
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        off += 4;
        ethertype = match frame.get(off..off + 2) {
            Some(b) => u16::from_be_bytes([b[0], b[1]]),
            None => return false,
        };
    }
    if ethertype != 0x0800 {
        return false;
    }
    let ip = off + 2;
    let Some(&vihl) = frame.get(ip) else { return false };
    if vihl >> 4 != 4 || frame.get(ip + 9) != Some(&17) {
        return false;
    }
    let udp = ip + usize::from(vihl & 0x0f) * 4;
    match frame.get(udp..udp + 4) {
        Some(p) => {
            u16::from_be_bytes([p[0], p[1]]) == CONTROL_SRC_PORT && u16::from_be_bytes([p[2], p[3]]) == CCL_UDP_PORT
        }
        None => false,
    }
}

/// One member as `show cluster` lists it.
#[derive(Clone, Debug)]
pub struct Peer {
    pub id: NodeId,
    pub name: String,
    pub ccl_address: Ipv4Addr,
    pub last_heard: Option<Instant>,
    pub heartbeats: u64,
    /// Incarnation of the last heartbeat (changes when the peer restarts).
    pub incarnation: u32,
}

/// The control lcore's CCL endpoint: queue 1 of the CCL port (or the
/// worker's queue through `tx_via_worker`), heartbeats out, heartbeats in.
pub struct CclControl {
    port: Port,
    /// `Some(1)`: the control queue; `None`: one queue, the worker's.
    queue: Option<u16>,
    pool: Arc<Mempool>,
    shared: Arc<CclShared>,
    sealer: Sealer,
    opener: Opener,
    path: FramePath,
    members: MemberSet,
    priority: u8,
    pub me: NodeId,
    pub peers: Vec<Peer>,
    next_heartbeat: Instant,
    pub heartbeats_sent: u64,
    pub heartbeat_send_failures: u64,
    /// Control-channel messages that were not heartbeats (none yet).
    pub other_control_messages: u64,
    rx: MbufBurst,
    tx: MbufBurst,
}

pub struct CclControlConfig {
    pub port: Port,
    pub two_queues: bool,
    pub pool: Arc<Mempool>,
    pub shared: Arc<CclShared>,
    pub key: CclKey,
    pub me: NodeId,
    pub incarnation: u32,
    pub members: MemberSet,
    pub priority: u8,
    pub mac: [u8; 6],
    pub address: Ipv4Addr,
    pub broadcast: Ipv4Addr,
    pub peers: Vec<(NodeId, String, Ipv4Addr)>,
}

impl CclControl {
    pub fn new(c: CclControlConfig) -> Result<CclControl, dataplane::ccl::CclError> {
        Ok(CclControl {
            port: c.port,
            queue: c.two_queues.then_some(1),
            pool: c.pool,
            shared: c.shared,
            sealer: Sealer::new(&c.key, c.me, CONTROL_CHANNEL, c.incarnation)?,
            opener: Opener::new(&c.key, c.me),
            path: FramePath { src_mac: c.mac, dst_mac: [0xff; 6], src_ip: c.address, dst_ip: c.broadcast },
            members: c.members,
            priority: c.priority,
            me: c.me,
            peers: c.peers
                .into_iter()
                .map(|(id, name, ccl_address)| Peer {
                    id,
                    name,
                    ccl_address,
                    last_heard: None,
                    heartbeats: 0,
                    incarnation: 0,
                })
                .collect(),
            next_heartbeat: Instant::now(),
            heartbeats_sent: 0,
            heartbeat_send_failures: 0,
            other_control_messages: 0,
            rx: MbufBurst::new(),
            tx: MbufBurst::new(),
        })
    }

    /// Whether the port runs a separate control queue.
    pub fn queues(&self) -> u16 {
        if self.queue.is_some() {
            2
        } else {
            1
        }
    }

    /// Counters of the control channel (heartbeats out and in, drops).
    pub fn counters(&self) -> CclCounters {
        let mut c = *self.opener.counters();
        c.add(self.sealer.counters());
        c
    }

    /// One round: receive on the control queue, take what the worker passed
    /// on, send a heartbeat when due. Returns how many frames it passed on
    /// to the worker (data-plane CCL traffic waiting on this lcore: the
    /// caller polls faster while there is some; heartbeats do not count).
    pub fn poll(&mut self, now: Instant) -> usize {
        let mut handled = 0;
        if let Some(q) = self.queue {
            // Drain the queue (bounded: a few bursts per round).
            for _ in 0..64 {
                let n = self.port.rx_burst(q, &mut self.rx);
                if n == 0 {
                    break;
                }
                let mut rx = std::mem::replace(&mut self.rx, MbufBurst::new());
                for m in rx.drain() {
                    if is_control_frame(m.data()) {
                        self.receive(now, &m);
                    } else {
                        handled += 1;
                        match self.shared.to_worker.push(m) {
                            Ok(()) => {
                                self.shared.to_worker_frames.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(m) => {
                                self.shared.to_worker_drops.fetch_add(1, Ordering::Relaxed);
                                drop(m);
                            }
                        }
                    }
                }
                self.rx = rx;
            }
        }
        while let Some(m) = self.shared.to_control.pop() {
            self.receive(now, &m);
        }
        if now >= self.next_heartbeat {
            self.send_heartbeat();
            self.next_heartbeat = now + HEARTBEAT_INTERVAL;
        }
        handled
    }

    fn receive(&mut self, now: Instant, m: &Mbuf) {
        let Ok(o) = self.opener.open_frame(m.data()) else { return };
        match o.msg {
            Message::Heartbeat(_) => {
                if let Some(p) = self.peers.iter_mut().find(|p| p.id == o.sender) {
                    p.last_heard = Some(now);
                    p.heartbeats += 1;
                    p.incarnation = o.incarnation;
                }
            }
            _ => self.other_control_messages += 1,
        }
    }

    fn send_heartbeat(&mut self) {
        let hb = Message::Heartbeat(Heartbeat { priority: self.priority, state: 0, member_bitmap: self.members.bits() });
        let mut buf = [0u8; 256];
        let len = match self.sealer.seal_frame(&self.path, self.members.epoch(), &hb, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                log::warn!("heartbeat not sealed: {e}");
                self.heartbeat_send_failures += 1;
                return;
            }
        };
        let Some(m) = self.pool.alloc_from_slice(&buf[..len]) else {
            self.heartbeat_send_failures += 1;
            return;
        };
        match self.queue {
            Some(q) => {
                if self.tx.push(m).is_err() {
                    self.heartbeat_send_failures += 1;
                    return;
                }
                let sent = self.port.tx_burst(q, &mut self.tx);
                if sent == 0 {
                    self.heartbeat_send_failures += 1;
                    self.tx.clear();
                    return;
                }
            }
            None => {
                if let Err(m) = self.shared.tx_via_worker.push(m) {
                    self.shared.tx_via_worker_drops.fetch_add(1, Ordering::Relaxed);
                    self.heartbeat_send_failures += 1;
                    drop(m);
                    return;
                }
            }
        }
        self.heartbeats_sent += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(src_port: u16, dst_port: u16, vlan: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0, 5]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 19, 0, 11, 198, 19, 0, 255];
        f.append(&mut ip);
        f.extend_from_slice(&src_port.to_be_bytes());
        f.extend_from_slice(&dst_port.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    #[test]
    fn control_frames_are_told_apart() {
        assert!(is_control_frame(&frame(31555, 31300, false)));
        assert!(is_control_frame(&frame(31555, 31300, true)));
        assert!(!is_control_frame(&frame(31300, 31300, false)), "worker channel 0");
        assert!(!is_control_frame(&frame(31555, 53, false)));
        let mut tcp = frame(31555, 31300, false);
        tcp[14 + 9] = 6;
        assert!(!is_control_frame(&tcp));
        let mut arp = frame(31555, 31300, false);
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!is_control_frame(&arp));
        let f = frame(31555, 31300, false);
        for n in 0..f.len() {
            // Too short to tell: not a control frame, never a panic.
            let _ = is_control_frame(&f[..n]);
        }
        assert!(!is_control_frame(&f[..14 + 20 + 3]));
        assert!(is_control_frame(&f[..14 + 20 + 4]));
    }
}
