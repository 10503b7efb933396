"""The SSRF guard's address check (``is_public_address``), on ip objects only: nothing here
resolves or connects. The HTTP tools call it for every address a host resolves to."""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine.tools.http import is_public_address

V4, V6 = IPv4Address, IPv6Address

CASES: list[tuple[IPv4Address | IPv6Address, bool]] = [
    # public
    (V4("8.8.8.8"), True),
    (V4("1.1.1.1"), True),
    (V6("2606:4700:4700::1111"), True),
    # IPv4 non-public
    (V4("127.0.0.1"), False),
    (V4("127.8.9.10"), False),
    (V4("10.0.0.1"), False),
    (V4("172.31.255.255"), False),
    (V4("192.168.0.10"), False),
    (V4("169.254.169.254"), False),  # cloud metadata
    (V4("100.64.0.1"), False),  # carrier-grade NAT
    (V4("0.0.0.0"), False),
    (V4("255.255.255.255"), False),
    (V4("224.0.0.251"), False),
    (V4("240.0.0.1"), False),
    (V4("192.0.2.1"), False),  # documentation
    (V4("198.18.0.1"), False),  # benchmarking
    # IPv6 non-public
    (V6("::1"), False),
    (V6("::"), False),
    (V6("fe80::1"), False),
    (V6("fc00::1"), False),
    (V6("fd12:3456::1"), False),
    (V6("ff02::1"), False),
    (V6("fec0::1"), False),  # site-local
    (V6("feff:ffff::1"), False),  # site-local, top of the range
    (V6("2001:db8::1"), False),  # documentation
    (V6("3fff::1"), False),  # documentation (RFC 9637)
    (V6("100::1"), False),  # discard-only
    (V6("5f00::1"), False),  # SRv6
    # IPv4-mapped
    (V6("::ffff:127.0.0.1"), False),
    (V6("::ffff:10.0.0.1"), False),
    (V6("::ffff:169.254.169.254"), False),
    (V6("::ffff:8.8.8.8"), True),
    # IPv4-compatible (deprecated): refused whatever it wraps
    (V6("::127.0.0.1"), False),
    (V6("::10.0.0.1"), False),
    (V6("::8.8.8.8"), False),
    # 6to4: judged by the IPv4 address in bits 16..48
    (V6("2002:7f00:1::1"), False),  # 127.0.0.1
    (V6("2002:a00:1::"), False),  # 10.0.0.1
    (V6("2002:c0a8:1::1"), False),  # 192.168.0.1
    (V6("2002:a9fe:a9fe::1"), False),  # 169.254.169.254
    (V6("2002::1"), False),  # 0.0.0.0
    (V6("2002:808:808::1"), True),  # 8.8.8.8
    # NAT64 well-known prefix: judged by the last 32 bits
    (V6("64:ff9b::a00:1"), False),  # 10.0.0.1
    (V6("64:ff9b::7f00:1"), False),  # 127.0.0.1
    (V6("64:ff9b::a9fe:a9fe"), False),  # 169.254.169.254
    (V6("64:ff9b::808:808"), True),  # 8.8.8.8
    # local-use NAT64 (RFC 8215): inside one network, refused
    (V6("64:ff9b:1::a00:1"), False),
    (V6("64:ff9b:1::808:808"), False),
    # Teredo: the client's IPv4 address is obfuscated in the address; refused outright
    (V6("2001:0:4136:e378:8000:63bf:3fff:fdd2"), False),
    (V6("2001:0:808:808:0:f5f5:f5f5:f5fe"), False),  # client 10.10.10.1
]


@pytest.mark.parametrize(("ip", "public"), CASES, ids=[str(ip) for ip, _ in CASES])
def test_is_public_address(ip: IPv4Address | IPv6Address, public: bool) -> None:
    assert is_public_address(ip) is public


ipv4s = st.integers(min_value=0, max_value=2**32 - 1).map(IPv4Address)


@given(ipv4s)
def test_ipv4_mapped_is_judged_by_its_ipv4(v4: IPv4Address) -> None:
    assert is_public_address(IPv6Address(0xFFFF_0000_0000 | int(v4))) is is_public_address(v4)


@given(ipv4s, st.integers(min_value=0, max_value=2**80 - 1))
def test_6to4_is_judged_by_its_ipv4(v4: IPv4Address, suffix: int) -> None:
    address = IPv6Address((0x2002 << 112) | (int(v4) << 80) | suffix)
    assert address.sixtofour == v4
    assert is_public_address(address) is is_public_address(v4)


@given(ipv4s)
def test_nat64_is_judged_by_its_ipv4(v4: IPv4Address) -> None:
    prefix = int(ipaddress.IPv6Address("64:ff9b::"))
    assert is_public_address(IPv6Address(prefix | int(v4))) is is_public_address(v4)


@given(ipv4s)
def test_a_non_public_ipv4_is_never_public_in_any_ipv6_wrapping(v4: IPv4Address) -> None:
    if is_public_address(v4):
        return
    wrappings = [
        0xFFFF_0000_0000 | int(v4),  # IPv4-mapped
        int(v4),  # IPv4-compatible
        (0x2002 << 112) | (int(v4) << 80),  # 6to4
        int(IPv6Address("64:ff9b::")) | int(v4),  # NAT64
        int(IPv6Address("64:ff9b:1::")) | int(v4),  # local-use NAT64
        int(IPv6Address("2001::")) | (int(v4) ^ 0xFFFF_FFFF),  # Teredo client (obfuscated)
    ]
    for wrapped in wrappings:
        assert not is_public_address(IPv6Address(wrapped)), IPv6Address(wrapped)


@given(st.integers(min_value=0, max_value=2**118 - 1))
def test_site_local_is_never_public(low: int) -> None:
    assert not is_public_address(IPv6Address((0xFEC0 << 112) | low))
