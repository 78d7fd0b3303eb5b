//! Cluster-wide queries over the CCL (SPEC L5; issue 14, item 4):
//! `clusterfw-ctl cluster show TOPIC` on any node asks every other
//! configured node for its own `show TOPIC` answer and merges what comes
//! back (`crate::clusterview`).
//!
//! The machine only moves bytes; what a topic means and how an answer is
//! rendered is the driver's business:
//! - **Asking** ([`Membership::ask`]): one [`Pull`] per configured node
//!   but this one, each driven exactly as a bulk transfer's (a
//!   [`QueryRequest`] asks for a window of chunks from the first one
//!   lacking; after a retransmission timeout it asks again), so a lost
//!   chunk costs one timeout, not the answer. [`Membership::poll_answers`]
//!   hands the answers over once every node answered (or its transfer
//!   aborted), or at the driver's deadline, naming the nodes that did not
//!   answer. A new query replaces a running one.
//! - **Answering**: the first request of a query becomes
//!   [`Action::Query`]; the driver renders its answer and gives the bytes
//!   to [`Membership::answer`], which keeps them (a [`Serving`] of their
//!   own, apart from the replicated state's transfers) for the requester's
//!   further windows.
//!
//! Invariants (bounded memory and work against an authenticated but
//! misbehaving member):
//! - an answer pulled is at most [`QUERY_MAX_BYTES`] (a transfer
//!   announcing more is aborted before anything is reserved); one query
//!   is asked at a time;
//! - at most [`ANSWERS_KEPT`] rendered answers are kept, each dropped
//!   after two hold times without a request, one per requester;
//! - at most [`RENDERS_PER_SECOND`] answers are rendered a second (one
//!   render may walk every connection of the node); further new queries
//!   are refused (`query-busy`) and their requester asks again;
//! - requests and chunks are matched on (sender, query id, addressee
//!   incarnation); anything else is ignored and counted.

use super::transfer::{Pull, PullEvent, Serving, Window};
use super::{Action, Envelope, Membership, Outgoing, Received, Times};
use dataplane::ccl::{QueryArg, QueryRequest, SyncChunk, QUERY_TOPIC_MAX};
use dataplane::{Duration, NodeId, Timestamp};

/// Largest answer one member may send to a query (`show conn` of a
/// member is capped well below it by its renderer).
pub const QUERY_MAX_BYTES: usize = 8 << 20;
/// Answers kept for requesters' further windows.
pub const ANSWERS_KEPT: usize = 8;
/// New answers rendered per second at most.
pub const RENDERS_PER_SECOND: u32 = 8;

/// The query this node asks.
#[derive(Clone, Debug)]
pub(super) struct Asking {
    id: u32,
    topic: u8,
    arg: QueryArg,
    started: Timestamp,
    pulls: Vec<Pull>,
    answers: Vec<(NodeId, Vec<u8>)>,
    aborted: Vec<NodeId>,
}

/// What this node answers.
#[derive(Clone, Debug, Default)]
pub(super) struct Answering {
    serving: Serving,
    /// Requests handed to the driver (`Action::Query`) and not answered
    /// yet: (requester, its incarnation, the request).
    waiting: Vec<(NodeId, u32, QueryRequest)>,
    /// Start of the current one-second render window, renders in it.
    window: (Timestamp, u32),
}

/// The outcome of a query ([`Membership::poll_answers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answers {
    pub query: u32,
    pub topic: u8,
    /// Complete answers, by node.
    pub answers: Vec<(NodeId, Vec<u8>)>,
    /// Nodes whose answer could not be taken (too large, inconsistent).
    pub aborted: Vec<NodeId>,
    /// Nodes that did not answer (whole) by the deadline.
    pub missing: Vec<NodeId>,
}

impl Membership {
    /// Ask every other configured node for its answer on `topic`
    /// (`1..=QUERY_TOPIC_MAX`) with the topic's argument `arg` (at most
    /// `QUERY_ARG_MAX` bytes); replaces a query still running. Returns the
    /// query's id (`None`: topic out of range, argument too long).
    pub fn ask(&mut self, now: Timestamp, topic: u8, arg: &[u8]) -> Option<u32> {
        if topic == 0 || topic > QUERY_TOPIC_MAX {
            return None;
        }
        let arg = QueryArg::new(arg)?;
        let id = self.next_xfer;
        self.next_xfer = self.next_xfer.wrapping_add(1);
        let me = self.cfg.me;
        let pulls = self.peers.iter().map(|p| p.id).filter(|&n| n != me).map(|n| Pull::new(now, n, id, false, 0, 0)).collect();
        self.asking = Some(Asking { id, topic, arg, started: now, pulls, answers: Vec::new(), aborted: Vec::new() });
        self.counters.queries_asked += 1;
        self.query_tick(now);
        Some(id)
    }

    /// The running query's answers once every node answered (or failed),
    /// or `timeout` after it was asked, naming the nodes still missing;
    /// the query ends with it. `None`: no query, or still waiting.
    pub fn poll_answers(&mut self, now: Timestamp, timeout: Duration) -> Option<Answers> {
        let a = self.asking.as_ref()?;
        if !a.pulls.is_empty() && now.since(a.started) < timeout {
            return None;
        }
        let a = self.asking.take()?;
        let missing: Vec<NodeId> = a.pulls.iter().map(|p| p.from).collect();
        self.counters.query_answers_missing += missing.len() as u64;
        Some(Answers { query: a.id, topic: a.topic, answers: a.answers, aborted: a.aborted, missing })
    }

