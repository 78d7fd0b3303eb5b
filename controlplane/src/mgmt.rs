//! The management protocol of the control socket (`clusterfw-ctl`).
//!
//! One request per connection: the client writes one JSON object and a
//! newline, the node answers with one JSON object and a newline, then closes.
//! The node serves the socket from its control thread without ever waiting
//! on a client (`Server`), and drops one that takes longer than
//! [`IO_TIMEOUT`] to send its request or read its answer. Requests are plain data, so
//! the protocol is easy to drive from scripts (`socat`, `nc -U`).
//!
//! Invariant: a malformed request gets an error response, never a panic or a
//! stuck control thread.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
// `core::time::Duration` (the type `std::time` re-exports): the socket
// timeouts are plain durations. Time comes in as a `Timestamp`.
use core::time::Duration;
use dataplane::Timestamp;

/// How long the server waits for a client's request or for its reply to be
/// read, and how long the client waits for the node.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound on a request line; longer requests are refused.
pub const MAX_REQUEST: u64 = 64 * 1024;

/// What `show` can display.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topic {
    Stats,
    Conn,
    Route,
    Arp,
    /// The IPv6 neighbour cache (issue 16).
    Nd,
    Config,
    Rules,
    /// Cluster members, this node's role, cluster and CCL counters.
    Cluster,
    /// Every membership transition with its time and reason.
    ClusterHistory,
    /// NAT translations and the NAT stage's counters.
    Xlate,
    /// The NAT pools' use, per worker.
    NatPool,
    /// Every counter of `stats` and `cluster` in Prometheus' text format
    /// (`metrics`), as one JSON string: what the node's `/metrics` serves.
    Metrics,
    /// The per-connection trace's events (`TraceStart`), oldest first.
    Trace,
    /// Connection limits (L1): per class and client the local count, the
    /// cluster-wide estimate, the limit, the refusals.
    Limits,
    /// Connections here and the cluster-wide estimate.
    ConnCount,
}

impl Topic {
    pub const ALL: &'static [Topic] =
        &[Topic::Stats, Topic::Conn, Topic::Route, Topic::Arp, Topic::Nd, Topic::Config, Topic::Rules, Topic::Cluster, Topic::ClusterHistory, Topic::Xlate, Topic::NatPool, Topic::Metrics, Topic::Trace, Topic::Limits, Topic::ConnCount];
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Stats => "stats",
            Topic::Conn => "conn",
            Topic::Route => "route",
            Topic::Arp => "arp",
            Topic::Nd => "nd",
            Topic::Config => "config",
            Topic::Rules => "rules",
            Topic::Cluster => "cluster",
            Topic::ClusterHistory => "cluster-history",
            Topic::Xlate => "xlate",
            Topic::NatPool => "nat-pool",
            Topic::Metrics => "metrics",
            Topic::Trace => "trace",
            Topic::Limits => "limits",
            Topic::ConnCount => "conn-count",
        }
    }
    pub fn parse(s: &str) -> Option<Topic> {
        Topic::ALL.iter().copied().find(|t| t.as_str() == s)
    }
}

/// A request to the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    Show { topic: Topic },
    /// Read the configuration file again and run (single node) or publish
    /// (a cluster's control node) its policy.
    ConfigReload,
    /// `show topic` of every configured cluster node, asked over the CCL
    /// and merged (`crate::clusterview`); answered once every node
    /// answered or after [`CLUSTER_ANSWER_TIMEOUT`].
    ClusterShow { topic: Topic },
    /// Trace the frames `filter` matches (`dataplane::pipeline::trace`:
    /// `HOST [PEER] [port N] [proto P]`) for `secs` seconds, on this node
    /// and, in a cluster, on every other configured node (answered once
    /// they started, or at `CLUSTER_ANSWER_TIMEOUT`). `show trace` /
    /// `cluster show trace` give the events.
    TraceStart { filter: String, secs: u64 },
}

/// How long a node waits for the other members' answers to a `cluster
/// show` before it answers with what it has, naming the silent ones
/// (well inside the client's [`IO_TIMEOUT`]).
pub const CLUSTER_ANSWER_TIMEOUT: Duration = Duration::from_millis(2000);

/// The node's answer: `ok` with `data`, or an `error` text.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub data: serde_json::Value,
}

#[derive(Debug, thiserror::Error)]
pub enum MgmtError {
    #[error("control socket {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("control socket {path}: bad reply: {source}")]
    BadReply { path: PathBuf, source: serde_json::Error },
    #[error("node refused the request: {0}")]
    Refused(String),
}

