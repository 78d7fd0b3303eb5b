//! Bulk transfers of the replicated state over the CCL, which has no
//! acknowledgements (SPEC M7): the byte stream (`replica::Replica::encode`)
//! is cut into chunks that each fit one MTU-1500 datagram
//! (`SYNC_CHUNK_DATA` bytes), and the **requester drives**: it asks for a
//! window of chunks from the first one it lacks ([`SyncRequest`]), asks
//! again as soon as that window is complete, and after a retransmission
//! timeout asks again from the first missing chunk. A request is the
//! acknowledgement; a lost chunk or request costs one timeout; a
//! duplicate chunk is ignored. The server keeps a snapshot of the stream
//! per transfer so every chunk of one transfer comes from one state.
//!
//! Invariants (bounded memory):
//! - a node pulls at most one transfer at a time, whose buffer is at most
//!   `Limits::transfer_bytes` (a transfer announcing more chunks is
//!   aborted before anything is reserved);
//! - a node serves at most `Limits::serving` transfers at once, each
//!   dropped after two hold times without a request; a request beyond the
//!   limit is refused (counted) and retried by its sender;
//! - chunks are matched on (sender, transfer id, addressee incarnation);
//!   anything else is ignored.

use dataplane::ccl::{SyncChunk, SyncRequest, SYNC_CHUNK_DATA};
use dataplane::{Duration, NodeId, Timestamp};

/// Chunks asked for per request.
pub(super) const WINDOW: u8 = 16;

/// The transfer this node pulls.
#[derive(Clone, Debug)]
pub(super) struct Pull {
    pub(super) from: NodeId,
    pub(super) xfer: u32,
    pub(super) full: bool,
    pub(super) since: u64,
    pub(super) config_version: u64,
    pub(super) started: Timestamp,
    total: Option<u32>,
    buf: Vec<u8>,
    have: Vec<bool>,
    received: u32,
    next: u32,
    last_request: Timestamp,
    /// Set when the requested window is complete: ask for the next one.
    due: bool,
}

pub(super) enum PullEvent {
    /// Stored; maybe ask for more (`Pull::due`).
    Stored,
    /// The whole stream.
    Complete(Vec<u8>),
    /// Not ours, or a duplicate.
    Ignored,
    /// The transfer cannot go on (too large, inconsistent chunk sizes).
    Abort,
}

impl Pull {
    pub(super) fn new(now: Timestamp, from: NodeId, xfer: u32, full: bool, since: u64, config_version: u64) -> Pull {
        Pull {
            from,
            xfer,
            full,
            since,
            config_version,
            started: now,
            total: None,
            buf: Vec::new(),
            have: Vec::new(),
            received: 0,
            next: 0,
            last_request: now,
            due: true,
        }
    }

    /// The request to send now: at once when a window completed (or at
    /// the start), else after `rto` without progress.
    pub(super) fn request(&mut self, now: Timestamp, rto: Duration) -> Option<SyncRequest> {
        if !self.due && now.since(self.last_request) < rto {
            return None;
        }
        self.due = false;
        self.last_request = now;
        Some(SyncRequest {
            to: self.from,
            xfer: self.xfer,
            since: self.since,
            config_version: self.config_version,
            next: self.next,
            window: WINDOW,
            full: self.full,
        })
    }

    pub(super) fn on_chunk(&mut self, c: &SyncChunk<'_>, max_bytes: usize) -> PullEvent {
        let total = match self.total {
            Some(t) if t != c.total => return PullEvent::Abort,
            Some(t) => t,
            None => {
                let max_chunks = max_bytes.div_ceil(SYNC_CHUNK_DATA).max(1);
                if c.total as usize > max_chunks {
                    return PullEvent::Abort;
                }
                self.total = Some(c.total);
                self.have = vec![false; c.total as usize];
                self.buf = Vec::new();
                c.total
            }
        };
        let i = c.index as usize;
        let last = c.index + 1 == total;
        if (!last && c.data.len() != SYNC_CHUNK_DATA) || (last && c.data.len() > SYNC_CHUNK_DATA) {
            return PullEvent::Abort;
        }
        match self.have.get(i) {
            Some(false) => {}
            _ => return PullEvent::Ignored,
        }
        let at = i * SYNC_CHUNK_DATA;
        if self.buf.len() < at + c.data.len() {
            self.buf.resize(at + c.data.len(), 0);
        }
        self.buf[at..at + c.data.len()].copy_from_slice(c.data);
        self.have[i] = true;
        self.received += 1;
        if self.received == total {
            return PullEvent::Complete(std::mem::take(&mut self.buf));
        }
        let window_end = (self.next + u32::from(WINDOW)).min(total);
        if (self.next..window_end).all(|k| self.have[k as usize]) {
            self.next = (window_end..total).find(|&k| !self.have[k as usize]).unwrap_or(total);
            self.due = true;
        }
        PullEvent::Stored
    }
}

