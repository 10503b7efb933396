"""Where a provider key may be sent (``app.domain.provider_keys``): the normal form of a base
URL, what lies under a binding, and the tricks that must not get a key out.

Every URL here names a loopback host (``127.0.0.1``, ``localhost``, ``::1``) or none at all:
nothing is connected to; the tricks are judged by the parser alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.provider_keys import BadURL, Endpoint, endpoint, key_may_go, parse_endpoint

BOUND = "http://127.0.0.1:8631/v1"


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("http://127.0.0.1:8631/v1", Endpoint("http", "127.0.0.1", 8631, "/v1")),
        ("http://127.0.0.1:8631/v1/", Endpoint("http", "127.0.0.1", 8631, "/v1")),
        ("HTTP://LOCALHOST:8631/v1", Endpoint("http", "localhost", 8631, "/v1")),
        ("http://localhost.:8631/v1", Endpoint("http", "localhost", 8631, "/v1")),
        ("http://localhost/v1", Endpoint("http", "localhost", 80, "/v1")),
        ("https://localhost", Endpoint("https", "localhost", 443, "")),
        ("https://localhost/", Endpoint("https", "localhost", 443, "")),
        ("https://localhost:443/a", Endpoint("https", "localhost", 443, "/a")),
        ("http://[::1]:8631/v1", Endpoint("http", "::1", 8631, "/v1")),
        ("http://[0:0:0:0:0:0:0:1]:8631/v1", Endpoint("http", "::1", 8631, "/v1")),
        ("http://localhost:8631/%76%31", Endpoint("http", "localhost", 8631, "/v1")),  # unreserved: decoded
        ("http://localhost:8631/V1", Endpoint("http", "localhost", 8631, "/V1")),  # paths keep their case
        (
            "http://xn--lcalhost-9ld.localhost:8631/v1",
            Endpoint("http", "xn--lcalhost-9ld.localhost", 8631, "/v1"),
        ),
        (
            "http://127.0.0.1:8631/openai/deployments/a-b_c~d",
            Endpoint("http", "127.0.0.1", 8631, "/openai/deployments/a-b_c~d"),
        ),
    ],
)
def test_normal_form(url: str, normal: Endpoint) -> None:
    assert parse_endpoint(url) == normal
    assert parse_endpoint(str(normal)) == normal  # the normal form reads back as itself


@pytest.mark.parametrize(
    ("url", "why"),
    [
        # credentials or a different host hiding behind userinfo
        ("http://127.0.0.1:8631@127.0.0.2:8631/v1", "credentials"),
        ("http://user:pw@127.0.0.1:8631/v1", "credentials"),
        ("http://127.0.0.1:8631\\@127.0.0.2/v1", "backslash"),
        ("http://127.0.0.1:8631/v1?x=1", "query"),
        ("http://127.0.0.1:8631/v1#f", "fragment"),
        # non-ASCII: IDNA look-alikes (Cyrillic o), fullwidth dots, spaces, controls
        ("http://l\u043ecalhost:8631/v1", "ASCII"),
        ("http://localhost\u3002:8631/v1", "ASCII"),
        ("http://localhost :8631/v1", "ASCII"),
        ("http://localhost:8631/v1\x00", "ASCII"),
        # paths that could be read to climb out of the bound prefix
        ("http://127.0.0.1:8631/v1/../admin", "segments"),
        ("http://127.0.0.1:8631/v1/./x", "segments"),
        ("http://127.0.0.1:8631/v1/%2e%2e/admin", "segments"),
        ("http://127.0.0.1:8631/v1/%2E%2E/admin", "segments"),
        ("http://127.0.0.1:8631/v1//x", "segments"),
        ("http://127.0.0.1:8631/v1%2f..%2fadmin", "%-encode"),
        ("http://127.0.0.1:8631/v1/%252e%252e/admin", "%-encode"),
        ("http://127.0.0.1:8631/v1/%5c..", "%-encode"),
        ("http://127.0.0.1:8631/v1/%zz", "%"),
        ("http://127.0.0.1:8631/v1/%", "path"),
        ('http://127.0.0.1:8631/v1/a"b', "path"),
        # hosts that read as an address in some notation, or do not parse
        ("http://127.1:8631/v1", "four decimal"),
        ("http://0x7f.0.0.1:8631/v1", "four decimal"),
        ("http://2130706433:8631/v1", "four decimal"),
        ("http://127.000.000.001:8631/v1", "four decimal"),
        ("http://localhost%2e:8631/v1", "%-encode its host"),
        ("http://[::1%25lo]:8631/v1", "zone"),
        ("http://[::1:8631/v1", "unclosed"),
        ("http://[::1]x/v1", "port"),
        ("http://localhost..:8631/v1", "valid name"),
        ("http://-localhost:8631/v1", "valid name"),
        ("http://:8631/v1", "no host"),
        ("http://localhost:/v1", "port"),
        ("http://localhost:99999/v1", "port"),
        ("http://localhost:+80/v1", "port"),
        # not an http(s) URL at all
        ("ftp://localhost/v1", "http"),
        ("localhost:8631/v1", "absolute"),
        ("//localhost/v1", "absolute"),
        ("", "http"),
        ("http://localhost/" + "a" * 3000, "longer"),
    ],
)
def test_refused(url: str, why: str) -> None:
    with pytest.raises(BadURL, match=why):
        parse_endpoint(url)


def test_refused_without_a_string() -> None:
    with pytest.raises(BadURL):
        parse_endpoint(None)


@pytest.mark.parametrize(
    ("url", "covered"),
    [
        (BOUND, True),
        (BOUND + "/", True),
        (BOUND + "/chat/completions", True),
        ("HTTP://127.0.0.1:8631/v1/chat/completions", True),
        ("http://127.0.0.1:8631/v1x", False),  # a prefix that does not end at a segment boundary
        ("http://127.0.0.1:8631/v1-evil/chat/completions", False),
        ("http://127.0.0.1:8631/", False),
        ("http://127.0.0.1:8631/V1", False),
        ("http://127.0.0.1:8632/v1", False),  # another port
        ("http://127.0.0.1/v1", False),
        ("https://127.0.0.1:8631/v1", False),  # another scheme
        ("http://localhost:8631/v1", False),  # another name for the same address is another host
        ("http://127.0.0.2:8631/v1", False),
    ],
)
def test_what_a_binding_covers(url: str, covered: bool) -> None:
    assert parse_endpoint(BOUND).covers(parse_endpoint(url)) is covered
    assert key_may_go({"KEY": [parse_endpoint(BOUND)]}, "KEY", parse_endpoint(url)) is covered


def test_a_key_goes_nowhere_it_is_not_bound() -> None:
    bindings = {"KEY": [parse_endpoint(BOUND)], "OTHER": [parse_endpoint("http://127.0.0.1:8632")]}
    assert key_may_go(bindings, "OTHER", parse_endpoint("http://127.0.0.1:8632/anything/at/all"))
    assert not key_may_go(bindings, "KEY", parse_endpoint("http://127.0.0.1:8632/v1"))
    assert not key_may_go(bindings, "UNBOUND", parse_endpoint(BOUND))


def test_parts_from_an_http_client_normalise_the_same_way() -> None:
    assert endpoint("http", "127.0.0.1", 8631, "/v1/chat/completions") == parse_endpoint(
        BOUND + "/chat/completions"
    )
    assert endpoint("https", "localhost", None, "/") == Endpoint("https", "localhost", 443, "")
    with pytest.raises(BadURL):
        endpoint("http", "127.0.0.1", 8631, "/v1/../x")
    with pytest.raises(BadURL):
        endpoint("http", "127.0.0.1", 0, "/v1")


SEGMENT = st.text(alphabet="abcXYZ019-._~", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))


@given(st.lists(SEGMENT, max_size=4), st.lists(SEGMENT, max_size=4))
def test_covers_is_a_prefix_of_whole_segments(prefix: list[str], rest: list[str]) -> None:
    bound = parse_endpoint("http://127.0.0.1:8631/" + "/".join(prefix))
    url = parse_endpoint("http://127.0.0.1:8631/" + "/".join(prefix + rest))
    assert bound.covers(url)
    # Anything glued to the last segment of the prefix is another segment: not covered.
    if prefix:
        glued = parse_endpoint("http://127.0.0.1:8631/" + "/".join(prefix) + "x")
        assert not bound.covers(glued)
