"""The pure key and value codecs of jssync.kv.codecs (NATS ADR-54): the wire format of orbit.go's
``kvcodec`` (vectors from its tests), round trips, filters, chains, and the errors for bad input."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jssync
from jssync.kv.codecs import ROOT_TOKEN, supports_filter
from jssync.kv.keyvalue import validate_key, validate_key_filter

B64 = jssync.Base64Codec()
PATH = jssync.PathCodec()


# -- the wire format (what orbit.go's kvcodec writes) -------------------------------------------------


@pytest.mark.parametrize(("key", "stored"), [
    ("test.key.with.special.chars!@#$%^&*()", "dGVzdA.a2V5.d2l0aA.c3BlY2lhbA.Y2hhcnMhQCMkJV4mKigp"),
    ("user.123", "dXNlcg.MTIz"),
    ("Acme Inc.contact", "QWNtZSBJbmM.Y29udGFjdA"),
    ("\u00e9t\u00e9", "w6l0w6k"),            # UTF-8 bytes, no padding
    ("\xff\xfe".encode("latin-1").decode("utf-8", "surrogateescape"), "__4"),  # raw bytes, URL alphabet
])
def test_base64_keys_are_stored_token_by_token_url_safe_without_padding(key, stored):
    assert B64.encode_key(key) == stored
    assert B64.decode_key(stored) == key


@pytest.mark.parametrize(("filter_", "stored"), [
    ("user.*", "dXNlcg.*"), ("user.>", "dXNlcg.>"), ("app.*.config.>", "YXBw.*.Y29uZmln.>"), (">", ">"),
])
def test_base64_filters_keep_wildcard_tokens(filter_, stored):
    assert B64.encode_filter(filter_) == stored


def test_base64_values_are_url_safe_without_padding():
    value = b"\xfb\xff hello"
    assert B64.encode_value(value) == base64.urlsafe_b64encode(value).rstrip(b"=")
    assert b"=" not in B64.encode_value(b"a")
    assert B64.decode_value(B64.encode_value(value)) == value


@pytest.mark.parametrize(("key", "stored", "back"), [
    ("/foo/bar", "_root_.foo.bar", "/foo/bar"),
    ("foo/bar", "foo.bar", "foo/bar"),
    ("/foo/bar/baz/qux", "_root_.foo.bar.baz.qux", "/foo/bar/baz/qux"),
    ("/foo", "_root_.foo", "/foo"),
    ("foo/bar/", "foo.bar", "foo/bar"),  # a trailing separator is dropped, as orbit.go does
    ("/", "_root_", "/"),
    ("/foo/bar/", "_root_.foo.bar", "/foo/bar"),
])
def test_path_keys_as_orbit_stores_them(key, stored, back):
    assert PATH.encode_key(key) == stored
    assert PATH.decode_key(stored) == back


@pytest.mark.parametrize(("filter_", "stored"), [
    ("/user/123", "_root_.user.123"), ("/user/*", "_root_.user.*"), ("/user/>", "_root_.user.>"),
    ("/app/*/config/>", "_root_.app.*.config.>"), ("user/*", "user.*"),
])
def test_path_filters_keep_wildcards(filter_, stored):
    assert PATH.encode_filter(filter_) == stored


def test_path_with_another_separator():
    codec = jssync.PathCodec(":")
    assert codec.encode_key(":a:b") == "_root_.a.b"
    assert codec.decode_key("a.b") == "a:b"


def test_chain_of_path_then_base64_encodes_in_order_and_decodes_in_reverse():
    chain = jssync.KeyChainCodec(PATH, B64)
    assert chain.encode_key("/foo/bar") == "X3Jvb3Rf.Zm9v.YmFy"
    assert chain.decode_key("X3Jvb3Rf.Zm9v.YmFy") == "/foo/bar"
    assert chain.encode_filter("/foo/*") == "X3Jvb3Rf.Zm9v.*"


def test_value_chain_stores_base64_of_json():
    chain = jssync.ValueChainCodec(jssync.JSONCodec(), B64)
    stored = chain.encode_value({"a": [1, "é"]})
    assert base64.urlsafe_b64decode(stored + b"=" * (-len(stored) % 4)) == '{"a":[1,"é"]}'.encode()
    assert chain.decode_value(stored) == {"a": [1, "é"]}


def test_json_values_are_compact_utf8():
    assert jssync.JSONCodec().encode_value({"b": 1, "a": "é"}) == '{"b":1,"a":"é"}'.encode()
    assert jssync.JSONCodec(sort_keys=True).encode_value({"b": 1, "a": 2}) == b'{"a":2,"b":1}'
    assert jssync.JSONCodec().decode_value(b'{"a":[1,2]}') == {"a": [1, 2]}


def test_noop_passes_everything_through():
    codec = jssync.NoOpCodec()
    assert codec.encode_key("a.b") == codec.decode_key("a.b") == "a.b"
    assert codec.encode_filter("a.*") == "a.*"
    assert codec.encode_value(b"x") == codec.decode_value(b"x") == b"x"


# -- round trips ----------------------------------------------------------------------------------------

_tokens = st.text(min_size=1, max_size=12).filter(lambda t: "." not in t)
_keys = st.lists(_tokens, min_size=1, max_size=5).map(".".join)


@given(_keys)
def test_base64_any_unicode_key_round_trips_to_a_valid_stored_key(key):
    stored = B64.encode_key(key)
    assert validate_key(stored) == stored
    assert B64.decode_key(stored) == key


@given(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=4))
def test_base64_any_bytes_key_round_trips_through_surrogateescape(raw_tokens):
    tokens = [t.decode("utf-8", "surrogateescape") for t in raw_tokens]
    key = ".".join(tokens)
    if "" in key.split("."):  # a raw token holding b"." splits into empty tokens
        with pytest.raises(jssync.InvalidKeyError):
            B64.encode_key(key)
        return
    stored = B64.encode_key(key)
    validate_key(stored)
    assert B64.decode_key(stored).encode("utf-8", "surrogateescape") == key.encode("utf-8", "surrogateescape")


@given(st.binary(max_size=200))
def test_base64_values_round_trip(value):
    assert B64.decode_value(B64.encode_value(value)) == value


_segments = st.text(alphabet="abcXYZ019-_=", min_size=1, max_size=8).filter(lambda s: s != ROOT_TOKEN)


@given(st.booleans(), st.lists(_segments, min_size=1, max_size=5))
def test_path_keys_round_trip_to_valid_stored_keys(rooted, segments):
    key = ("/" if rooted else "") + "/".join(segments)
    stored = PATH.encode_key(key)
    assert validate_key(stored) == stored
    assert PATH.decode_key(stored) == key


@given(st.booleans(), st.lists(st.text(min_size=1, max_size=8).filter(lambda s: "/" not in s and "." not in s),
                               min_size=1, max_size=4))
def test_path_then_base64_round_trips_any_path(rooted, segments):
    chain = jssync.KeyChainCodec(jssync.PathCodec(), jssync.Base64Codec())
    key = ("/" if rooted else "") + "/".join(segments)
    if key.split("/", 1)[0] == ROOT_TOKEN:
        return
    stored = chain.encode_key(key)
    validate_key(stored)
    assert chain.decode_key(stored) == key


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(_json)
def test_json_values_round_trip(value):
    codec = jssync.ValueChainCodec(jssync.JSONCodec(), jssync.Base64Codec())
    assert codec.decode_value(codec.encode_value(value)) == value


#: A filter's literal tokens: a lone "*" or ">" there would be a wildcard, not a key token ('>.*' is no filter).
_literal_tokens = _tokens.filter(lambda t: t not in ("*", ">"))


@given(st.lists(_literal_tokens, min_size=1, max_size=4), st.sampled_from(["*", ">"]))
def test_base64_filter_matches_the_encoded_keys(tokens, wildcard):
    key = ".".join(tokens)
    filter_ = ".".join(tokens[:-1] + [wildcard])
    stored_filter = B64.encode_filter(filter_)
    validate_key_filter(stored_filter)
    stored_key = B64.encode_key(key).split(".")
    assert stored_filter.split(".")[:-1] == stored_key[:-1]


# -- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "a..b", ".a", "a."])
def test_base64_refuses_keys_with_empty_tokens(key):
    with pytest.raises(jssync.InvalidKeyError, match="empty"):
        B64.encode_key(key)


def test_base64_refuses_a_lone_surrogate():
    with pytest.raises(jssync.InvalidKeyError, match="UTF-8"):
        B64.encode_key("a\ud800")


@pytest.mark.parametrize("stored", ["a+b", "QQ==", "Q", "a b"])
def test_base64_decode_is_strict(stored):
    with pytest.raises(jssync.KeyValueDecodeError, match="Base64Codec cannot decode"):
        B64.decode_key(stored)


@pytest.mark.parametrize(("key", "match"), [("a.b/c", "'.'"), ("_root_/x", "_root_")])
def test_path_refuses_keys_that_would_not_read_back(key, match):
    with pytest.raises(jssync.InvalidKeyError, match=match):
        PATH.encode_key(key)


@pytest.mark.parametrize("sep", ["", ".", "*", ">", 1])
def test_path_refuses_a_bad_separator(sep):
    with pytest.raises(jssync.ValidationError, match="separator"):
        jssync.PathCodec(sep)


@pytest.mark.parametrize("value", [{1, 2}, float("nan"), object()])
def test_json_refuses_what_json_cannot_hold(value):
    with pytest.raises(jssync.InvalidValueError, match="JSONCodec"):
        jssync.JSONCodec().encode_value(value)


def test_chains_need_codecs_with_the_right_methods():
    with pytest.raises(jssync.ValidationError, match="at least one"):
        jssync.KeyChainCodec()
    with pytest.raises(jssync.ValidationError, match="encode_value"):
        jssync.ValueChainCodec(jssync.PathCodec())


class _Upper:
    """A key codec without encode_filter."""

    def encode_key(self, key: str) -> str:
        return key.upper()

    def decode_key(self, stored: str) -> str:
        return stored.lower()


def test_a_chain_with_a_link_without_encode_filter_takes_only_plain_filters():
    chain = jssync.KeyChainCodec(_Upper(), B64)
    assert not supports_filter(chain)
    assert supports_filter(jssync.KeyChainCodec(PATH, B64))
    assert chain.encode_filter("a.b") == B64.encode_key("A.B")
    with pytest.raises(jssync.InvalidKeyError, match="_Upper cannot encode wildcards"):
        chain.encode_filter("a.*")


def test_protocols_recognise_codecs():
    assert isinstance(B64, jssync.FilterableKeyCodec)
    assert isinstance(B64, jssync.ValueCodec)
    assert isinstance(_Upper(), jssync.KeyCodec)
    assert not isinstance(_Upper(), jssync.FilterableKeyCodec)
    assert not isinstance(jssync.JSONCodec(), jssync.KeyCodec)