/// One transfer this node serves.
#[derive(Clone, Debug)]
struct Serve {
    to: NodeId,
    to_incarnation: u32,
    xfer: u32,
    stream: Vec<u8>,
    total: u32,
    last: Timestamp,
}

/// The transfers this node serves.
#[derive(Clone, Debug, Default)]
pub(super) struct Serving {
    serves: Vec<Serve>,
}

/// What a request asks of a transfer: its id, the first chunk wanted and
/// how many from there (a [`SyncRequest`] or a query request).
#[derive(Copy, Clone, Debug)]
pub(super) struct Window {
    pub(super) xfer: u32,
    pub(super) next: u32,
    pub(super) window: u8,
}

impl From<&SyncRequest> for Window {
    fn from(r: &SyncRequest) -> Window {
        Window { xfer: r.xfer, next: r.next, window: r.window }
    }
}

/// A chunk to send, owning its bytes (`Outgoing::SyncChunk`,
/// `Outgoing::QueryChunk`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkOut {
    pub to: NodeId,
    pub to_incarnation: u32,
    pub xfer: u32,
    pub index: u32,
    pub total: u32,
    pub data: Vec<u8>,
}

impl ChunkOut {
    /// The chunk as the codec sees it.
    pub fn view(&self) -> SyncChunk<'_> {
        SyncChunk { to: self.to, to_incarnation: self.to_incarnation, xfer: self.xfer, index: self.index, total: self.total, data: &self.data }
    }
}

impl Serving {
    pub(super) fn len(&self) -> usize {
        self.serves.len()
    }

    /// Whether transfer `xfer` to `from` (incarnation `inc`) is served.
    pub(super) fn has(&self, from: NodeId, inc: u32, xfer: u32) -> bool {
        self.serves.iter().any(|s| s.to == from && s.xfer == xfer && s.to_incarnation == inc)
    }

