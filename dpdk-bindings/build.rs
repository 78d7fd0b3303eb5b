//! Build script: find the system DPDK with pkg-config, generate raw bindings
//! with bindgen, and compile the C side (bindgen's wrappers for DPDK's
//! `static inline` functions plus the tiny hand-written `csrc/shim.c`).
//!
//! Nothing DPDK-specific is hard-coded here: include paths, defines,
//! `-march` and the library list all come from `pkg-config libdpdk`.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Oldest DPDK whose API these wrappers were written against (Debian 12 ships 22.11).
const MIN_DPDK: &str = "21.11";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let csrc = manifest_dir.join("csrc");
    for f in ["wrapper.h", "shim.h", "shim.c"] {
        println!("cargo:rerun-if-changed={}", csrc.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");

    // Link flags: emitted by the pkg-config crate as cargo directives.
    let lib = pkg_config::Config::new()
        .atleast_version(MIN_DPDK)
        .probe("libdpdk")
        .unwrap_or_else(|e| {
            panic!("DPDK >= {MIN_DPDK} not found via pkg-config (install libdpdk-dev): {e}")
        });
    println!("cargo:version={}", lib.version);

    // Compile flags: the pkg-config crate keeps only -I/-D, but DPDK's cflags
    // also carry `-include rte_config.h` and `-march=...`, which both the
    // headers and the generated wrappers need. Take them verbatim.
    let cflags = dpdk_cflags();

    // Experimental DPDK APIs are marked deprecated unless this is defined; the
    // generated wrappers touch some inline ones, and the warnings are noise.
    let extra = [
        "-DALLOW_EXPERIMENTAL_API".to_string(),
        format!("-I{}", csrc.display()),
    ];

    let static_fns = out_dir.join("static_fns");
    let bindings = bindgen::Builder::default()
        .header(csrc.join("wrapper.h").to_string_lossy())
        .clang_args(cflags.iter().chain(extra.iter()))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        // Keep the output (and compile time) small: only the function
        // families the safe wrappers use; their types come in transitively.
        .allowlist_function(
            "rte_(eal_.*|lcore_.*|get_.*|socket_.*|rdtsc.*|strerror|shim_.*|dev_probe|dev_remove)",
        )
        .allowlist_function("rte_mempool_(lookup|free|avail_count|in_use_count|full|empty)")
        .allowlist_function("rte_pktmbuf_.*|rte_mbuf_refcnt_.*")
        .allowlist_function("rte_ring_(create|free|enqueue_burst|dequeue_burst|count)")
        .allowlist_function(
            "rte_eth_(dev_.*|rx_.*|tx_.*|stats_.*|link_get.*|macaddr_get|promiscuous_.*|find_next.*)",
        )
        .allowlist_var("RTE_(MAX_.*|ETH_.*|MBUF_.*|PKTMBUF_.*|MEMPOOL_.*)|RING_F_.*|SOCKET_ID_ANY|LCORE_ID_ANY")
        .opaque_type("rte_l2tpv2_.*|rte_flow_item_l2tpv2")
        .blocklist_function("rte_eth_dev_(.*_reg_info|.*regs|get_module_.*|.*eeprom.*|.*dcb.*|.*_dump_.*)")
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .generate_comments(false)
        .layout_tests(true)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&static_fns)
        .generate()
        .expect("bindgen failed on csrc/wrapper.h");
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("writing bindings.rs");

    let mut build = cc::Build::new();
    build
        .file(static_fns.with_extension("c"))
        .file(csrc.join("shim.c"))
        .include(&manifest_dir)
        .warnings(false)
        .opt_level(3);
    for f in cflags.iter().chain(extra.iter()) {
        build.flag(f);
    }
    build.compile("dpdk_shim");
}

/// `pkg-config --cflags libdpdk`, split into arguments (shell quoting rules).
fn dpdk_cflags() -> Vec<String> {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let out = Command::new(&pkg_config)
        .args(["--cflags", "libdpdk"])
        .output()
        .unwrap_or_else(|e| panic!("running {pkg_config}: {e}"));
    assert!(
        out.status.success(),
        "{pkg_config} --cflags libdpdk failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("pkg-config output is not UTF-8");
    // pkg-config quotes arguments shell-style (paths with spaces).
    shlex::split(&text).unwrap_or_else(|| panic!("cannot split pkg-config cflags: {text}"))
}
