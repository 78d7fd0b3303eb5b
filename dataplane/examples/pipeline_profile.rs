//! A steady-state loop over the benchmark's established flows, for
//! profilers: `perf record` or
//! `valgrind --tool=callgrind --toggle-collect='*hot_loop*'`, so that only
//! the forwarding of established flows is counted (not the handshakes).
//!
//! `cargo run --release -p dataplane --example pipeline_profile -- FLOWS PACKETS [pat|general|log|limits]`
//! (defaults 1000 and 1000000; `pat`: through PAT, `support::pipeline_pat`;
//! `general`: without NAT, the fast path off; `log`: without NAT, the flow
//! log on, as with a syslog or IPFIX exporter; `limits`: every connection
//! limit set, none reached, `support::pipeline_limited`); `CFW_NO_PREFETCH=1` skips
//! `Pipeline::prefetch_burst`. Prints ns/packet (wall clock, for a rough
//! look; the criterion bench is the measurement).

#[path = "../benches/support/mod.rs"]
mod support;

use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::pipeline::{Pipeline, Verdict};
use dataplane::{PortId, Timestamp};
use support::*;
use std::hint::black_box;

#[inline(never)]
fn hot_loop(p: &mut Pipeline, stream: &[[u8; FRAME_LEN]], packets: usize, prefetch: bool) -> usize {
    let t = Timestamp::from_secs(2);
    let mut bufs: Vec<VecBuf> = (0..BURST).map(|_| VecBuf::new(&stream[0])).collect();
    let mut forwarded = 0;
    let mut next = 0usize;
    for _ in 0..packets / BURST {
        for buf in bufs.iter_mut() {
            buf.reset(&stream[next], 128);
            next = if next + 1 == stream.len() { 0 } else { next + 1 };
        }
        if prefetch {
            p.prefetch_burst(bufs.iter().map(|b| b.data()));
        }
        for buf in bufs.iter_mut() {
            if matches!(black_box(p.process(t, PortId(0), buf)), Verdict::Forward(_)) {
                forwarded += 1;
            }
        }
    }
    forwarded
}

fn main() {
    let mut args = std::env::args().skip(1);
    let flows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let packets: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let mode = args.next().unwrap_or_default();
    let mut p = match mode.as_str() {
        "pat" => pipeline_pat(flows + flows / 4),
        "limits" => pipeline_limited(flows + flows / 4),
        _ => pipeline(flows + flows / 4),
    };
    if mode == "general" {
        p.set_fast_path(false);
    }
    // The flow log on (an exporter configured): established packets make
    // no records, so this must cost them nothing.
    if mode == "log" {
        p.log_flows(Some(dataplane::Duration::from_secs(60)));
    }
    let frames = established(&mut p, flows);
    let stream = arrival_stream(&frames);
    let start = std::time::Instant::now();
    let prefetch = std::env::var_os("CFW_NO_PREFETCH").is_none();
    let fwd = hot_loop(&mut p, &stream, packets, prefetch);
    let ns = start.elapsed().as_nanos() as f64 / packets as f64;
    println!("flows {flows} packets {packets} forwarded {fwd}: {ns:.1} ns/packet ({:.2} Mpps)", 1e3 / ns);
}
