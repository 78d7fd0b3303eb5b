//! Dynamic NAT through the three-node test bed (issue 13, SPEC N4): the bed
//! comes up with `--dynamic-nat` (the client network's hosts each leave as
//! one of 198.51.100.7–9; the outside router spreads 198.51.100.0/24 over
//! the members by ECMP), `CFW_BED_WORKERS` workers per node (1 when
//! unset). The control node hands the addresses out through the
//! replicated NAT table; every member holds it.
//!
//! (a) HTTP downloads from the client (198.18.10.2) and from a second
//!     address of the client's (198.18.10.3, a second host), sha256
//!     checked: the first packets of each host's first connection wait
//!     for its translation at the member they reached (held, `show
//!     xlate`'s `pending_held`) and leave when the control node's answer
//!     comes (`pending_released`), none dropped as `nat-pending` and none
//!     left to the client's retransmission;
//! (b) every member lists the same two translations, one address per host,
//!     and the control node made them (`show cluster`'s `nat_share`);
//! (c) ping from both hosts, 5/5 each;
//! (d) rate-limited downloads of both hosts while the control node is
//!     killed: all complete with their sha256, and a new download after it
//!     leaves with the same address (the table survived it);
//! (e) tcpdump on the server's link saw exactly the two pool addresses of
//!     (b) as sources and destinations, never a client address.
//!
//! Needs root, curl and tcpdump (scripts/test.sh installs them). A guard
//! takes the bed down on every exit path; the second client address goes
//! with the client's namespace.

use anyhow::{ensure, Context, Result};
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testbed::faults::{self, Fault};
use testbed::harness::{self, Children, Shape, Steps, TestBed};
use testbed::sys;
use testbed::topology::BedNat;

const NODES: usize = 3;
const INSIDE: &str = "cfw-inside";
const OUTSIDE: &str = "cfw-outside";
const HOSTS: [&str; 2] = ["198.18.10.2", "198.18.10.3"];
const SERVER: &str = "198.18.20.2";
const BYTES: u64 = 2 << 20;

fn counter(v: &serde_json::Value, name: &str) -> u64 {
    v["counters"][name].as_u64().unwrap_or(0)
}

/// Every member's translations as (real, mapped), sorted.
fn table(bed: &TestBed, k: usize) -> Result<Vec<(String, String)>> {
    let x = bed.show(k, "xlate")?;
    let mut v: Vec<(String, String)> = x["xlates"]
        .as_array()
        .context("xlates")?
        .iter()
        .filter(|x| x["sessions"] == "cluster")
        .map(|x| (x["real"].as_str().unwrap_or("").to_string(), x["mapped"].as_str().unwrap_or("").to_string()))
        .collect();
    v.sort();
    Ok(v)
}