/// Send one request and wait for the answer.
pub fn request(socket: &Path, req: &Request) -> Result<serde_json::Value, MgmtError> {
    let io = |source| MgmtError::Io { path: socket.to_owned(), source };
    let mut stream = UnixStream::connect(socket).map_err(io)?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    let mut line = serde_json::to_vec(req).expect("requests always serialize");
    line.push(b'\n');
    stream.write_all(&line).map_err(io)?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).map_err(io)?;
    let resp: Response =
        serde_json::from_str(&reply).map_err(|source| MgmtError::BadReply { path: socket.to_owned(), source })?;
    if resp.ok {
        Ok(resp.data)
    } else {
        Err(MgmtError::Refused(resp.error.unwrap_or_else(|| "unknown error".into())))
    }
}

/// The node's side: a non-blocking listener polled by the control thread.
///
/// Nothing here waits on a client: a request line is read as it arrives,
/// over as many polls as it takes, and an answer is written as the client
/// reads it. The control thread also sends the heartbeats; a client that
/// connected and then said nothing (or a `clusterfw-ctl` descheduled on a
/// busy core between its connect and its write) must not hold it for a
/// moment. A client is dropped when its request or the reading of its
/// answer takes longer than [`IO_TIMEOUT`].
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
    reading: Vec<Reading>,
    writing: Vec<Writing>,
}

/// A client whose request line has not arrived whole.
struct Reading {
    stream: UnixStream,
    line: Vec<u8>,
    since: Timestamp,
}

/// An answer its client has not read whole.
struct Writing {
    stream: UnixStream,
    out: Vec<u8>,
    at: usize,
    since: Timestamp,
}

/// What one non-blocking read of a client's request gave.
enum Progress {
    /// The request line, without its newline.
    Line(Vec<u8>),
    Waiting,
    TooLong,
    Closed,
}

