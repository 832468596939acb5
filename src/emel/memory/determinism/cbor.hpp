// Canonical CBOR encoding (RFC 8949 §4.2.1, core deterministic encoding):
// shortest integer and length forms, definite lengths only, map keys sorted
// by the bytewise order of their encodings, floats in the shortest of half,
// single and double precision that keeps the value. The plan hash and every
// other hashed structure are SHA-256 over bytes written here
// (docs/determinism.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "emel/memory/determinism/sha256.hpp"

namespace emel::memory::cbor {

// Streaming writer: the caller gives array and map lengths up front. For
// maps the caller must write keys in canonical order; Value below sorts them.
// With a hasher attached, the bytes go to it in chunks instead of piling up
// in `out` (a million-tensor plan hash then needs no 100 MB buffer).
class Writer {
public:
    Writer() = default;
    explicit Writer(Sha256* sink) : sink_(sink) { out.reserve(kSpillBytes + kMaxInlineItem); }
    // Hands any buffered bytes to the hasher (call before finishing it).
    void flush() {
        if (sink_ && !out.empty()) {
            sink_->update(out.data(), out.size());
            out.clear();
        }
    }

    // The item writers are inline: hashing a plan calls them millions of
    // times, mostly for one-byte heads and short strings.
    void uint(uint64_t n) { head(0, n); spill(); }
    void negative(uint64_t n) { head(1, n); spill(); }  // encodes the integer -1 - n
    void bytes(const void* data, size_t len) {
        head(2, len);
        append(static_cast<const uint8_t*>(data), len);
        spill();
    }
    void text(std::string_view s) {
        head(3, s.size());
        append(reinterpret_cast<const uint8_t*>(s.data()), s.size());
        spill();
    }
    void array(uint64_t len) { head(4, len); spill(); }
    void map(uint64_t len) { head(5, len); spill(); }
    void boolean(bool b) { out.push_back(b ? 0xf5 : 0xf4); }
    void null() { out.push_back(0xf6); }
    void float64(double x);
    void raw(const std::vector<uint8_t>& encoded) { append(encoded.data(), encoded.size()); }

    std::vector<uint8_t> out;

private:
    static constexpr size_t kSpillBytes = size_t{1} << 16;
    static constexpr size_t kMaxInlineItem = 256;  // room for typical items past the spill mark

    void append(const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); }
    void head(uint8_t major, uint64_t n) {
        const auto m = static_cast<uint8_t>(major << 5);
        if (n < 24) {
            out.push_back(static_cast<uint8_t>(m | n));
            return;
        }
        // Shortest of 1, 2, 4 or 8 big-endian bytes after the initial byte.
        const int width = n <= 0xff ? 1 : n <= 0xffff ? 2 : n <= 0xffffffffULL ? 4 : 8;
        uint8_t encoded[9];
        encoded[0] = static_cast<uint8_t>(m | (width == 1 ? 24 : width == 2 ? 25 : width == 4 ? 26 : 27));
        for (int i = 0; i < width; ++i) encoded[1 + i] = static_cast<uint8_t>(n >> (8 * (width - 1 - i)));
        append(encoded, 1 + static_cast<size_t>(width));
    }
    void spill() { if (sink_ && out.size() >= kSpillBytes) flush(); }
    Sha256* sink_ = nullptr;
};

// A CBOR value as a tree, for structures with maps (their keys are sorted at
// encoding time) and for the bindings' test entry point.
struct Value {
    enum class Kind : uint8_t { Unsigned, Negative, Bytes, Text, Array, Map, False, True, Null, Float };
    Kind kind = Kind::Null;
    uint64_t n = 0;          // Unsigned: the value; Negative: -1 - value
    double f = 0.0;          // Float
    std::string str;         // Bytes, Text
    std::vector<Value> items;       // Array elements; Map keys
    std::vector<Value> map_values;  // Map values, parallel to items

    static Value uint(uint64_t v) { Value x; x.kind = Kind::Unsigned; x.n = v; return x; }
    static Value text(std::string s) { Value x; x.kind = Kind::Text; x.str = std::move(s); return x; }
    static Value bytes(std::string s) { Value x; x.kind = Kind::Bytes; x.str = std::move(s); return x; }
    static Value boolean(bool b) { Value x; x.kind = b ? Kind::True : Kind::False; return x; }
    static Value null() { return Value(); }
    static Value array() { Value x; x.kind = Kind::Array; return x; }
    static Value map() { Value x; x.kind = Kind::Map; return x; }
    Value& push(Value v) { items.push_back(std::move(v)); return *this; }
    Value& set(Value key, Value v) {
        items.push_back(std::move(key));
        map_values.push_back(std::move(v));
        return *this;
    }
};

// Appends the canonical encoding of v. Two keys of one map with the same
// encoding are a PlanError (INVALID_IR_SHAPES): no canonical form exists.
void encode(const Value& v, Writer& w);
std::vector<uint8_t> encode(const Value& v);

}  // namespace emel::memory::cbor
