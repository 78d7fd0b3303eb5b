//! Splitting an IPv4 datagram into fragments (RFC 791 §2.3 and §3.2,
//! "Fragmentation"; RFC 1812 §5.2.6): what a router does when a datagram
//! without DF is larger than the next link's MTU, and what the packet path
//! does to a datagram a port handed over reassembled (af_packet) to put
//! back the fragments that were on the wire.
//!
//! A datagram of header length `hl` and payload `P` becomes fragments of
//! at most `mtu` bytes each:
//! - the first keeps the whole header (every option) and carries
//!   `⌊(mtu − hl) / 8⌋ · 8` payload bytes;
//! - the others carry only the options whose copied flag is set (option
//!   type bit 0x80: security, source routes), padded with End-of-options
//!   to a multiple of 4, and `⌊(mtu − hl′) / 8⌋ · 8` bytes each but the
//!   last;
//! - offsets continue the datagram's own (a fragment of a fragment is
//!   split again, RFC 791 §3.2), MF is set on every fragment but the last,
//!   which keeps the datagram's own MF; identification, TTL, TOS, protocol
//!   and addresses are the datagram's; each header checksum is computed
//!   anew.
//!
//! The frame's L2 header (`frame[..l2]`) is copied into each fragment as
//! it is: the caller has already rewritten it for the egress.
//!
//! Invariants: every fragment is at most `mtu` bytes of IPv4 (plus the
//! L2 header); the fragments' payloads tile the datagram's payload exactly,
//! in order; nothing allocates; a frame that cannot be split (DF set, an
//! MTU too small for the header and 8 bytes, a header that does not
//! parse) is refused before anything is written.

use crate::wire::ipv4::{Ipv4Packet, FLAG_MF, MIN_HEADER_LEN};

/// Longest IPv4 header (IHL 15).
const MAX_HEADER_LEN: usize = 60;

/// Why a datagram cannot be split.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// Don't Fragment is set: the sender wants an ICMP "fragmentation
    /// needed" instead (RFC 1191).
    DontFragment,
    /// The MTU leaves no room for a header and 8 bytes of payload.
    MtuTooSmall,
    /// The frame holds no valid IPv4 header at `l2`.
    BadHeader,
}

/// How one datagram splits (from [`plan`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// L2 header length of the frame.
    pub l2: usize,
    /// Header length of the first fragment (the datagram's) and of the
    /// others (20 + the copied options, padded).
    pub hl_first: usize,
    pub hl_rest: usize,
    /// The copied options of the later fragments (`hl_rest − 20` bytes).
    opts: [u8; MAX_HEADER_LEN - MIN_HEADER_LEN],
    /// Payload bytes of the first fragment and of each later one (but the
    /// last), multiples of 8.
    pub chunk_first: usize,
    pub chunk_rest: usize,
    /// The datagram's payload length.
    pub payload: usize,
    /// The datagram's own offset (bytes) and MF flag.
    offset: usize,
    more: bool,
    /// Number of fragments (at least 1).
    pub count: usize,
}

impl Split {
    /// Payload range `(start, len)` of fragment `k` within the datagram's
    /// payload.
    pub fn range(&self, k: usize) -> Option<(usize, usize)> {
        if k >= self.count {
            return None;
        }
        let start = if k == 0 { 0 } else { self.chunk_first + (k - 1) * self.chunk_rest };
        let chunk = if k == 0 { self.chunk_first } else { self.chunk_rest };
        Some((start, chunk.min(self.payload.saturating_sub(start))))
    }

    /// Frame length of fragment `k` (L2 + header + payload share).
    pub fn frame_len(&self, k: usize) -> Option<usize> {
        let (_, len) = self.range(k)?;
        Some(self.l2 + if k == 0 { self.hl_first } else { self.hl_rest } + len)
    }

    /// Bytes of all fragments but the first (what a caller must find room
    /// for besides the frame it cuts down).
    pub fn rest_bytes(&self) -> usize {
        (1..self.count).filter_map(|k| self.frame_len(k)).sum()
    }
}

