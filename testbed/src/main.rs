//! `clusterfw-testbed`: bring the network-namespace test bed up and down.
#![deny(unsafe_code)]

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use testbed::bed::{self, UpOptions};

const USAGE: &str = "\
usage: clusterfw-testbed up [--nodes N] [--mtu MTU] [--workers N] [--nat | --dynamic-nat] [--default-timers] [--run-dir DIR] [--kernel-router]
       clusterfw-testbed down [--run-dir DIR]
       clusterfw-testbed status [--run-dir DIR] [--json]
       clusterfw-testbed kill|pause|resume|restart NODE [--run-dir DIR]
       clusterfw-testbed ccl-cut|ccl-heal NODE [--run-dir DIR]
       clusterfw-testbed link-down|link-up NODE inside|outside [--run-dir DIR]
       clusterfw-testbed partition GROUP GROUP... [--run-dir DIR]   (GROUP: n1,n2)
       clusterfw-testbed heal [--run-dir DIR]
       clusterfw-testbed stall|unstall [--run-dir DIR]

--nodes 1 (default): namespaces cfw-inside (client, 198.18.1.2), cfw-outside
(server, 198.18.2.2) and cfw-n1 (node: clusterfw on veths n1-in / n1-out,
inside 198.18.1.1, outside 198.18.2.1).
--nodes 2-8: a cluster. Client cfw-inside 198.18.10.2 behind router cfw-rin,
server cfw-outside 198.18.20.2 behind router cfw-rout; the routers reach the
nodes cfw-nK by ECMP with L4 hashing (inside links 198.18.1K.0/24, outside
links 198.18.2K.0/24, node .2, router .1); the nodes' CCL ports (198.19.0.1K/24)
meet on bridge cfw-ccl in namespace cfw-ccl. Node K has node-id K.
Run it as root.

Faults (cluster bed): `kill` SIGKILLs a node, `pause`/`resume` stop and
continue it; for both the harness takes the node's router-side links down
(as BFD or link loss would; the routers drop dead next hops from their ECMP
routes, ignore_routes_with_linkdown). `restart` kills and starts the node
again with its config. `ccl-cut`/`ccl-heal` take its CCL port's carrier
away and back, `link-down`/`link-up` one of its data links. `partition`
splits the CCL segment into groups (no carrier change), `heal` joins it.
`stall`/`unstall` stop and continue every node together and leave the links
alone: a stall of the whole host, after which no node should leave.

  --mtu MTU         link MTUs: one number for every link (9000: jumbo), or
                    inside=N,outside=N,hosts=N (the nodes' inside and outside
                    links, the hosts' links to the routers; others 1500); the
                    nodes' configs get the same `mtu`s
  --workers N       every node runs N workers (dpdk.workers; af_packet with N
                    queue pairs, the CCL with N+1); default 1
  --nat             the node(s) PAT the inside network to 198.51.100.7 and map
                    198.51.100.80:80 to the inside host's port 8080 (static
                    PAT); a cluster's outside router spreads 198.51.100.0/24
                    over the members by ECMP; docs/nat.md
  --dynamic-nat     as --nat, but each inside host leaves as one of
                    198.51.100.7-9 (dynamic NAT; a cluster's control node
                    hands them out, N4); one worker per node
  --default-timers  cluster nodes run the configuration's default membership
                    timers (heartbeat 1 s, hold time 3 s) instead of the
                    bed's fast 100/300 ms (the flood tests)
  --run-dir DIR     state, node configs, logs, control sockets
                    (default $CFW_TESTBED_DIR, else /tmp/cfw-testbed)
  --kernel-router   (single node only) test-bed self-check: cfw-n1 is a plain Linux router
                    instead of clusterfw (TCP to ports 1-1023 from outside
                    to inside refused by a policy rule)
