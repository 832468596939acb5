"""Canonical CBOR (RFC 8949 §4.2.1, core deterministic encoding), standard
library only: the reference's plan hashes, traces and checkpoints use it.

``dumps(value)`` writes the one canonical encoding of a value: integers and
lengths in their shortest form, definite lengths only, map keys sorted by the
bytewise order of their own encodings, floats in the shortest of half, single
and double precision that keeps the value exactly (NaN as ``f9 7e00``).
``loads(data)`` reads only such encodings and refuses everything else
(indefinite lengths, longer-than-needed forms, unsorted or repeated keys,
tags, trailing bytes, truncation, invalid UTF-8), so a decoded value
re-encodes to the very same bytes.

Python values: ``int`` (−2^64 … 2^64−1), ``bytes``, ``str``, ``list`` /
``tuple`` (arrays), ``dict`` (maps), ``bool``, ``None``, ``float``. Anything
else (bignums, tags, ``undefined``) is outside the subset and an error.
"""

from __future__ import annotations

import math
import struct

__all__ = ["dumps", "loads", "CBORError"]

_U64 = 2**64
# A nesting depth no emel document comes near; bounds the decoder's recursion.
MAX_DEPTH = 512


class CBORError(ValueError):
    """Bytes that are not canonical CBOR, or a value CBOR cannot carry here."""


def _head(major: int, n: int) -> bytes:
    """The initial byte(s) of an item: major type and argument, shortest form."""
    if n < 24:
        return bytes((major << 5 | n,))
    if n < 0x100:
        return bytes((major << 5 | 24, n))
    if n < 0x10000:
        return bytes((major << 5 | 25,)) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes((major << 5 | 26,)) + n.to_bytes(4, "big")
    return bytes((major << 5 | 27,)) + n.to_bytes(8, "big")


def _float(x: float) -> bytes:
    if math.isnan(x):
        return b"\xf9\x7e\x00"
    for code, fmt in ((25, ">e"), (26, ">f")):
        try:
            packed = struct.pack(fmt, x)
        except OverflowError:
            continue
        if struct.unpack(fmt, packed)[0] == x:
            return bytes((0xE0 | code,)) + packed
    return b"\xfb" + struct.pack(">d", x)


def _encode(value, out: list, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise CBORError(f"nesting deeper than {MAX_DEPTH}")
    if value is False:
        out.append(b"\xf4")
    elif value is True:
        out.append(b"\xf5")
    elif value is None:
        out.append(b"\xf6")
    elif isinstance(value, int):
        if 0 <= value < _U64:
            out.append(_head(0, value))
        elif -_U64 <= value < 0:
            out.append(_head(1, -1 - value))
        else:
            raise CBORError(f"integer {value} does not fit in 64 bits (bignums are not used)")
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        out.append(_head(2, len(data)))
        out.append(data)
    elif isinstance(value, str):
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: CBOR text is UTF-8 only
            raise CBORError(f"text {value[:40]!r} is not valid Unicode: {e.reason} at "
                            f"index {e.start}") from None
        out.append(_head(3, len(data)))
        out.append(data)
    elif isinstance(value, (list, tuple)):
        out.append(_head(4, len(value)))
        for item in value:
            _encode(item, out, depth + 1)
    elif isinstance(value, dict):
        entries = []
        for key, item in value.items():
            k = []
            _encode(key, k, depth + 1)
            entries.append((b"".join(k), item))
        entries.sort(key=lambda e: e[0])
        for (a, _), (b, _) in zip(entries, entries[1:]):
            if a == b:
                raise CBORError("two map keys have the same encoding")
        out.append(_head(5, len(entries)))
        for key_bytes, item in entries:
            out.append(key_bytes)
            _encode(item, out, depth + 1)
    else:
        raise CBORError(f"cannot encode a {type(value).__name__} as CBOR")


def dumps(value) -> bytes:
    """The canonical CBOR encoding of ``value``."""
    out: list = []
    _encode(value, out, 0)
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise CBORError(f"truncated: {n} more byte(s) needed at offset {self.pos}, "
                            f"{len(self.data) - self.pos} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def argument(self, info: int, start: int) -> int:
        if info < 24:
            return info
        if info > 27:
            raise CBORError(f"offset {start}: indefinite length or reserved additional "
                            f"information {info} is not canonical")
        width = 1 << (info - 24)
        n = int.from_bytes(self.take(width), "big")
        if n < (24 if width == 1 else 1 << (4 * width)):
            raise CBORError(f"offset {start}: argument {n} is not in its shortest form")
        return n

    def item(self, depth: int):
        if depth > MAX_DEPTH:
            raise CBORError(f"nesting deeper than {MAX_DEPTH}")
        start = self.pos
        initial = self.take(1)[0]
        major, info = initial >> 5, initial & 31
        if major == 7:
            return self.simple(info, start)
        n = self.argument(info, start)
        if major == 0:
            return n
        if major == 1:
            return -1 - n
        if major == 2:
            return self.take(n)
        if major == 3:
            try:
                return self.take(n).decode("utf-8")
            except UnicodeDecodeError as e:
                raise CBORError(f"offset {start}: text string is not valid UTF-8") from e
        if major == 4:
            return [self.item(depth + 1) for _ in range(n)]
        if major == 5:
            out = {}
            previous = None
            for _ in range(n):
                key_start = self.pos
                key = self.item(depth + 1)
                key_bytes = self.data[key_start:self.pos]
                if previous is not None and key_bytes <= previous:
                    raise CBORError(f"offset {key_start}: map key "
                                    f"{'repeated' if key_bytes == previous else 'out of order'}")
                previous = key_bytes
                if isinstance(key, (list, dict)):
                    raise CBORError(f"offset {key_start}: arrays and maps as keys are not supported")
                out[key] = self.item(depth + 1)
            return out
        raise CBORError(f"offset {start}: tags (major type 6) are not used")

    def simple(self, info: int, start: int):
        if info == 20:
            return False
        if info == 21:
            return True
        if info == 22:
            return None
        if info in (25, 26, 27):
            raw = self.take(1 << (info - 24))
            x = struct.unpack({25: ">e", 26: ">f", 27: ">d"}[info], raw)[0]
            if _float(x) != bytes((0xE0 | info,)) + raw:
                raise CBORError(f"offset {start}: float is not in its shortest form")
            return x
        raise CBORError(f"offset {start}: simple value {info} is not used")


def loads(data: bytes):
    """Decode one canonical CBOR item that spans all of ``data``."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CBORError(f"expected bytes, got {type(data).__name__}")
    reader = _Reader(bytes(data))
    value = reader.item(0)
    if reader.pos != len(reader.data):
        raise CBORError(f"{len(reader.data) - reader.pos} trailing byte(s) after the item "
                        f"at offset {reader.pos}")
    return value
