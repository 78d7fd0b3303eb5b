//! The cluster member set: which nodes are up, at which epoch, and where
//! they sit (optional site and chassis ids, SPEC R4/R12).
//!
//! Invariants:
//! - a `MemberSet` only ever holds nodes `0..NodeId::MAX_NODES` (a `u16`
//!   bitmap); `with` refuses anything else, so iteration and the director
//!   table never see an out-of-range node;
//! - every derived set (`with`, `with_member`, `without`) carries
//!   `epoch + 1`, so two sets with the same epoch from the same lineage are
//!   the same set, and tables built from a set (`DirectorTable`) can be
//!   checked against the epoch they were built for;
//! - site / chassis ids of a node that is not a member are `None`, and its
//!   admission epoch is 0;
//! - a member's admission epoch (`MemberInfo::since`) is never above the
//!   set's epoch once the control node built it: it is the epoch at which
//!   the member's current incarnation was admitted, so a pipeline that ran
//!   an older set sees a member whose `since` is above that set's epoch as
//!   a node that lost its state since (a restart readmitted within one
//!   member set, docs/failover.md);
//! - the type is `Copy` (208 bytes), no allocation anywhere.

use crate::types::{Epoch, NodeId};
use core::fmt;

/// Where a member sits. Both ids are optional: a cluster without chassis
/// (or site) configuration leaves them `None`, and the backup rules that
/// use them (R4) then do not apply.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemberInfo {
    /// Site id (inter-site clustering, R4 site redundancy, R12).
    pub site: Option<u8>,
    /// Chassis id (several blades in one chassis, R4).
    pub chassis: Option<u8>,
    /// The epoch at which this member's current incarnation was admitted
    /// (0: not known — a set built without membership, or an older peer).
    pub since: Epoch,
}

impl MemberInfo {
    pub const NONE: MemberInfo = MemberInfo { site: None, chassis: None, since: Epoch(0) };
}

/// A member-set operation that cannot be done.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemberError {
    /// The node id is not below `NodeId::MAX_NODES` (16).
    #[error("node id {0} out of range (cluster nodes are 0..=15)")]
    NodeOutOfRange(u8),
    /// A table needs at least one member.
    #[error("member set is empty")]
    Empty,
}

/// The set of cluster members at one epoch.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct MemberSet {
    epoch: Epoch,
    bits: u16,
    site: [Option<u8>; NodeId::MAX_NODES],
    chassis: [Option<u8>; NodeId::MAX_NODES],
    since: [Epoch; NodeId::MAX_NODES],
    /// The control node that made or adopted the set, when known (the
    /// membership machine's `Action::Members` says; SPEC N3 sends
    /// multi-session PAT connections there). Not part of the CCL's
    /// member tables: each node learns it from its own machine.
    control: Option<NodeId>,
}

#[inline]
fn check(node: NodeId) -> Result<usize, MemberError> {
    if node.index() < NodeId::MAX_NODES {
        Ok(node.index())
    } else {
        Err(MemberError::NodeOutOfRange(node.0))
    }
}

impl MemberSet {
    /// No members, at `epoch`.
    pub const fn empty(epoch: Epoch) -> Self {
        MemberSet {
            epoch,
            bits: 0,
            site: [None; NodeId::MAX_NODES],
            chassis: [None; NodeId::MAX_NODES],
            since: [Epoch(0); NodeId::MAX_NODES],
            control: None,
        }
    }

    /// The given nodes (no site / chassis ids), at `epoch` (not bumped).
    pub fn from_nodes(epoch: Epoch, nodes: impl IntoIterator<Item = NodeId>) -> Result<Self, MemberError> {
        let mut s = MemberSet::empty(epoch);
        for n in nodes {
            s.bits |= 1 << check(n)?;
        }
        Ok(s)
    }

    /// The given nodes with their site / chassis ids, at `epoch` (not bumped).
    pub fn from_members(
        epoch: Epoch,
        members: impl IntoIterator<Item = (NodeId, MemberInfo)>,
    ) -> Result<Self, MemberError> {
        let mut s = MemberSet::empty(epoch);
        for (n, info) in members {
            let i = check(n)?;
            s.bits |= 1 << i;
            s.site[i] = info.site;
            s.chassis[i] = info.chassis;
            s.since[i] = info.since;
        }
        Ok(s)
    }

    /// The control node, when the set says (`with_control`).
    #[inline]
    pub const fn control(&self) -> Option<NodeId> {
        self.control
    }

    /// A copy naming `control` as the control node (not a member: none),
    /// at the same epoch.
    pub fn with_control(&self, control: Option<NodeId>) -> Self {
        MemberSet { control: control.filter(|&c| self.contains(c)), ..*self }
    }