The clusterfw binaries are taken from $CLUSTERFW_BIN_DIR, else from the
directory of this executable. `up` and `down` wait for the test-bed lock
($CFW_TESTBED_LOCK, default /run/lock/cfw-testbed.lock) that test runs and
scripts/demo.sh hold while their bed is up; a caller that holds it already
sets CFW_TESTBED_LOCK_HELD=1.";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clusterfw-testbed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<()> {
    let Some((cmd, rest)) = args.split_first() else {
        bail!("no command\n{USAGE}");
    };
    let mut run_dir = bed::default_run_dir();
    let mut nodes = 1usize;
    let mut kernel_router = false;
    let mut mtu = testbed::topology::BedMtu::default();
    let mut workers = 1u16;
    let mut nat = testbed::topology::BedNat::Off;
    let mut timers = testbed::topology::BedTimers::Fast;
    let mut json = false;
    let mut operands: Vec<String> = Vec::new();
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value"))
        };
        match (cmd.as_str(), a.as_str()) {
            (_, "-h" | "--help") => {
                println!("{USAGE}");
                return Ok(());
            }
            (_, "--run-dir") => run_dir = PathBuf::from(value("--run-dir")?),
            ("up", "--nodes") => {
                let v = value("--nodes")?;
                nodes = v
                    .parse()
                    .with_context(|| format!("--nodes {v}: not a number"))?;
            }
            ("up", "--kernel-router") => kernel_router = true,
            ("up", "--nat") => nat = testbed::topology::BedNat::Pat,
            ("up", "--dynamic-nat") => nat = testbed::topology::BedNat::DynamicNat,
            ("up", "--default-timers") => timers = testbed::topology::BedTimers::Product,
            ("up", "--mtu") => mtu = testbed::topology::BedMtu::parse(&value("--mtu")?)?,
            ("up", "--workers") => {
                let v = value("--workers")?;
                workers = v.parse().with_context(|| format!("--workers {v}: not a number"))?;
            }
            ("status", "--json") => json = true,
            (
                "kill" | "pause" | "resume" | "restart" | "ccl-cut" | "ccl-heal" | "link-down" | "link-up"
                | "partition",
                _,
            ) if !a.starts_with('-') => operands.push(a.clone()),
            _ => bail!("{cmd}: unexpected argument {a}\n{USAGE}"),
        }
    }
    // `up` and `down` change the shared cfw-* namespaces: take the bed lock
    // unless the caller (a test, scripts/demo.sh) already holds it.
    let _lock = match cmd.as_str() {
        "up" | "down" if std::env::var("CFW_TESTBED_LOCK_HELD").map_or(true, |v| v != "1") => {
            Some(testbed::harness::lock_bed()?)
        }
        _ => None,
    };
    match cmd.as_str() {
        "up" => {
            let o = UpOptions {
                nodes,
                run_dir,
                kernel_router,
                bin_dir: bed::default_bin_dir()?,
                ready_timeout: Duration::from_secs(20),
                mtu,
                workers,
                nat,
                timers,
            };
            let state = bed::up(&o)?;
            let what = if kernel_router {
                "kernel-router self-check"
            } else {
                "clusterfw"
            };
            println!("test bed up ({what}), run dir {}", o.run_dir.display());
            for n in &state.nodes {
                match (n.pid, &n.control_socket) {
                    (Some(pid), Some(sock)) => {
                        println!(
                            "  node {} in {}: pid {pid}, socket {}",
                            n.name,
                            n.namespace,
                            sock.display()
                        )
                    }
                    _ => println!("  node {} in {}: Linux router", n.name, n.namespace),
                }
            }
            for h in &state.hosts {
                let kind = match h.kind {
                    testbed::topology::HostKind::Host => "host",
                    testbed::topology::HostKind::Router => "router",
                };
                println!("  {kind} {} in {}: {}", h.name, h.namespace, h.address);
            }
            Ok(())
        }
        "down" => {
            let report = bed::down(&run_dir)?;
            println!("test bed down: {}", report.summary());
            Ok(())
        }
        "status" => {
            let v = bed::status(&run_dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if v["up"] == false {
                println!("test bed down (no state in {})", run_dir.display());
            } else {
                println!(
                    "test bed up ({}), run dir {}",
                    v["mode"].as_str().unwrap_or("?"),
                    run_dir.display()
                );
                for n in v["nodes"].as_array().into_iter().flatten() {
                    println!(
                        "  node {} in {}: pid {}, {}",
                        n["name"].as_str().unwrap_or("?"),
                        n["namespace"].as_str().unwrap_or("?"),
                        n["pid"],
                        if n["alive"] == true {
                            "alive"
                        } else {
                            "NOT RUNNING"
                        }
                    );
                }
                for h in v["hosts"].as_array().into_iter().flatten() {
                    println!(
                        "  {} {} in {}: {}",
                        h["kind"].as_str().unwrap_or("host"),
                        h["name"].as_str().unwrap_or("?"),
                        h["namespace"].as_str().unwrap_or("?"),
                        h["address"].as_str().unwrap_or("?")
                    );
                }
            }
            Ok(())
        }
        "kill" | "pause" | "resume" | "restart" | "ccl-cut" | "ccl-heal" | "link-down" | "link-up" => {
            use testbed::faults::{self, Fault, Link};
            let want = if cmd.starts_with("link-") { 2 } else { 1 };
            if operands.len() != want {
                bail!("{cmd} needs {}\n{USAGE}", if want == 2 { "NODE and a link" } else { "NODE" });
            }
            let fault = match cmd.as_str() {
                "kill" => Fault::Kill,
                "pause" => Fault::Pause,
                "resume" => Fault::Resume,
                "restart" => Fault::Restart,
                "ccl-cut" => Fault::CclCut,
                "ccl-heal" => Fault::CclHeal,
                "link-down" => Fault::LinkDown(Link::parse(&operands[1])?),
                _ => Fault::LinkUp(Link::parse(&operands[1])?),
            };
            faults::apply(&run_dir, &bed::default_bin_dir()?, &operands[0], fault)?;
            println!("{cmd} {}: done", operands.join(" "));
            Ok(())
        }
        "stall" | "unstall" => {
            use testbed::faults::{self, Fault};
            let (fault, done) = if cmd == "stall" { (Fault::Stall, "stopped") } else { (Fault::Unstall, "continued") };
            faults::apply(&run_dir, &bed::default_bin_dir()?, "n1", fault)?;
            println!("{cmd}: every node {done}");
            Ok(())
        }
        "partition" => {
            let groups: Vec<Vec<String>> =
                operands.iter().map(|g| g.split(',').map(str::to_string).collect()).collect();
            testbed::faults::partition(&run_dir, &groups)?;
            println!("CCL partitioned: {}", operands.join(" | "));
            Ok(())
        }
        "heal" => {
            testbed::faults::heal(&run_dir)?;
            println!("CCL healed");
            Ok(())
        }
        other => bail!("unknown command {other}\n{USAGE}"),
    }
}