/// How the datagram in `frame` (IPv4 header at `l2`) splits into
/// fragments of at most `mtu` bytes. `Ok` with `count == 1` when it fits.
/// DF is honoured: a datagram that does not fit and has DF set is refused.
pub fn plan(frame: &[u8], l2: usize, mtu: usize) -> Result<Split, SplitError> {
    let ip = Ipv4Packet::new_checked(frame.get(l2..).ok_or(SplitError::BadHeader)?).map_err(|_| SplitError::BadHeader)?;
    let hl = ip.header_len();
    let total = usize::from(ip.total_len());
    let payload = total - hl;
    let mut opts = [0u8; MAX_HEADER_LEN - MIN_HEADER_LEN];
    let copied = copied_options(ip.options(), &mut opts);
    let hl_rest = MIN_HEADER_LEN + copied.div_ceil(4) * 4;
    let offset = usize::from(ip.frag_offset());
    let more = ip.more_frags();
    let base = Split {
        l2,
        hl_first: hl,
        hl_rest,
        opts,
        chunk_first: payload,
        chunk_rest: payload,
        payload,
        offset,
        more,
        count: 1,
    };
    if total <= mtu {
        return Ok(base);
    }
    if ip.dont_frag() {
        return Err(SplitError::DontFragment);
    }
    let chunk_first = mtu.saturating_sub(hl) / 8 * 8;
    let chunk_rest = mtu.saturating_sub(hl_rest) / 8 * 8;
    if chunk_first == 0 || chunk_rest == 0 {
        return Err(SplitError::MtuTooSmall);
    }
    let count = 1 + (payload - chunk_first).div_ceil(chunk_rest);
    Ok(Split { chunk_first, chunk_rest, count, ..base })
}

/// The options a later fragment keeps (copied flag set, RFC 791 §3.1),
/// written to `out`; returns their length (unpadded). Options are walked
/// as `ipv4::scan_options` does; a malformed tail is not copied.
fn copied_options(opts: &[u8], out: &mut [u8]) -> usize {
    let mut i = 0;
    let mut n = 0;
    while let Some(&kind) = opts.get(i) {
        let len = match kind {
            0 => break,
            1 => 1,
            _ => match opts.get(i + 1) {
                Some(&l) if l >= 2 && i + usize::from(l) <= opts.len() => usize::from(l),
                _ => break,
            },
        };
        if kind & 0x80 != 0 {
            if let (Some(src), Some(dst)) = (opts.get(i..i + len), out.get_mut(n..n + len)) {
                dst.copy_from_slice(src);
                n += len;
            }
        }
        i += len;
    }
    n
}

/// Write fragment `k ≥ 1` of the datagram in `frame` into `out` (its L2
/// header, header with the copied options, payload share); returns the
/// frame length, or `None` when `out` is too short or `k` out of range.
pub fn write_fragment(frame: &[u8], s: &Split, k: usize, out: &mut [u8]) -> Option<usize> {
    if k == 0 {
        return None;
    }
    let (start, len) = s.range(k)?;
    let hl = s.hl_rest;
    let n = s.l2 + hl + len;
    let out = out.get_mut(..n)?;
    let l3_in = frame.get(s.l2..)?;
    let payload_in = l3_in.get(s.hl_first + start..s.hl_first + start + len)?;
    out.get_mut(..s.l2)?.copy_from_slice(frame.get(..s.l2)?);
    {
        let (hdr, rest) = out.get_mut(s.l2..)?.split_at_mut(hl);
        hdr.get_mut(..MIN_HEADER_LEN)?.copy_from_slice(l3_in.get(..MIN_HEADER_LEN)?);
        hdr.get_mut(MIN_HEADER_LEN..)?.copy_from_slice(s.opts.get(..hl - MIN_HEADER_LEN)?);
        rest.copy_from_slice(payload_in);
    }
    let last = k + 1 == s.count;
    finish_header(out.get_mut(s.l2..)?, s, hl, start, len, last);
    Some(n)
}