    /// The set as a bitmap: bit `i` set ⇔ `NodeId(i)` is a member.
    #[inline]
    pub const fn bits(&self) -> u16 {
        self.bits
    }
    #[inline]
    pub const fn epoch(&self) -> Epoch {
        self.epoch
    }
    #[inline]
    pub const fn len(&self) -> usize {
        self.bits.count_ones() as usize
    }
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.bits == 0
    }
    #[inline]
    pub const fn contains(&self, node: NodeId) -> bool {
        node.index() < NodeId::MAX_NODES && self.bits & (1 << node.index()) != 0
    }
    /// Site / chassis ids of a member; `None` for a non-member.
    #[inline]
    pub fn info(&self, node: NodeId) -> Option<MemberInfo> {
        self.contains(node)
            .then(|| MemberInfo { site: self.site[node.index()], chassis: self.chassis[node.index()], since: self.since[node.index()] })
    }
    /// Members that lost their state since this node ran `older` (bits):
    /// nodes new in this set, and members whose current incarnation was
    /// admitted after `older`'s epoch (a restart readmitted without a set
    /// that left it out). `me` is never in it.
    pub fn fresh_since(&self, older: &MemberSet, me: NodeId) -> u16 {
        let mut bits = self.bits & !older.bits;
        for n in self.iter() {
            if self.since[n.index()] > older.epoch {
                bits |= 1 << n.index();
            }
        }
        let mine = if me.index() < NodeId::MAX_NODES { 1u16 << me.index() } else { 0 };
        bits & !mine
    }
    /// Members in ascending node order.
    #[inline]
    pub fn iter(&self) -> MemberIter {
        MemberIter { bits: self.bits }
    }

    /// A copy with `node` added (site / chassis ids unchanged if it was
    /// already a member, else none) and `epoch + 1`.
    pub fn with(&self, node: NodeId) -> Result<Self, MemberError> {
        let i = check(node)?;
        let mut s = *self;
        s.bits |= 1 << i;
        s.epoch = next(self.epoch);
        Ok(s)
    }

    /// A copy with `node` added or updated with `info`, and `epoch + 1`.
    pub fn with_member(&self, node: NodeId, info: MemberInfo) -> Result<Self, MemberError> {
        let i = check(node)?;
        let mut s = *self;
        s.bits |= 1 << i;
        s.site[i] = info.site;
        s.chassis[i] = info.chassis;
        s.since[i] = info.since;
        s.epoch = next(self.epoch);
        Ok(s)
    }

    /// A copy without `node` (its ids cleared) and `epoch + 1`. Removing a
    /// non-member still bumps the epoch: every call is a membership event.
    pub fn without(&self, node: NodeId) -> Self {
        let mut s = *self;
        s.epoch = next(self.epoch);
        if let Ok(i) = check(node) {
            s.bits &= !(1 << i);
            s.site[i] = None;
            s.chassis[i] = None;
            s.since[i] = Epoch(0);
        }
        if s.control == Some(node) {
            s.control = None;
        }
        s
    }
}

/// Epochs are `u64`: at one membership change per nanosecond they last 584
/// years, so wrapping is a formality that keeps this total.
#[inline]
const fn next(e: Epoch) -> Epoch {
    Epoch(e.0.wrapping_add(1))
}

impl fmt::Debug for MemberSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemberSet@{} ", self.epoch.0)?;
        let mut l = f.debug_list();
        for n in self.iter() {
            let i = n.index();
            l.entry(&format_args!(
                "{}(site {:?}, chassis {:?}, since {})",
                n, self.site[i], self.chassis[i], self.since[i].0
            ));
        }
        l.finish()
    }
}

impl IntoIterator for &MemberSet {
    type Item = NodeId;
    type IntoIter = MemberIter;
    fn into_iter(self) -> MemberIter {
        self.iter()
    }
}

/// Members of a `MemberSet`, ascending.
#[derive(Copy, Clone, Debug)]
pub struct MemberIter {
    bits: u16,
}

impl Iterator for MemberIter {
    type Item = NodeId;
    #[inline]
    fn next(&mut self) -> Option<NodeId> {
        if self.bits == 0 {
            return None;
        }
        let i = self.bits.trailing_zeros() as u8;
        self.bits &= self.bits - 1;
        Some(NodeId(i))
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.bits.count_ones() as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for MemberIter {}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: u8) -> NodeId {
        NodeId(i)
    }

