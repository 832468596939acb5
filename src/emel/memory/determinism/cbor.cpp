// Canonical CBOR writer (see cbor.hpp). No decoder here: the core only ever
// hashes what it writes; checkpoints are read by the Python package.
#include "emel/memory/determinism/cbor.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>

#include "emel/memory/core/errors.hpp"

namespace emel::memory::cbor {

namespace {

// The half-precision bits of x when x is exactly representable there.
bool exact_half(double x, uint16_t& bits) {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double ax = std::fabs(x);
    if (std::isinf(x)) { bits = sign | 0x7c00; return true; }
    if (ax == 0.0) { bits = sign; return true; }
    if (ax > 65504.0) return false;
    const int e = std::ilogb(ax);  // ax = 1.f * 2^e
    if (e >= -14) {                // normal: 10 fraction bits
        const double scaled = std::ldexp(ax, 10 - e);  // in [1024, 2048)
        if (scaled != std::floor(scaled)) return false;
        bits = static_cast<uint16_t>(sign | ((e + 15) << 10) | (static_cast<uint16_t>(scaled) - 1024));
        return true;
    }
    const double scaled = std::ldexp(ax, 24);  // subnormal: multiples of 2^-24
    if (scaled != std::floor(scaled)) return false;
    bits = static_cast<uint16_t>(sign | static_cast<uint16_t>(scaled));
    return true;
}

}  // namespace

void Writer::float64(double x) {
    if (std::isnan(x)) {  // one NaN: the canonical quiet NaN in half precision
        out.insert(out.end(), {0xf9, 0x7e, 0x00});
        return;
    }
    uint16_t half = 0;
    if (exact_half(x, half)) {
        out.insert(out.end(), {0xf9, static_cast<uint8_t>(half >> 8), static_cast<uint8_t>(half)});
        return;
    }
    if (std::fabs(x) <= FLT_MAX) {  // a float cast of anything larger is undefined
        const float f = static_cast<float>(x);
        if (static_cast<double>(f) == x) {
            uint32_t u;
            std::memcpy(&u, &f, 4);
            out.push_back(0xfa);
            for (int i = 3; i >= 0; --i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
            return;
        }
    }
    uint64_t u;
    std::memcpy(&u, &x, 8);
    out.push_back(0xfb);
    for (int i = 7; i >= 0; --i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}

void encode(const Value& v, Writer& w) {
    using K = Value::Kind;
    switch (v.kind) {
        case K::Unsigned: w.uint(v.n); return;
        case K::Negative: w.negative(v.n); return;
        case K::Bytes: w.bytes(v.str.data(), v.str.size()); return;
        case K::Text: w.text(v.str); return;
        case K::False: w.boolean(false); return;
        case K::True: w.boolean(true); return;
        case K::Null: w.null(); return;
        case K::Float: w.float64(v.f); return;
        case K::Array:
            w.array(v.items.size());
            for (const Value& item : v.items) encode(item, w);
            return;
        case K::Map: {
            std::vector<std::vector<uint8_t>> keys(v.items.size());
            for (size_t i = 0; i < keys.size(); ++i) keys[i] = encode(v.items[i]);
            std::vector<size_t> order(keys.size());
            std::iota(order.begin(), order.end(), size_t{0});
            // Bytewise lexicographic order of the encoded keys (RFC 8949 §4.2.1).
            std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
            for (size_t i = 1; i < order.size(); ++i)
                if (keys[order[i - 1]] == keys[order[i]])
                    throw PlanError(ErrorCode::InvalidIrShapes,
                                    "CBOR map has two keys with the same encoding");
            w.map(order.size());
            for (size_t i : order) {
                w.raw(keys[i]);
                encode(v.map_values[i], w);
            }
            return;
        }
    }
}

std::vector<uint8_t> encode(const Value& v) {
    Writer w;
    encode(v, w);
    return std::move(w.out);
}

}  // namespace emel::memory::cbor
