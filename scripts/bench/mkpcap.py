#!/usr/bin/env python3
"""Write the benchmark's input pcaps with the standard library only.

  mkpcap.py udp OUT.pcap --flows 1024 --size 60 --dst-mac 02:70:63:61:70:00 \
      [--src-mac 02:00:00:00:01:0a] [--src 198.18.1.10] [--dst 198.18.2.10] \
      [--sport 1024] [--dport 9]
  mkpcap.py arp-reply OUT.pcap --dst-mac MAC --sender-mac MAC --sender IP --target IP

`udp`: one UDP/IPv4 frame per flow (flow i = source port sport+i), `size`
bytes each without FCS (60 = the 64-byte Ethernet minimum), valid IPv4
header checksum, UDP checksum computed. These are the "real UDP/IPv4
frames of 1024 flows" that net_pcap replays with infinite_rx=1.
`arp-reply`: one ARP reply, to teach the node its next hop's MAC on a port
where nobody answers ARP (net_pcap, net_null).
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
    a = p.parse_args()
    if a.cmd == "udp":
        write_pcap(a.out, [udp_frame(a, i) for i in range(a.flows)])
    else:
        write_pcap(a.out, [arp_reply(a)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
