//! Splits a pcap by owning worker, with the node's own steering function
//! (`dataplane::steer`), for the several-worker benchmark
//! (`scripts/bench.sh`): `OUT-w0.pcap` … hold the frames worker 0 … of a
//! `WORKERS`-worker node decides, so that giving queue i worker i's file
//! is RSS that agrees with the worker hash (nothing steered) and giving it
//! another worker's file is RSS that never does (everything steered).
//!
//! `cargo run --release -p dataplane --example worker_split -- IN.pcap WORKERS OUT`
//!
//! Classic pcap (either byte order) in, little-endian classic pcap out;
//! frames no worker owns (`Steer::All`, `Steer::Any`) go to worker 0's
//! file. Prints how many frames each file got.

use dataplane::steer::{steer, Steer};
use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, workers, out] = args.as_slice() else {
        eprintln!("usage: worker_split IN.pcap WORKERS OUT (writes OUT-w0.pcap ...)");
        std::process::exit(2);
    };
    let workers: u16 = match workers.parse() {
        Ok(n) if n >= 1 => n,
        _ => {
            eprintln!("worker_split: WORKERS {workers:?}: a number >= 1");
            std::process::exit(2);
        }
    };
    let data = std::fs::read(input).unwrap_or_else(|e| {
        eprintln!("worker_split: {input}: {e}");
        std::process::exit(1)
    });
    let frames = parse(&data).unwrap_or_else(|e| {
        eprintln!("worker_split: {input}: {e}");
        std::process::exit(1)
    });
    let mut files: Vec<Vec<u8>> = (0..workers).map(|_| header()).collect();
    let mut counts = vec![0usize; usize::from(workers)];
    for f in frames {
        let w = match steer(f, workers) {
            Steer::Worker(w) => usize::from(w.0),
            Steer::All | Steer::Any => 0,
        };
        let rec = &mut files[w];
        for v in [1u32, counts[w] as u32, f.len() as u32, f.len() as u32] {
            rec.extend_from_slice(&v.to_le_bytes());
        }
        rec.extend_from_slice(f);
        counts[w] += 1;
    }
    for (w, bytes) in files.iter().enumerate() {
        let path = format!("{out}-w{w}.pcap");
        if let Err(e) = std::fs::File::create(&path).and_then(|mut f| f.write_all(bytes)) {
            eprintln!("worker_split: {path}: {e}");
            std::process::exit(1);
        }
        println!("{path}: {} frames", counts[w]);
    }
}

/// Classic pcap, microsecond timestamps, LINKTYPE_ETHERNET.
fn header() -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 1] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h
}

/// The frames of a classic pcap file.
fn parse(data: &[u8]) -> Result<Vec<&[u8]>, String> {
    let magic = data.get(..4).ok_or("shorter than a pcap header")?;
    let be = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => false,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => true,
        _ => return Err("not a classic pcap file".into()),
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
        Some(if be { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while at < data.len() {
        let len = u32_at(at + 8).ok_or("truncated record header")? as usize;
        let body = data.get(at + 16..at + 16 + len).ok_or("truncated record")?;
        frames.push(body);
        at += 16 + len;
    }
    Ok(frames)
}
