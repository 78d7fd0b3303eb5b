//! The run report: computed from counters and the latency histogram,
//! printed as text or JSON (`--json`).

use super::hist::Histogram;
use super::tcpgen::ClientStats;
use serde::Serialize;

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    /// What was timed: "one-way" (stamp to arrival on another port),
    /// "round-trip" (echo) or "handshake" (SYN to SYN-ACK).
    pub kind: String,
    pub samples: u64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

impl Latency {
    /// Percentiles of a histogram of TSC ticks at `tsc_hz`.
    pub fn from_ticks(kind: &str, h: &Histogram, tsc_hz: u64) -> Latency {
        let us = |t: u64| t as f64 * 1e6 / tsc_hz.max(1) as f64;
        Latency {
            kind: kind.to_string(),
            samples: h.count(),
            min_us: us(h.min()),
            p50_us: us(h.quantile(0.50)),
            p99_us: us(h.quantile(0.99)),
            p999_us: us(h.quantile(0.999)),
            max_us: us(h.max()),
            mean_us: h.mean() / tsc_hz.max(1) as f64 * 1e6,
        }
    }
}

/// Counters a run ends with.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Counters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Frames that carried our stamp on arrival.
    pub rx_stamped: u64,
    /// Frames the TX queue refused (freed, not sent).
    pub tx_refused: u64,
    /// Port counters: RX queue overflow and mbuf allocation failures.
    pub rx_missed: u64,
    pub rx_nombuf: u64,
    /// mbuf allocation failures on the TX side.
    pub tx_nombuf: u64,
    pub arp_replies_sent: u64,
    pub responder_replies: u64,
}

/// Everything `--json` prints.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Report {
    pub mode: String,
    pub duration_s: f64,
    pub frame_len: usize,
    pub flows: usize,
    pub counters: Counters,
    pub tx_mpps: f64,
    pub rx_mpps: f64,
    /// L2 bit rate (frames without FCS, preamble, IFG).
    pub tx_gbps: f64,
    pub rx_gbps: f64,
    /// Stamped packets sent but not received (for modes that expect them
    /// back: forwarded on another port or echoed); `null` otherwise.
    pub lost: Option<u64>,
    pub connections_per_s: Option<f64>,
    pub tcp: Option<ClientStats>,
    pub latency: Option<Latency>,
    /// `tcp` with both ends in one process: stamped data segments, one way.
    pub data_latency: Option<Latency>,
}

impl Report {
    /// Fills in the rates from the counters and `duration_s`.
    pub fn compute_rates(&mut self) {
        let d = self.duration_s.max(1e-9);
        let c = &self.counters;
        self.tx_mpps = c.tx_packets as f64 / d / 1e6;
        self.rx_mpps = c.rx_packets as f64 / d / 1e6;
        self.tx_gbps = c.tx_bytes as f64 * 8.0 / d / 1e9;
        self.rx_gbps = c.rx_bytes as f64 * 8.0 / d / 1e9;
        if let Some(t) = &self.tcp {
            self.connections_per_s = Some(if self.mode == "cps" { t.completed } else { t.established } as f64 / d);
        }
    }

    /// Human-readable summary.
    pub fn text(&self) -> String {
        let c = &self.counters;
        let mut s = format!(
            "pktgen {} for {:.2} s, {} flows, {}-byte frames\n\
             TX {:>12} pkts {:8.3} Mpps {:8.3} Gbit/s   (refused {}, no mbuf {})\n\
             RX {:>12} pkts {:8.3} Mpps {:8.3} Gbit/s   (stamped {}, missed {}, no mbuf {})\n",
            self.mode,
            self.duration_s,
            self.flows,
            self.frame_len,
            c.tx_packets,
            self.tx_mpps,
            self.tx_gbps,
            c.tx_refused,
            c.tx_nombuf,
            c.rx_packets,
            self.rx_mpps,
            self.rx_gbps,
            c.rx_stamped,
            c.rx_missed,
            c.rx_nombuf
        );
        if let Some(l) = self.lost {
            s += &format!("lost {l} stamped packets\n");
        }
        if let (Some(t), Some(cps)) = (&self.tcp, self.connections_per_s) {
            s += &format!(
                "TCP: {} SYNs, {} established, {} completed, {:.0} conn/s, {} data segments, {} timeouts, {} resets\n",
                t.syn_sent, t.established, t.completed, cps, t.data_segments, t.timeouts, t.resets
            );
        }
        if let Some(l) = &self.latency {
            s += &format!(
                "latency ({}, {} samples): p50 {:.1} us  p99 {:.1} us  p999 {:.1} us  (min {:.1}, max {:.1})\n",
                l.kind, l.samples, l.p50_us, l.p99_us, l.p999_us, l.min_us, l.max_us
            );
        }
        if let Some(l) = &self.data_latency {
            s += &format!(
                "data latency ({}, {} samples): p50 {:.1} us  p99 {:.1} us  p999 {:.1} us\n",
                l.kind, l.samples, l.p50_us, l.p99_us, l.p999_us
            );
        }
        if c.arp_replies_sent + c.responder_replies > 0 {
            s += &format!("answered {} ARP requests, {} responder replies\n", c.arp_replies_sent, c.responder_replies);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_json() {
        let mut h = Histogram::new();
        for v in [1000u64, 2000, 3000] {
            h.record(v);
        }
        let mut r = Report {
            mode: "udp".into(),
            duration_s: 2.0,
            frame_len: 64,
            flows: 1,
            counters: Counters { tx_packets: 4_000_000, tx_bytes: 256_000_000, rx_packets: 2_000_000, ..Default::default() },
            latency: Some(Latency::from_ticks("one-way", &h, 1_000_000_000)),
            ..Default::default()
        };
        r.compute_rates();
        assert_eq!((r.tx_mpps, r.rx_mpps), (2.0, 1.0));
        assert!((r.tx_gbps - 1.024).abs() < 1e-9);
        let l = r.latency.as_ref().unwrap();
        assert!((l.p50_us - 2.0).abs() < 0.2 && l.p999_us >= 3.0, "{l:?}");
        let j: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(j["tx_mpps"], 2.0);
        assert_eq!(j["latency"]["samples"], 3);
        assert!(r.text().contains("2.000 Mpps"));
    }
}