    #[test]
    fn basics() {
        let s = MemberSet::from_nodes(Epoch(7), [n(0), n(3), n(15)]).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.epoch(), Epoch(7));
        assert_eq!(s.bits(), 0b1000_0000_0000_1001);
        assert!(s.contains(n(0)) && s.contains(n(3)) && s.contains(n(15)));
        assert!(!s.contains(n(1)) && !s.contains(n(16)) && !s.contains(n(255)));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![n(0), n(3), n(15)]);
        assert_eq!(s.iter().len(), 3);
        assert_eq!(s.info(n(3)), Some(MemberInfo::NONE));
        assert_eq!(s.info(n(4)), None);
        assert!(MemberSet::empty(Epoch(0)).is_empty());
        assert_eq!(MemberSet::empty(Epoch(0)).iter().next(), None);
    }

    #[test]
    fn with_without_bump_epoch() {
        let s = MemberSet::from_nodes(Epoch(1), [n(1)]).unwrap();
        let t = s.with(n(2)).unwrap();
        assert_eq!((t.epoch(), t.len()), (Epoch(2), 2));
        let u = t.without(n(1));
        assert_eq!((u.epoch(), u.iter().collect::<Vec<_>>()), (Epoch(3), vec![n(2)]));
        // Removing a non-member or an out-of-range id: same members, new epoch.
        let v = u.without(n(9)).without(n(200));
        assert_eq!((v.epoch(), v.bits()), (Epoch(5), u.bits()));
        // The original is untouched (Copy semantics).
        assert_eq!((s.epoch(), s.len()), (Epoch(1), 1));
        assert_eq!(MemberSet::empty(Epoch(u64::MAX)).with(n(0)).unwrap().epoch(), Epoch(0));
    }

    #[test]
    fn control_is_a_member_or_none() {
        let s = MemberSet::from_nodes(Epoch(3), [n(0), n(2)]).unwrap();
        assert_eq!(s.control(), None);
        assert_eq!(s.with_control(Some(n(1))).control(), None, "not a member");
        let c = s.with_control(Some(n(2)));
        assert_eq!((c.control(), c.epoch()), (Some(n(2)), Epoch(3)));
        assert_eq!(c.with(n(5)).unwrap().control(), Some(n(2)));
        assert_eq!(c.without(n(0)).control(), Some(n(2)));
        assert_eq!(c.without(n(2)).control(), None, "the control node left");
    }

    #[test]
    fn limits() {
        assert_eq!(MemberSet::empty(Epoch(0)).with(n(16)), Err(MemberError::NodeOutOfRange(16)));
        assert_eq!(MemberSet::from_nodes(Epoch(0), [n(255)]), Err(MemberError::NodeOutOfRange(255)));
        let all = MemberSet::from_nodes(Epoch(0), (0..16).map(n)).unwrap();
        assert_eq!((all.len(), all.bits()), (16, 0xffff));
        assert_eq!(all.iter().last(), Some(n(15)));
    }

    #[test]
    fn member_info() {
        let site_a = MemberInfo { site: Some(1), chassis: Some(10), since: Epoch(0) };
        let s = MemberSet::from_members(Epoch(0), [(n(0), site_a), (n(1), MemberInfo::NONE)]).unwrap();
        assert_eq!(s.info(n(0)), Some(site_a));
        let t = s.with(n(0)).unwrap();
        assert_eq!(t.info(n(0)), Some(site_a), "with() keeps a member's ids");
        let t = t.without(n(0)).with(n(0)).unwrap();
        assert_eq!(t.info(n(0)), Some(MemberInfo::NONE), "leaving clears the ids");
        let t = t.with_member(n(0), site_a).unwrap();
        assert_eq!((t.info(n(0)), t.epoch()), (Some(site_a), Epoch(4)));
        assert!(format!("{t:?}").contains("node0(site Some(1), chassis Some(10), since 0)"));
    }

    #[test]
    fn fresh_since_sees_joins_and_readmissions() {
        let m = |since| MemberInfo { since: Epoch(since), ..MemberInfo::NONE };
        let old = MemberSet::from_members(Epoch(4), [(n(0), m(1)), (n(1), m(1)), (n(2), m(3))]).unwrap();
        // Same bits, node 1 readmitted at 5 (a restart), node 3 new.
        let new = MemberSet::from_members(Epoch(6), [(n(0), m(1)), (n(1), m(5)), (n(2), m(3)), (n(3), m(6))]).unwrap();
        assert_eq!(new.fresh_since(&old, n(0)), 0b1010);
        assert_eq!(new.fresh_since(&old, n(1)), 0b1000, "never this node itself");
        // A node that skipped the set of the readmission still sees it.
        let skipped = MemberSet::from_members(Epoch(3), [(n(0), m(1)), (n(1), m(1))]).unwrap();
        assert_eq!(new.fresh_since(&skipped, n(0)), 0b1110);
        assert_eq!(new.fresh_since(&new, n(0)), 0, "the same set again: nobody");
        // Admission epochs unknown (0): only new bits count.
        let plain = MemberSet::from_nodes(Epoch(9), [n(0), n(1), n(2)]).unwrap();
        assert_eq!(plain.fresh_since(&old, n(0)), 0);
    }
}
