"""Canonical CBOR (RFC 8949 §4.2.1) in the reference (emel.memory.cbor) and in
the C++ core (_core.cbor_dumps): RFC 8949 Appendix A examples, cbor2's
canonical output on random values, and the strict decoder's refusals."""

import math

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emel.memory import _core, cbor

ENCODERS = {"reference": cbor.dumps, "core": _core.cbor_dumps}

# RFC 8949 Appendix A: every example inside the subset emel uses (no tags,
# bignums, undefined or other simple values, no indefinite lengths), with the
# float examples whose diagnostic form is already the shortest encoding.
APPENDIX_A = [
    (0, "00"), (1, "01"), (10, "0a"), (23, "17"), (24, "1818"), (25, "1819"),
    (100, "1864"), (1000, "1903e8"), (1000000, "1a000f4240"),
    (1000000000000, "1b000000e8d4a51000"), (18446744073709551615, "1bffffffffffffffff"),
    (-18446744073709551616, "3bffffffffffffffff"), (-1, "20"), (-10, "29"), (-100, "3863"),
    (-1000, "3903e7"),
    (0.0, "f90000"), (-0.0, "f98000"), (1.0, "f93c00"), (1.1, "fb3ff199999999999a"),
    (1.5, "f93e00"), (65504.0, "f97bff"), (100000.0, "fa47c35000"),
    (3.4028234663852886e38, "fa7f7fffff"), (1.0e300, "fb7e37e43c8800759c"),
    (5.960464477539063e-8, "f90001"), (0.00006103515625, "f90400"), (-4.0, "f9c400"),
    (-4.1, "fbc010666666666666"), (math.inf, "f97c00"), (math.nan, "f97e00"),
    (-math.inf, "f9fc00"),
    (False, "f4"), (True, "f5"), (None, "f6"),
    (b"", "40"), (bytes.fromhex("01020304"), "4401020304"),
    ("", "60"), ("a", "6161"), ("IETF", "6449455446"), ('"\\', "62225c"), ("\u00fc", "62c3bc"),
    ("\u6c34", "63e6b0b4"), ("\U00010151", "64f0908591"),
    ([], "80"), ([1, 2, 3], "83010203"), ([1, [2, 3], [4, 5]], "8301820203820405"),
    (list(range(1, 26)), "98190102030405060708090a0b0c0d0e0f101112131415161718181819"),
    ({}, "a0"), ({1: 2, 3: 4}, "a201020304"), ({"a": 1, "b": [2, 3]}, "a26161016162820203"),
    (["a", {"b": "c"}], "826161a161626163"),
    ({"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"},
     "a56161614161626142616361436164614461656145"),
]


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("value,hex_", APPENDIX_A, ids=[h for _, h in APPENDIX_A])
def test_rfc8949_appendix_a(encoder, value, hex_):
    assert ENCODERS[encoder](value).hex() == hex_


@pytest.mark.parametrize("value,hex_", APPENDIX_A, ids=[h for _, h in APPENDIX_A])
def test_decoder_reads_appendix_a(value, hex_):
    decoded = cbor.loads(bytes.fromhex(hex_))
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(decoded)
    else:
        assert decoded == value and type(decoded) is type(value)
        assert cbor.dumps(decoded).hex() == hex_


# Keys of one kind only: there RFC 8949's bytewise order and the length-first
# order cbor2 uses (RFC 7049's canonical form) coincide.
_scalars = (st.integers(-2**64, 2**64 - 1) | st.floats(allow_nan=False) | st.booleans() | st.none()
            | st.text() | st.binary())
_keys = st.sampled_from([st.text(), st.integers(0, 2**64 - 1), st.integers(-2**64, -1), st.binary()])
values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5)
    | _keys.flatmap(lambda k: st.dictionaries(k, inner, max_size=5)),
    max_leaves=25)


@given(values)
def test_matches_cbor2_canonical_and_round_trips(value):
    expected = cbor2.dumps(value, canonical=True)
    assert cbor.dumps(value) == expected
    assert _core.cbor_dumps(value) == expected
    assert cbor.dumps(cbor.loads(expected)) == expected


def test_mixed_key_types_sort_bytewise_not_length_first():
    # 1000 encodes as 19 03e8 (3 bytes), "a" as 61 61 (2 bytes): RFC 8949
    # §4.2.1 puts 1000 first (0x19 < 0x61); cbor2 (length first) does not.
    value = {"a": 1, 1000: 2}
    ours = bytes.fromhex("a21903e8026161" "01")
    assert cbor.dumps(value) == ours == _core.cbor_dumps(value)
    assert cbor2.dumps(value, canonical=True) != ours
    assert cbor.loads(ours) == value


@pytest.mark.parametrize("hex_,why", [
    ("1817", "shortest"),                 # 23 in two bytes
    ("190017", "shortest"),
    ("1a000000ff", "shortest"),
    ("1b00000000ffffffff", "shortest"),
    ("5f42010243030405ff", "indefinite"),  # indefinite byte string
    ("9fff", "indefinite"),
    ("bf6161f5ff", "indefinite"),
    ("fa3fc00000", "shortest"),           # 1.5 as a single: half is shorter
    ("fb3ff8000000000000", "shortest"),   # 1.5 as a double
    ("f97e01", "shortest"),               # a NaN that is not f97e00
    ("a2616201616101", "out of order"),   # {"b": 1, "a": 1}
    ("a2616101616102", "repeated"),       # "a" twice
    ("0000", "trailing"),
    ("83010203ff", "trailing"),
    ("8301", "truncated"),
    ("4401", "truncated"),
    ("", "truncated"),
    ("c11a514b67b0", "tags"),             # tag 1 (epoch time)
    ("f7", "simple value"),               # undefined
    ("f0", "simple value"),
    ("62c328", "UTF-8"),
])
def test_strict_decoder_refuses(hex_, why):
    with pytest.raises(cbor.CBORError, match=why):
        cbor.loads(bytes.fromhex(hex_))


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("value", [2**64, -2**64 - 1, object(), {1, 2}, "a\ud800", {"\udfff": 1}])
def test_values_outside_the_subset_are_refused(encoder, value):
    with pytest.raises((ValueError, TypeError)):
        ENCODERS[encoder](value)


def test_lone_surrogate_is_a_cbor_error():
    """Issue 31: a lone surrogate (json.loads('"\\ud800"') makes one) raised
    UnicodeEncodeError, not the module's CBORError."""
    with pytest.raises(cbor.CBORError, match="surrogates not allowed"):
        cbor.dumps({"id": "a\ud800"})