    /// The driver's answer to `Action::Query { from, incarnation, query,
    /// .. }`: kept for the requester, whose first window goes out now.
    pub fn answer(&mut self, now: Timestamp, from: NodeId, incarnation: u32, query: u32, bytes: Vec<u8>) {
        let q = &mut self.answering;
        let Some(at) = q.waiting.iter().position(|(n, inc, r)| *n == from && *inc == incarnation && r.query == query) else {
            return;
        };
        let (_, _, req) = q.waiting.swap_remove(at);
        self.counters.queries_answered += 1;
        self.serve_query(now, from, incarnation, &req, Some(bytes));
    }

    /// Requests of the running query that are due (at once after a
    /// complete window, else after a retransmission timeout); answers
    /// nobody asked for within two hold times are dropped.
    pub(super) fn query_tick(&mut self, now: Timestamp) {
        let idle = self.hold().times(2);
        self.answering.serving.expire(now, idle);
        let rto = self.pull_rto();
        let Some(a) = self.asking.as_mut() else { return };
        let (topic, arg) = (a.topic, a.arg);
        let reqs: Vec<QueryRequest> = a.pulls.iter_mut().filter_map(|p| p.request(now, rto)).map(|r| query_request(&r, topic, arg)).collect();
        for r in reqs {
            self.send(r.to, Outgoing::QueryRequest(r));
        }
    }

    pub(super) fn on_query_request(&mut self, now: Timestamp, from: Envelope, r: &QueryRequest) -> Received {
        if r.to != self.cfg.me {
            return Received::NotForMe;
        }
        let (n, inc) = (from.sender, from.incarnation);
        let q = &mut self.answering;
        if q.serving.has(n, inc, r.query) {
            return self.serve_query(now, n, inc, r, None);
        }
        if q.waiting.iter().any(|(wn, wi, w)| (*wn, *wi, w.query) == (n, inc, r.query)) {
            return Received::QueryRequest;
        }
        if now.since(q.window.0) >= Duration::from_secs(1) {
            q.window = (now, 0);
        }
        if q.window.1 >= RENDERS_PER_SECOND || q.waiting.len() >= ANSWERS_KEPT {
            return Received::QueryBusy;
        }
        q.window.1 += 1;
        // One query per requester: a new one replaces what it waited for.
        q.waiting.retain(|(wn, _, _)| *wn != n);
        q.waiting.push((n, inc, *r));
        self.actions.push_back(Action::Query { from: n, incarnation: inc, query: r.query, topic: r.topic, arg: r.arg.as_bytes().to_vec() });
        Received::QueryRequest
    }

    /// Send the window `r` asks for of the answer to `n` (`bytes`: a new
    /// answer to keep).
    fn serve_query(&mut self, now: Timestamp, n: NodeId, inc: u32, r: &QueryRequest, bytes: Option<Vec<u8>>) -> Received {
        let idle = self.hold().times(2);
        let w = Window { xfer: r.query, next: r.next, window: r.window };
        let Some((_, chunks)) = self.answering.serving.on_request(now, n, inc, w, ANSWERS_KEPT, idle, || bytes.unwrap_or_default())
        else {
            return Received::QueryBusy;
        };
        for c in chunks {
            self.send(c.to, Outgoing::QueryChunk(c));
        }
        Received::QueryRequest
    }

    pub(super) fn on_query_chunk(&mut self, now: Timestamp, from: Envelope, c: &SyncChunk<'_>) -> Received {
        if c.to != self.cfg.me || c.to_incarnation != self.cfg.incarnation {
            return Received::NotForMe;
        }
        let rto = self.pull_rto();
        let Some(a) = self.asking.as_mut() else { return Received::Ignored };
        let Some(i) = a.pulls.iter().position(|p| p.from == from.sender && p.xfer == c.xfer) else {
            return Received::Ignored;
        };
        let (topic, arg) = (a.topic, a.arg);
        match a.pulls[i].on_chunk(c, QUERY_MAX_BYTES) {
            PullEvent::Stored => {
                if let Some(r) = a.pulls[i].request(now, rto) {
                    let r = query_request(&r, topic, arg);
                    self.send(r.to, Outgoing::QueryRequest(r));
                }
                Received::QueryChunk
            }
            PullEvent::Complete(bytes) => {
                a.pulls.swap_remove(i);
                a.answers.push((from.sender, bytes));
                self.counters.query_answers += 1;
                Received::QueryChunk
            }
            PullEvent::Ignored => Received::Ignored,
            PullEvent::Abort => {
                a.pulls.swap_remove(i);
                a.aborted.push(from.sender);
                self.counters.query_answers_aborted += 1;
                Received::Ignored
            }
        }
    }
}

/// A pull's request as a query request on `topic` with `arg`.
fn query_request(r: &dataplane::ccl::SyncRequest, topic: u8, arg: QueryArg) -> QueryRequest {
    QueryRequest { to: r.to, query: r.xfer, topic, next: r.next, window: r.window, arg }
}
