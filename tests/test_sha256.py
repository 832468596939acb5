"""The core's SHA-256 against FIPS 180-4 / NIST example vectors and hashlib,
for every compression path: portable, SHA-NI (skipped where the CPU lacks
it) and whatever `auto` picks."""
import hashlib
import random

import pytest
from hypothesis import given, strategies as st

from emel.memory import _core


def _shani_available() -> bool:
    try:
        _core.sha256(b"", "shani")
        return True
    except ValueError:
        return False


# Every compression path; "auto" is one of them, so the hypothesis tests skip it.
COMPRESSION_PATHS = [
    "portable",
    pytest.param("shani", marks=pytest.mark.skipif(
        not _shani_available(), reason="CPU or build without the x86 SHA extensions")),
]
IMPLEMENTATIONS = ["auto", *COMPRESSION_PATHS]

# NIST CSRC "SHA256.pdf" / FIPS 180-4 examples, and the common empty-string vector.
VECTORS = [
    (b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    (b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    (b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    (b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
     "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
    (b"a" * 1_000_000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_fips_vectors(impl):
    for message, hexdigest in VECTORS:
        assert _core.sha256(message, impl).hex() == hexdigest


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_padding_boundaries(impl):
    # Lengths around the 55/56/64-byte padding edges are where SHA-256 code breaks.
    for n in list(range(50, 70)) + [119, 120, 127, 128, 129]:
        data = bytes(i % 251 for i in range(n))
        assert _core.sha256(data, impl) == hashlib.sha256(data).digest(), n


@pytest.mark.parametrize("impl", COMPRESSION_PATHS)
@given(data=st.binary(max_size=2048))
def test_matches_hashlib(impl, data):
    assert _core.sha256(data, impl) == hashlib.sha256(data).digest()


@st.composite
def chunked_messages(draw):
    """A multi-block message and a random split of it into update() chunks."""
    length = draw(st.integers(min_value=0, max_value=1500))
    data = random.Random(draw(st.integers(min_value=0, max_value=2**32))).randbytes(length)
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=length), max_size=12)))
    bounds = [0, *cuts, length]
    return data, [data[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("impl", COMPRESSION_PATHS)
@given(messages=st.lists(chunked_messages(), min_size=1, max_size=4))
def test_chunked_updates_match_hashlib(impl, messages):
    # Partial-block top-ups, runs of whole blocks and empty chunks in any order.
    for data, chunks in messages:
        assert b"".join(chunks) == data
        assert _core.sha256(chunks, impl) == hashlib.sha256(data).digest()


def test_implementation_names():
    assert _core.sha256_implementation() == ("shani" if _shani_available() else "portable")
    with pytest.raises(ValueError, match="unknown SHA-256 implementation"):
        _core.sha256(b"abc", "fast")

