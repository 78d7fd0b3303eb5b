//! The node's Prometheus endpoint (`metrics.listen`, issue 14): a thread of
//! its own answering `GET /metrics` over HTTP/1.1, one connection at a time,
//! `Connection: close`. It takes the text from the control lcore through
//! the control socket (`show metrics`, as `clusterfw-ctl` does), so the
//! control lcore never waits on a scraper: a slow or stuck client costs
//! this thread its I/O timeout and nothing else, and a scrape returns
//! within the control socket's timeout whatever the load.
//!
//! Invariants: a request head longer than `MAX_HEAD` or not read within
//! `IO_TIMEOUT` gets `400`/nothing and the connection is closed; only
//! `GET`/`HEAD` of `/metrics` (query string ignored) fetch the metrics;
//! every answer carries `Content-Length`.

use anyhow::{Context, Result};
use controlplane::metrics::CONTENT_TYPE;
use controlplane::mgmt::{self, Request, Topic};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// A client's time to send its request and read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the idle thread looks for a connection or the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// Binds `addr` now (an address in use is an error at start, naming it)
/// and serves it on a thread until `stop`.
pub fn spawn(addr: SocketAddrV4, socket: PathBuf, stop: Arc<AtomicBool>) -> Result<std::thread::JoinHandle<()>> {
    let listener = TcpListener::bind(addr).with_context(|| format!("metrics.listen {addr}: binding"))?;
    listener.set_nonblocking(true).context("metrics listener")?;
    log::info!("metrics: http://{addr}/metrics");
    let t = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        if let Err(e) = serve(conn, &socket) {
                            log::debug!("metrics: {e}");
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
                    Err(e) => {
                        log::warn!("metrics: accept: {e}");
                        std::thread::sleep(ACCEPT_POLL);
                    }
                }
            }
        })
        .context("starting the metrics thread")?;
    Ok(t)
}

fn serve(mut conn: TcpStream, socket: &std::path::Path) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(buf.get(..n).unwrap_or(&[]));
    }
    let answer = respond(&head, || match mgmt::request(socket, &Request::Show { topic: Topic::Metrics }) {
        Ok(v) => v.as_str().map(str::to_string).ok_or_else(|| "the node's answer is not text".to_string()),
        Err(e) => Err(e.to_string()),
    });
    conn.write_all(&answer)?;
    conn.flush()
}

/// The whole HTTP answer to a request head; `fetch` gives the metrics
/// text (called only for `GET`/`HEAD /metrics`).
pub fn respond(head: &[u8], fetch: impl FnOnce() -> Result<String, String>) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, target, version) = (words.next(), words.next(), words.next());
    let complete = head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n");
    let (status, ctype, body, head_only) = match (method, target, version) {
        (Some(m), Some(t), Some(v)) if complete && v.starts_with("HTTP/1.") => {
            let path = t.split('?').next().unwrap_or("");
            match (m, path) {
                ("GET" | "HEAD", "/metrics") => match fetch() {
                    Ok(text) => ("200 OK", CONTENT_TYPE, text, m == "HEAD"),
                    Err(e) => ("503 Service Unavailable", "text/plain", format!("clusterfw: {e}\n"), m == "HEAD"),
                },
                ("GET" | "HEAD", "/") => {
                    ("200 OK", "text/plain", "clusterfw: metrics at /metrics\n".to_string(), m == "HEAD")
                }
                ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found: try /metrics\n".to_string(), m == "HEAD"),
                _ => ("405 Method Not Allowed", "text/plain", "GET or HEAD only\n".to_string(), false),
            }
        }
        _ => ("400 Bad Request", "text/plain", "bad request\n".to_string(), false),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status.starts_with("405") { "Allow: GET, HEAD\r\n" } else { "" }
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn get_metrics_serves_the_text_with_its_length() {
        let a = text(respond(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", || Ok("clusterfw_up 1\n".into())));
        assert_eq!(
            a,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: 15\r\nConnection: close\r\n\r\nclusterfw_up 1\n"
        );
        // A query string is ignored; HEAD has the length and no body.
        let h = text(respond(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n", || Ok("abc".into())));
        assert!(h.starts_with("HTTP/1.1 200 OK\r\n") && h.contains("Content-Length: 3\r\n") && h.ends_with("\r\n\r\n"), "{h}");
    }

    #[test]
    fn everything_else_is_refused_without_asking_the_node() {
        let never = || -> Result<String, String> { panic!("fetched") };
        for (req, status) in [
            (&b"GET /other HTTP/1.1\r\n\r\n"[..], "404 Not Found"),
            (b"POST /metrics HTTP/1.1\r\n\r\n", "405 Method Not Allowed"),
            (b"GET /metrics\r\n\r\n", "400 Bad Request"),
            (b"GET /metrics HTTP/1.1\r\nHost: x", "400 Bad Request"),
            (b"", "400 Bad Request"),
            (b"\xff\xfe garbage", "400 Bad Request"),
        ] {
            let a = text(respond(req, never));
            assert!(a.starts_with(&format!("HTTP/1.1 {status}\r\n")), "{req:?}: {a}");
        }
    }

    #[test]
    fn a_node_that_does_not_answer_is_503() {
        let a = text(respond(b"GET /metrics HTTP/1.1\r\n\r\n", || Err("control socket: timed out".into())));
        assert!(a.starts_with("HTTP/1.1 503 Service Unavailable\r\n") && a.ends_with("clusterfw: control socket: timed out\n"), "{a}");
    }
}
