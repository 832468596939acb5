"""The core's SHA-256 against FIPS 180-4 / NIST example vectors and hashlib."""
import hashlib

from hypothesis import given, strategies as st

from emel.memory import _core

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


def test_fips_vectors():
    for message, hexdigest in VECTORS:
        assert _core.sha256(message).hex() == hexdigest


def test_padding_boundaries():
    # Lengths around the 55/56/64-byte padding edges are where SHA-256 code breaks.
    for n in list(range(50, 70)) + [119, 120, 127, 128, 129]:
        data = bytes(i % 251 for i in range(n))
        assert _core.sha256(data) == hashlib.sha256(data).digest(), n


@given(st.binary(max_size=2048))
def test_matches_hashlib(data):
    assert _core.sha256(data) == hashlib.sha256(data).digest()