/// Cut `frame` down to fragment 0 in place (header fields updated; the
/// bytes beyond it are left for the caller to trim); returns its frame
/// length. Call after every `write_fragment`: they read the payload from
/// `frame`.
pub fn cut_first(frame: &mut [u8], s: &Split) -> Option<usize> {
    let (_, len) = s.range(0)?;
    let last = s.count == 1;
    finish_header(frame.get_mut(s.l2..)?, s, s.hl_first, 0, len, last);
    Some(s.l2 + s.hl_first + len)
}

/// Length, IHL, flags and offset, checksum of one fragment's header.
fn finish_header(l3: &mut [u8], s: &Split, hl: usize, start: usize, len: usize, last: bool) {
    let mut ip = Ipv4Packet::new_unchecked(l3);
    ip.set_version_ihl(hl);
    ip.set_total_len((hl + len) as u16);
    let more = if last { s.more } else { true };
    ip.set_flags_frag(if more { FLAG_MF } else { 0 }, (s.offset + start) as u16);
    ip.fill_checksum();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::{Ipv4Repr, FLAG_DF};
    use proptest::prelude::*;

    const L2: usize = 14;

    /// An Ethernet frame with an IPv4 datagram of `payload` bytes (value
    /// `i as u8`), header options `opts`, flags and offset.
    fn datagram(payload: usize, opts: &[u8], flags: u16, offset: u16) -> Vec<u8> {
        let hl = MIN_HEADER_LEN + opts.len();
        let mut f = vec![0xee; L2];
        f.extend(vec![0; hl]);
        f.extend((0..payload).map(|i| i as u8));
        let mut r = Ipv4Repr {
            src: "198.18.1.10".parse().unwrap(),
            dst: "198.18.2.10".parse().unwrap(),
            protocol: 17,
            ttl: 63,
            ident: 0x4242,
            dont_frag: false,
            payload_len: 0,
        };
        r.payload_len = (payload + opts.len()) as u16;
        r.emit(&mut f[L2..]);
        let mut ip = Ipv4Packet::new_unchecked(&mut f[L2..]);
        ip.set_version_ihl(hl);
        ip.set_flags_frag(flags, offset);
        f[L2 + MIN_HEADER_LEN..L2 + hl].copy_from_slice(opts);
        Ipv4Packet::new_unchecked(&mut f[L2..]).fill_checksum();
        f
    }

    /// Every fragment of `frame` split for `mtu`, fragment 0 first.
    fn split_all(frame: &[u8], mtu: usize) -> Result<Vec<Vec<u8>>, SplitError> {
        let s = plan(frame, L2, mtu)?;
        let mut out = Vec::new();
        for k in 1..s.count {
            let mut b = vec![0u8; 10_000];
            let n = write_fragment(frame, &s, k, &mut b).unwrap();
            b.truncate(n);
            out.push(b);
        }
        let mut first = frame.to_vec();
        let n = cut_first(&mut first, &s).unwrap();
        first.truncate(n);
        out.insert(0, first);
        Ok(out)
    }

    #[test]
    fn a_4000_byte_datagram_into_three_for_1500() {
        let f = datagram(3980, &[], 0, 0);
        let frags = split_all(&f, 1500).unwrap();
        // Golden: 1480 + 1480 + 1020 payload bytes at offsets 0, 185, 370 (×8).
        let want = [(1500, 0x2000 | 0), (1500, 0x2000 | 185), (1040, 370)];
        for (fr, (len, ff)) in frags.iter().zip(want) {
            let ip = Ipv4Packet::new_checked(&fr[L2..]).unwrap();
            assert_eq!((usize::from(ip.total_len()), ip.frag_offset() / 8 | if ip.more_frags() { 0x2000 } else { 0 }), (len, ff));
            assert!(ip.verify_checksum());
            assert_eq!((ip.ident(), ip.ttl(), ip.protocol()), (0x4242, 63, 17));
            assert_eq!(&fr[..L2], &[0xee; L2]);
        }
        assert_eq!(frags[1][L2 + 20], (1480 % 256) as u8, "payload continues");
    }

    #[test]
    fn options_copied_only_when_flagged_and_padded() {
        // Record route (7, not copied) and a copied option 0x82 (security).
        let opts = [7, 7, 4, 0, 0, 0, 0, 0x82, 4, 0xaa, 0xbb, 1];
        let f = datagram(2000, &opts, 0, 0);
        let frags = split_all(&f, 1000).unwrap();
        let first = Ipv4Packet::new_checked(&frags[0][L2..]).unwrap();
        assert_eq!(first.options(), &opts[..]);
        for fr in &frags[1..] {
            let ip = Ipv4Packet::new_checked(&fr[L2..]).unwrap();
            assert_eq!(ip.options(), &[0x82, 4, 0xaa, 0xbb], "copied option only, 4 bytes");
            assert!(ip.verify_checksum());
        }
        let opts = [0x82, 3, 0xaa];
        let f = datagram(2000, &[0x82, 3, 0xaa, 0], 0, 0);
        let frags = split_all(&f, 1000).unwrap();
        let ip = Ipv4Packet::new_checked(&frags[1][L2..]).unwrap();
        assert_eq!(ip.options(), &[opts[0], opts[1], opts[2], 0], "padded with End");
    }

    #[test]
    fn df_small_mtu_and_fits() {
        let f = datagram(3000, &[], FLAG_DF, 0);
        assert_eq!(plan(&f, L2, 1500), Err(SplitError::DontFragment));
        assert_eq!(plan(&f, L2, 3020).unwrap().count, 1, "fits: DF is no matter");
        let f = datagram(3000, &[], 0, 0);
        assert_eq!(plan(&f, L2, 27), Err(SplitError::MtuTooSmall));
        assert_eq!(plan(&f, L2, 28).unwrap().count, 375);
        assert_eq!(plan(&f[..L2 + 10], L2, 1500), Err(SplitError::BadHeader));
    }

    #[test]
    fn a_fragment_is_split_again_keeping_its_offset_and_mf() {
        // The middle fragment of something: offset 1480, MF set.
        let f = datagram(2960, &[], FLAG_MF, 1480);
        let frags = split_all(&f, 1500).unwrap();
        let got: Vec<(u16, bool)> = frags
            .iter()
            .map(|fr| {
                let ip = Ipv4Packet::new_checked(&fr[L2..]).unwrap();
                (ip.frag_offset(), ip.more_frags())
            })
            .collect();
        assert_eq!(got, [(1480, true), (2960, true)], "the last keeps MF: more of the datagram follows");
    }

    proptest! {
        /// Any datagram, options and MTU: fragments within the MTU whose
        /// payloads tile the original.
        #[test]
        fn fragments_fit_and_tile(payload in 1usize..9000, mtu in 68usize..9100, nopt in 0usize..5, copy in any::<bool>()) {
            let kind = if copy { 0x82 } else { 0x07 };
            let opts: Vec<u8> = (0..nopt).flat_map(|_| [kind, 4, 1, 2]).collect();
            let f = datagram(payload, &opts, 0, 0);
            let frags = match split_all(&f, mtu) {
                Ok(v) => v,
                Err(e) => {
                    prop_assert_eq!(e, SplitError::MtuTooSmall);
                    return Ok(());
                }
            };
            let mut data = Vec::new();
            for (k, fr) in frags.iter().enumerate() {
                let ip = Ipv4Packet::new_checked(&fr[L2..]).unwrap();
                prop_assert!(frags.len() == 1 || usize::from(ip.total_len()) <= mtu);
                prop_assert!(ip.verify_checksum());
                prop_assert_eq!(usize::from(ip.frag_offset()), data.len());
                prop_assert_eq!(ip.more_frags(), k + 1 < frags.len());
                data.extend_from_slice(ip.payload());
            }
            prop_assert_eq!(&data[..], &f[L2 + 20 + opts.len()..]);
        }
    }
}