    /// Chunks for a request (`req`: transfer id, next chunk, window) from
    /// `from` (incarnation `inc`); `make` builds the stream for a new
    /// transfer. `None`: refused, serving the limit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_request(
        &mut self,
        now: Timestamp,
        from: NodeId,
        inc: u32,
        req: Window,
        limit: usize,
        idle: Duration,
        make: impl FnOnce() -> Vec<u8>,
    ) -> Option<(bool, Vec<ChunkOut>)> {
        let mut new = false;
        let at = match self.serves.iter().position(|s| s.to == from && s.xfer == req.xfer && s.to_incarnation == inc) {
            Some(i) => i,
            None => {
                // One transfer per requester: a new one replaces its old.
                self.serves.retain(|s| s.to != from);
                if self.serves.len() >= limit {
                    let oldest = (0..self.serves.len()).min_by_key(|&i| self.serves[i].last)?;
                    if now.since(self.serves[oldest].last) < idle {
                        return None;
                    }
                    self.serves.swap_remove(oldest);
                }
                let stream = make();
                let total = stream.len().div_ceil(SYNC_CHUNK_DATA).max(1) as u32;
                self.serves.push(Serve { to: from, to_incarnation: inc, xfer: req.xfer, stream, total, last: now });
                new = true;
                self.serves.len() - 1
            }
        };
        let s = &mut self.serves[at];
        s.last = now;
        let end = req.next.saturating_add(u32::from(req.window)).min(s.total);
        let chunks = (req.next..end)
            .map(|index| {
                let a = index as usize * SYNC_CHUNK_DATA;
                let b = (a + SYNC_CHUNK_DATA).min(s.stream.len());
                ChunkOut {
                    to: s.to,
                    to_incarnation: s.to_incarnation,
                    xfer: s.xfer,
                    index,
                    total: s.total,
                    data: s.stream.get(a..b).unwrap_or(&[]).to_vec(),
                }
            })
            .collect();
        Some((new, chunks))
    }

    /// Drop transfers idle for `idle`.
    pub(super) fn expire(&mut self, now: Timestamp, idle: Duration) {
        self.serves.retain(|s| now.since(s.last) < idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn req(p: &mut Pull, now: u64) -> Option<SyncRequest> {
        p.request(Timestamp(now * MS), Duration::from_millis(25))
    }

    /// A stream through a lossy exchange: every chunk arrives, in spite of
    /// losing a third of the chunks and every other one of the first requests.
    #[test]
    fn lossy_transfer_completes_and_reassembles() {
        let stream: Vec<u8> = (0..(SYNC_CHUNK_DATA * 40 + 123)).map(|i| (i * 31 % 251) as u8).collect();
        let mut p = Pull::new(Timestamp(0), NodeId(1), 7, true, 0, 0);
        let mut s = Serving::default();
        let mut got = None;
        let mut lost = 0x9e37_79b9_7f4a_7c15u64;
        let mut requests = 0;
        for t in 0..400u64 {
            let Some(r) = req(&mut p, t) else { continue };
            requests += 1;
            if requests % 2 == 0 && requests < 10 {
                continue; // request lost
            }
            let (_, chunks) =
                s.on_request(Timestamp(t * MS), NodeId(2), 5, (&r).into(), 4, Duration::from_secs(1), || stream.clone()).unwrap();
            for c in chunks {
                // A third of the chunks lost, pseudo-randomly.
                lost ^= lost << 13;
                lost ^= lost >> 7;
                lost ^= lost << 17;
                if lost % 3 == 0 {
                    continue;
                }
                let m = c.view();
                if let PullEvent::Complete(b) = p.on_chunk(&m, 1 << 20) {
                    got = Some(b);
                }
            }
            if got.is_some() {
                break;
            }
        }
        assert_eq!(got.as_deref(), Some(&stream[..]));
        assert_eq!(s.len(), 1);
        s.expire(Timestamp(2000 * MS), Duration::from_secs(1));
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn bounds_and_mismatches() {
        let mut p = Pull::new(Timestamp(0), NodeId(1), 7, true, 0, 0);
        let data = [1u8; SYNC_CHUNK_DATA];
        let c = SyncChunk { to: NodeId(2), to_incarnation: 1, xfer: 7, index: 0, total: 1000, data: &data };
        assert!(matches!(p.on_chunk(&c, SYNC_CHUNK_DATA * 10), PullEvent::Abort), "too large");
        let mut p = Pull::new(Timestamp(0), NodeId(1), 7, true, 0, 0);
        let c = SyncChunk { total: 3, ..c };
        assert!(matches!(p.on_chunk(&c, 1 << 20), PullEvent::Stored));
        assert!(matches!(p.on_chunk(&c, 1 << 20), PullEvent::Ignored), "duplicate");
        assert!(matches!(p.on_chunk(&SyncChunk { total: 4, ..c }, 1 << 20), PullEvent::Abort), "total changed");
        assert!(matches!(p.on_chunk(&SyncChunk { index: 1, data: &data[..5], ..c }, 1 << 20), PullEvent::Abort), "short middle chunk");
        // The server refuses beyond its limit until one is idle.
        let mut s = Serving::default();
        let r = SyncRequest { to: NodeId(0), xfer: 1, since: 0, config_version: 0, next: 0, window: 4, full: true };
        let idle = Duration::from_millis(100);
        for n in 1..=2u8 {
            assert!(s.on_request(Timestamp(0), NodeId(n), 1, (&r).into(), 2, idle, || vec![1, 2, 3]).is_some());
        }
        assert!(s.on_request(Timestamp(50 * MS), NodeId(3), 1, (&r).into(), 2, idle, || vec![1, 2, 3]).is_none());
        let (new, chunks) = s.on_request(Timestamp(150 * MS), NodeId(3), 1, (&r).into(), 2, idle, || vec![1, 2, 3]).unwrap();
        assert!(new);
        assert_eq!((chunks.len(), chunks[0].total, chunks[0].data.len()), (1, 1, 3));
    }
}
