#!/usr/bin/env python3
"""Write the benchmark's input pcaps with the standard library only.

  mkpcap.py udp OUT.pcap --flows 1024 --size 60 --dst-mac 02:70:63:61:70:00 \
      [--src-mac 02:00:00:00:01:0a] [--src 198.18.1.10] [--dst 198.18.2.10] \
      [--sport 1024] [--dport 9]
  mkpcap.py arp-reply OUT.pcap --dst-mac MAC --sender-mac MAC --sender IP --target IP
  mkpcap.py udp6 OUT.pcap --flows 1024 --size 62 --dst-mac MAC \
      [--src 2001:db8:1::10] [--dst 2001:db8:2::10] [--sport 1024] [--dport 9]
  mkpcap.py arp-reply OUT.pcap ... --ns6-sender 2001:db8:2::10 --ns6-target 2001:db8:2::1

`udp`: one UDP/IPv4 frame per flow (flow i = source port sport+i), `size`
bytes each without FCS (60 = the 64-byte Ethernet minimum), valid IPv4
header checksum, UDP checksum computed. These are the "real UDP/IPv4
frames of 1024 flows" that net_pcap replays with infinite_rx=1.
`arp-reply`: one ARP reply, to teach the node its next hop's MAC on a port
where nobody answers ARP (net_pcap, net_null).
`udp6`: the same flows over IPv6 (no extension headers), `size` at least
62 (Ethernet 14 + IPv6 40 + UDP 8), UDP checksum computed (mandatory over
IPv6, RFC 8200 §8.1).
`--ns6-sender`/`--ns6-target` (with `arp-reply`): a second frame, a
neighbour solicitation from the sender's IPv6 address (hop limit 255,
source link-layer address option = `--sender-mac`) for the node's own
address: the node answers it and learns the sender's MAC — the IPv6 next
hop of the benchmark resolved without any reply from a pcap port (the
node has no static IPv6 neighbours; an advertisement it did not ask for
would be ignored, RFC 4861 §7.2.5).
"""
import argparse
import struct
import sys


def mac(s):
    b = bytes(int(x, 16) for x in s.split(":"))
    if len(b) != 6:
        raise argparse.ArgumentTypeError(f"bad MAC {s!r}")
    return b


def ip(s):
    b = bytes(int(x) for x in s.split("."))
    if len(b) != 4:
        raise argparse.ArgumentTypeError(f"bad IPv4 address {s!r}")
    return b


def ip6(s):
    import ipaddress
    try:
        return ipaddress.IPv6Address(s).packed
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"bad IPv6 address {s!r}: {e}")


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data)//2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def write_pcap(path, frames):
    with open(path, "wb") as f:
        # Classic pcap, microsecond timestamps, LINKTYPE_ETHERNET.
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 1, i, len(fr), len(fr)))
            f.write(fr)


def udp_frame(a, i):
    size = max(60, min(1514, a.size))
    payload_len = size - 14 - 20 - 8
    sport = (a.sport + i) & 0xFFFF
    payload = bytes((i + k) & 0xFF for k in range(payload_len))
    udp_len = 8 + payload_len
    pseudo = a.src + a.dst + struct.pack("!BBH", 0, 17, udp_len)
    udp = struct.pack("!HHHH", sport, a.dport, udp_len, 0) + payload
    c = csum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, i & 0xFFFF, 0x4000, 64, 17, 0, a.src, a.dst)
    iph = iph[:10] + struct.pack("!H", csum(iph)) + iph[12:]
    return a.dst_mac + a.src_mac + b"\x08\x00" + iph + udp


def udp6_frame(a, i):
    size = max(62, min(1514, a.size))
    payload_len = size - 14 - 40 - 8
    sport = (a.sport + i) & 0xFFFF
    payload = bytes((i + k) & 0xFF for k in range(payload_len))
    udp_len = 8 + payload_len
    pseudo = a.src + a.dst + struct.pack("!IxxxB", udp_len, 17)
    udp = struct.pack("!HHHH", sport, a.dport, udp_len, 0) + payload
    c = csum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    iph = struct.pack("!IHBB16s16s", 6 << 28, udp_len, 17, 64, a.src, a.dst)
    return a.dst_mac + a.src_mac + b"\x86\xdd" + iph + udp


def ns6(a):
    """A neighbour solicitation from --ns6-sender for --ns6-target, to the
    target's solicited-node group, with the source link-layer address."""
    group = bytes.fromhex("ff02" + "0000" * 4 + "0001ff") + a.ns6_target[13:]
    body = struct.pack("!BBHI16s", 135, 0, 0, 0, a.ns6_target) + bytes([1, 1]) + a.sender_mac
    pseudo = a.ns6_sender + group + struct.pack("!IxxxB", len(body), 58)
    body = body[:2] + struct.pack("!H", csum(pseudo + body)) + body[4:]
    iph = struct.pack("!IHBB16s16s", 6 << 28, len(body), 58, 255, a.ns6_sender, group)
    dst_mac = b"\x33\x33" + group[12:]
    return dst_mac + a.sender_mac + b"\x86\xdd" + iph + body


def arp_reply(a):
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + a.sender_mac + a.sender + a.dst_mac + a.target
    fr = a.dst_mac + a.sender_mac + b"\x08\x06" + arp
    return fr + b"\0" * (60 - len(fr))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("udp")
    u.add_argument("out")
    u.add_argument("--flows", type=int, default=1024)
    u.add_argument("--size", type=int, default=60)
    u.add_argument("--dst-mac", type=mac, required=True)
    u.add_argument("--src-mac", type=mac, default=mac("02:00:00:00:01:0a"))
    u.add_argument("--src", type=ip, default=ip("198.18.1.10"))
    u.add_argument("--dst", type=ip, default=ip("198.18.2.10"))
    u.add_argument("--sport", type=int, default=1024)
    u.add_argument("--dport", type=int, default=9)
    r = sub.add_parser("arp-reply")
    r.add_argument("out")
    r.add_argument("--dst-mac", type=mac, required=True)
    r.add_argument("--sender-mac", type=mac, required=True)
    r.add_argument("--sender", type=ip, required=True)
    r.add_argument("--target", type=ip, required=True)
    r.add_argument("--ns6-sender", type=ip6)
    r.add_argument("--ns6-target", type=ip6)
    u6 = sub.add_parser("udp6")
    u6.add_argument("out")
    u6.add_argument("--flows", type=int, default=1024)
    u6.add_argument("--size", type=int, default=62)
    u6.add_argument("--dst-mac", type=mac, required=True)
    u6.add_argument("--src-mac", type=mac, default=mac("02:00:00:00:01:0a"))
    u6.add_argument("--src", type=ip6, default=ip6("2001:db8:1::10"))
    u6.add_argument("--dst", type=ip6, default=ip6("2001:db8:2::10"))
    u6.add_argument("--sport", type=int, default=1024)
    u6.add_argument("--dport", type=int, default=9)
    a = p.parse_args()
    if a.cmd == "udp":
        write_pcap(a.out, [udp_frame(a, i) for i in range(a.flows)])
    elif a.cmd == "udp6":
        write_pcap(a.out, [udp6_frame(a, i) for i in range(a.flows)])
    else:
        frames = [arp_reply(a)]
        if a.ns6_sender and a.ns6_target:
            frames.append(ns6(a))
        write_pcap(a.out, frames)
    return 0


if __name__ == "__main__":
    sys.exit(main())