impl Server {
    /// Bind the socket, replacing a stale socket file left by a crash.
    pub fn bind(path: &Path) -> std::io::Result<Server> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(Server { listener, path: path.to_owned(), reading: Vec::new(), writing: Vec::new() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serve every request that has arrived whole; returns how many were
    /// served. `handle` turns a request into data or an error text.
    pub fn poll(&mut self, now: Timestamp, mut handle: impl FnMut(&Request) -> Result<serde_json::Value, String>) -> usize {
        let mut later = Vec::new();
        let n = self.poll_deferred(now, |r| Some(handle(r)), &mut later);
        debug_assert!(later.is_empty());
        n
    }

    /// As `poll`, but `handle` may put a request off (`None`): its client
    /// is appended to `later`, to be answered with [`Responder::answer`]
    /// (within the client's [`IO_TIMEOUT`]).
    pub fn poll_deferred(
        &mut self,
        now: Timestamp,
        mut handle: impl FnMut(&Request) -> Option<Result<serde_json::Value, String>>,
        later: &mut Vec<Responder>,
    ) -> usize {
        let reading = &mut self.reading;
        while let Ok((stream, _)) = self.listener.accept() {
            match stream.set_nonblocking(true) {
                Ok(()) => reading.push(Reading { stream, line: Vec::new(), since: now }),
                Err(e) => log::debug!("control socket client: {e}"),
            }
        }
        let mut served = 0;
        let mut i = 0;
        while i < reading.len() {
            let r = match read_some(&mut reading[i]) {
                Progress::Waiting if !expired(now, reading[i].since) => {
                    i += 1;
                    continue;
                }
                Progress::Waiting => {
                    log::debug!("control socket client: no request in {} s; dropped", IO_TIMEOUT.as_secs());
                    reading.swap_remove(i);
                    continue;
                }
                Progress::Closed => {
                    reading.swap_remove(i);
                    continue;
                }
                Progress::TooLong => Some(Err(format!("bad request: longer than {MAX_REQUEST} bytes"))),
                Progress::Line(line) => match serde_json::from_slice::<Request>(&line) {
                    Ok(req) => handle(&req),
                    Err(e) => Some(Err(format!("bad request: {e}"))),
                },
            };
            served += 1;
            let client = reading.swap_remove(i);
            match r {
                Some(r) => self.writing.push(Writing { stream: client.stream, out: response_line(r), at: 0, since: now }),
                None => match deferred(client.stream) {
                    Ok(d) => later.push(d),
                    Err(e) => log::debug!("control socket client: {e}"),
                },
            }
        }
        self.flush(now);
        served
    }

    /// Write what the clients can take now; drop those done, gone, or
    /// too slow to read.
    fn flush(&mut self, now: Timestamp) {
        self.writing.retain_mut(|w| {
            loop {
                match (&w.stream).write(&w.out[w.at..]) {
                    Ok(0) => return false,
                    Ok(n) => {
                        w.at += n;
                        if w.at == w.out.len() {
                            return false;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        let alive = !expired(now, w.since);
                        if !alive {
                            log::debug!("control socket client: answer not read in {} s; dropped", IO_TIMEOUT.as_secs());
                        }
                        return alive;
                    }
                    Err(e) => {
                        log::debug!("control socket client: {e}");
                        return false;
                    }
                }
            }
        });
    }
}

/// True once [`IO_TIMEOUT`] has passed since `since`.
fn expired(now: Timestamp, since: Timestamp) -> bool {
    now.0.saturating_sub(since.0) > IO_TIMEOUT.as_nanos() as u64
}

/// Read what the client has sent so far, up to its request's newline.
fn read_some(r: &mut Reading) -> Progress {
    let mut buf = [0u8; 4096];
    loop {
        match (&r.stream).read(&mut buf) {
            Ok(0) => return Progress::Closed,
            Ok(n) => {
                // Only the new bytes can hold the newline.
                let newline = buf[..n].iter().position(|&b| b == b'\n').map(|i| r.line.len() + i);
                r.line.extend_from_slice(&buf[..n]);
                if let Some(end) = newline {
                    r.line.truncate(end);
                    return Progress::Line(std::mem::take(&mut r.line));
                }
                if r.line.len() as u64 > MAX_REQUEST {
                    return Progress::TooLong;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Progress::Waiting,
            Err(_) => return Progress::Closed,
        }
    }
}

/// A put-off client, its answer to be written in one go (small: a
/// cluster-wide merge) with the write timeout.
fn deferred(stream: UnixStream) -> std::io::Result<Responder> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(Responder { stream })
}

/// A client whose request was put off (`Server::poll_deferred`).
pub struct Responder {
    stream: UnixStream,
}

impl Responder {
    /// Answer the client (errors writing are the client's: logged).
    pub fn answer(self, r: Result<serde_json::Value, String>) {
        if let Err(e) = (&self.stream).write_all(&response_line(r)) {
            log::debug!("control socket client: {e}");
        }
    }
}

/// The answer `r` as its line on the wire.
fn response_line(r: Result<serde_json::Value, String>) -> Vec<u8> {
    let resp = match r {
        Ok(data) => Response { ok: true, error: None, data },
        Err(e) => Response { ok: false, error: Some(e), data: serde_json::Value::Null },
    };
    let mut out = serde_json::to_vec(&resp).unwrap_or_else(|_| b"{\"ok\":false,\"error\":\"encode\"}".to_vec());
    out.push(b'\n');
    out
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server bound in a scratch directory of its own (`name`): the
    /// directory, the socket path, the server.
    fn bound(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Server) {
        let dir = std::env::temp_dir().join(format!("cfw-mgmt-{name}-{}", std::process::id()));
        let path = dir.join("ctl.sock");
        let server = Server::bind(&path).unwrap();
        (dir, path, server)
    }

    /// The tests' clock: the time since the first call.
    fn now() -> Timestamp {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        Timestamp(START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64)
    }

    #[test]
    fn request_wire_format_is_stable() {
        let r = Request::Show { topic: Topic::Stats };
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"cmd":"show","topic":"stats"}"#);
        assert_eq!(Topic::parse("conn"), Some(Topic::Conn));
        assert_eq!(Topic::parse("nope"), None);
        let c = Request::Show { topic: Topic::Cluster };
        assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"cmd":"show","topic":"cluster"}"#);
        for t in Topic::ALL {
            assert_eq!(Topic::parse(t.as_str()), Some(*t));
        }
    }

    #[test]
    fn round_trip_over_a_socket() {
        let (dir, path, mut server) = bound("test");
        let client = std::thread::spawn({
            let path = path.clone();
            move || {
                let ok = request(&path, &Request::Show { topic: Topic::Route });
                let err = request(&path, &Request::Show { topic: Topic::Arp });
                let reload = request(&path, &Request::ConfigReload);
                (ok, err, reload)
            }
        });
        let mut served = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while served < 3 && std::time::Instant::now() < deadline {
            served += server.poll(now(), |req| match req {
                Request::Show { topic: Topic::Route } => Ok(serde_json::json!({"routes": 1})),
                Request::Show { .. } => Err("not here".into()),
                Request::ConfigReload => Ok(serde_json::json!({"message": "reloaded"})),
                Request::ClusterShow { .. } | Request::TraceStart { .. } => Err("no cluster".into()),
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        let (ok, err, reload) = client.join().unwrap();
        assert_eq!(ok.unwrap()["routes"], 1);
        assert!(matches!(err, Err(MgmtError::Refused(ref e)) if e == "not here"));
        assert_eq!(reload.unwrap()["message"], "reloaded");
        assert_eq!(serde_json::to_string(&Request::ConfigReload).unwrap(), r#"{"cmd":"config-reload"}"#);
        drop(server);
        assert!(!path.exists(), "socket file removed on drop");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_request_put_off_is_answered_later() {
        let (dir, path, mut server) = bound("later");
        let client = std::thread::spawn({
            let path = path.clone();
            move || request(&path, &Request::ClusterShow { topic: Topic::Conn })
        });
        let mut later = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while later.is_empty() && std::time::Instant::now() < deadline {
            server.poll_deferred(now(), |_| None, &mut later);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(later.len(), 1);
        later.pop().unwrap().answer(Ok(serde_json::json!({"merged": true})));
        assert_eq!(client.join().unwrap().unwrap()["merged"], true);
        assert_eq!(
            serde_json::to_string(&Request::ClusterShow { topic: Topic::Conn }).unwrap(),
            r#"{"cmd":"cluster-show","topic":"conn"}"#
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_client_that_has_not_finished_its_request_holds_nobody_up() {
        let (dir, path, mut server) = bound("slow");
        // Accepted first, with half a request: a server that waited for
        // its line would sit here (this thread is the client) until the
        // timeout and then drop it.
        let mut slow = UnixStream::connect(&path).unwrap();
        slow.write_all(br#"{"cmd":"show","#).unwrap();
        let handle = |req: &Request| match req {
            Request::Show { topic } => Ok(serde_json::json!({ "topic": topic.as_str() })),
            _ => Err("no".to_string()),
        };
        assert_eq!(server.poll(now(), handle), 0, "nothing whole yet");
        let quick = std::thread::spawn({
            let path = path.clone();
            move || request(&path, &Request::Show { topic: Topic::Stats })
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut served = 0;
        while served == 0 && std::time::Instant::now() < deadline {
            served += server.poll(now(), handle);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(served, 1);
        assert_eq!(quick.join().unwrap().unwrap()["topic"], "stats");
        // The slow client is still there: the rest of its line, a byte at
        // a time, then its answer.
        for b in br#""topic":"route"}"#.iter().chain(b"\n") {
            slow.write_all(&[*b]).unwrap();
            served += server.poll(now(), handle);
        }
        while served == 1 && std::time::Instant::now() < deadline {
            served += server.poll(now(), handle);
        }
        let mut reply = String::new();
        BufReader::new(slow).read_line(&mut reply).unwrap();
        let reply: Response = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply.data["topic"], "route");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_client_silent_past_the_timeout_is_dropped() {
        let (dir, path, mut server) = bound("silent");
        let mut silent = UnixStream::connect(&path).unwrap();
        let t0 = Timestamp(1_000);
        let at = |d: Duration| Timestamp(t0.0 + d.as_nanos() as u64);
        assert_eq!(server.poll(t0, |_| Ok(serde_json::Value::Null)), 0);
        assert_eq!(server.reading.len(), 1, "accepted, waiting for its line");
        assert_eq!(server.poll(at(IO_TIMEOUT), |_| Ok(serde_json::Value::Null)), 0);
        assert_eq!(server.reading.len(), 1, "kept up to the timeout");
        server.poll(at(IO_TIMEOUT + Duration::from_millis(1)), |_| Ok(serde_json::Value::Null));
        assert!(server.reading.is_empty(), "dropped after it");
        let mut rest = Vec::new();
        assert_eq!(silent.read_to_end(&mut rest).unwrap(), 0, "the node closed the connection");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn garbage_request_gets_an_error_not_a_hang() {
        let (dir, path, mut server) = bound("garbage");
        let client = std::thread::spawn({
            let path = path.clone();
            move || {
                let mut s = UnixStream::connect(&path).unwrap();
                s.write_all(b"{not json\n").unwrap();
                let mut reply = String::new();
                BufReader::new(s).read_line(&mut reply).unwrap();
                reply
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while server.poll(now(), |_| Ok(serde_json::Value::Null)) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let reply: Response = serde_json::from_str(&client.join().unwrap()).unwrap();
        assert!(!reply.ok);
        assert!(reply.error.unwrap().starts_with("bad request"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