#[test]
fn dynamic_nat_through_the_three_node_cluster() {
    assert!(sys::is_root(), "the NAT test bed test needs root (network namespaces, veths)");
    for tool in ["curl", "tcpdump", "ping"] {
        assert!(sys::have(tool), "{tool} is not installed (scripts/test.sh installs it)");
    }
    // CFW_BED_WORKERS workers per node: with several, the return traffic
    // to a host's address is steered through the table to the worker of
    // each connection (`steer::steer_nat`).
    let workers = harness::bed_workers();
    let shape = Shape { nat: BedNat::DynamicNat, workers, ..Shape::default() };
    let bed = TestBed::up_with(NODES, "/tmp/cfw-testbed-natd", shape).expect("bed up");
    eprintln!("dynamic NAT cluster bed, {NODES} nodes with {workers} worker(s) each (CFW_BED_WORKERS)");
    sys::ns_run(INSIDE, "ip", &["addr", "add", &format!("{}/24", HOSTS[1]), "dev", "eth0"]).expect("second host");
    let mut steps = Steps::default();
    let mut step = |name: &str, r: Result<String>| steps.step(name, r);
    let (mut cap, cap_log) = harness::capture_ip(&bed.run_dir, OUTSIDE, "natd-outside-tcpdump").expect("tcpdump");
    let (www, want, server) = harness::served_file(&bed.run_dir, "natd", OUTSIDE, SERVER, 8080, BYTES).expect("server");
    let url = format!("http://{SERVER}:8080/random.bin");
    let fetch = |tag: &str, host: &str, extra: &[&str]| -> Result<Child> {
        let got = www.0.join(format!("got-{tag}.bin")).to_string_lossy().into_owned();
        let mut args = vec!["netns", "exec", INSIDE, "curl", "-sS", "--fail", "--interface", host];
        args.extend_from_slice(&["--connect-timeout", "10", "--max-time", "60"]);
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-o", &got, &url]);
        Ok(Command::new("ip").args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?)
    };
    let check = |tag: &str, child: Child| -> Result<()> {
        let out = child.wait_with_output()?;
        ensure!(out.status.success(), "download {tag}: {}", String::from_utf8_lossy(&out.stderr));
        let sum = harness::sha256(&www.0.join(format!("got-{tag}.bin")))?;
        ensure!(sum == want, "download {tag}: sha256 {sum}, served {want}");
        Ok(())
    };
    let all: Vec<usize> = (1..=NODES).collect();
    let control = || -> Result<usize> {
        let c = bed.show(1, "cluster")?["control_node"].as_u64().context("no control node")?;
        Ok(c as usize)
    };

    step(
        "(a) HTTP downloads of two hosts through dynamic NAT",
        (|| {
            let t0 = Instant::now();
            for (h, host) in HOSTS.iter().enumerate() {
                for i in 0..3 {
                    let tag = format!("a{h}{i}");
                    check(&tag, fetch(&tag, host, &[])?)?;
                }
            }
            let sum = |key: &str| all.iter().map(|&k| bed.show(k, "xlate").map(|v| counter(&v, key))).sum::<Result<u64>>();
            let (pending, held, released, dropped) = (sum("pending")?, sum("pending_held")?, sum("pending_released")?, sum("pending_dropped")?);
            ensure!(pending > 0, "no packet waited for a translation: were they made before?");
            ensure!(
                held == pending && released == held && dropped == 0,
                "of {pending} packet(s) that waited for a translation {held} were held, {released} released, \
                 {dropped} dropped (every one held and released expected)"
            );
            Ok(format!(
                "3 downloads per host of {BYTES} bytes, sha256 matches, in {:.1} s; {pending} packet(s) waited \
                 for a host's translation, held and released when it came",
                t0.elapsed().as_secs_f64()
            ))
        })(),
    );
    let mut mapped = Vec::new();
    step(
        "(b) one address per host, the same table on every member, made by the control node",
        (|| {
            let tables: Vec<Vec<(String, String)>> = all.iter().map(|&k| table(&bed, k)).collect::<Result<_>>()?;
            ensure!(tables.windows(2).all(|w| w[0] == w[1]), "the members' tables differ: {tables:?}");
            let t = &tables[0];
            let reals: Vec<&str> = t.iter().map(|(r, _)| r.as_str()).collect();
            ensure!(reals == HOSTS, "translations {t:?}");
            ensure!(t[0].1 != t[1].1 && t.iter().all(|(_, m)| m.starts_with("198.51.100.")), "translations {t:?}");
            mapped = t.iter().map(|(_, m)| m.clone()).collect();
            let c = control()?;
            let share = &bed.show(c, "cluster")?["nat_share"];
            let allocated = share["counters"]["allocated"].as_u64().unwrap_or(0);
            ensure!(allocated == 2, "the control node n{c} allocated {allocated}: {share}");
            Ok(format!("{t:?} on every member; n{c} (control) allocated {allocated}; {share}"))
        })(),
    );
    step(
        "(c) ping from both hosts through dynamic NAT",
        (|| {
            for host in HOSTS {
                let out = sys::ns_run(INSIDE, "ping", &["-c", "5", "-i", "0.2", "-W", "2", "-I", host, SERVER])?;
                ensure!(out.contains(" 0% packet loss"), "ping from {host}: {out}");
            }
            Ok("5/5 from each host".into())
        })(),
    );
    step(
        "(d) downloads of both hosts while the control node is killed",
        (|| {
            let c = control()?;
            let mut children = Children(Vec::new());
            for i in 0..6 {
                let host = HOSTS[i % 2];
                children.0.push(fetch(&format!("d{i}"), host, &["--limit-rate", "256k"])?);
                std::thread::sleep(Duration::from_millis(50));
            }
            std::thread::sleep(Duration::from_secs(3));
            let t0 = Instant::now();
            faults::apply(&bed.run_dir, &bed.bin_dir, &format!("n{c}"), Fault::Kill)?;
            for (i, child) in children.0.drain(..).enumerate() {
                check(&format!("d{i}"), child)?;
            }
            let took = t0.elapsed().as_secs_f64();
            let up: Vec<usize> = all.iter().copied().filter(|&k| k != c).collect();
            // A new connection after the kill: the same translation.
            check("d-after", fetch("d-after", HOSTS[0], &[])?)?;
            let tables: Vec<Vec<(String, String)>> = up.iter().map(|&k| table(&bed, k)).collect::<Result<_>>()?;
            ensure!(tables.iter().all(|t| t.iter().map(|(_, m)| m).eq(mapped.iter())), "tables after: {tables:?}");
            Ok(format!(
                "6 downloads complete with their sha256 after n{c} (control) was killed, done {took:.1} s after; \
                 a new download leaves with the same address; the survivors' tables {:?}",
                tables[0]
            ))
        })(),
    );
    drop(server);
    cap.stop();
    step(
        "(e) the server's link saw the two hosts' addresses only",
        (|| {
            harness::capture_shows_only(&cap_log, "198.18.10.", "198.51.100.", 1000)?;
            let text = std::fs::read_to_string(&cap_log)?;
            let seen: BTreeSet<&str> = text
                .split_whitespace()
                .filter(|w| w.starts_with("198.51.100."))
                .map(|w| w.trim_end_matches(':'))
                // "198.51.100.8.41234" (TCP, with its port) or "198.51.100.8".
                .map(|w| if w.matches('.').count() == 4 { w.rsplit_once('.').map_or(w, |(a, _)| a) } else { w })
                .collect();
            let want: BTreeSet<&str> = mapped.iter().map(String::as_str).collect();
            ensure!(seen == want, "pool addresses on the link {seen:?}, translations {want:?}");
            Ok(format!("pool addresses seen {seen:?}"))
        })(),
    );
    steps.finish(&bed.run_dir, NODES);
}
