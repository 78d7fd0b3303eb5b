//! The computable parts of cluster connection ownership (SPEC §2).
//!
//! Everything here is a pure function of its inputs — no clock, no I/O, no
//! allocation on the packet path — so every member computes the same
//! answers and the simulator can replay them:
//!
//! - `members`: the member set (`MemberSet`), a 16-bit bitmap with optional
//!   site and chassis ids, versioned by an `Epoch`;
//! - `director`: the symmetric flow hash (R2, R3) and the rendezvous
//!   ranking that picks a flow's director and backups (R2, R4); only ≈ 1/N
//!   of the flows change director when a member joins or leaves;
//! - `cookie`: the owner's node id packed into the cookie ISN (R6), keyed
//!   so that forwarders reject foreign values; `docs/owner-encoding.md`;
//! - `seqxlate`: the owner's per-segment sequence / ack / SACK translation
//!   for cookie connections (R6), with incremental checksums.
//!
//! Invariant shared by all: a value that travels between members (hash,
//! ranking, cookie) depends only on its inputs and on cluster-wide
//! configuration (seed, key, member set), never on the local node, its
//! process or its build; golden tests pin the hash and the cookie layout.
//! `docs/director.md` explains the director choice.

pub mod cookie;
pub mod director;
pub mod members;
pub mod seqxlate;

pub use cookie::CookieCodec;
pub use director::{flow_hash, Backups, DirectorTable, FlowHasher, Ranking, FLOW_HASH_SEED, MAX_BACKUPS, MAX_BACKUP_OWNERS};
pub use members::{MemberError, MemberInfo, MemberSet};
pub use seqxlate::{translate, translate_packet, translate_quoted, SeqDelta, XlateError, Xlated};
