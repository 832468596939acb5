// The deterministic debug pattern of DebugFillTensor_v1 and the execution
// check. It depends on the position inside the root tensor, so a view read at
// the wrong offset, or a tensor read from another tensor's bytes, never
// matches; and it is cheap: one XOR and one add per 8 bytes.
#include <cstring>

#include "emel/memory/runtime/arena_engine.hpp"

namespace emel::memory {

namespace {

constexpr uint64_t kStride = 0x9E3779B97F4A7C15ull;  // odd: j -> j * kStride is a bijection

inline uint64_t word_at(uint64_t key, uint64_t j) { return key ^ ((j + 1) * kStride); }

// Little-endian words whatever the host; plain moves on a little-endian host.
inline uint64_t to_le(uint64_t w) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(w);
#else
    return w;
#endif
}

inline void store_le(uint8_t* p, uint64_t w) {
    w = to_le(w);
    std::memcpy(p, &w, 8);
}

inline uint64_t load_le(const uint8_t* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return to_le(w);
}

}  // namespace

uint64_t pattern_key(uint64_t seed, const std::string& tensor_id) {
    uint8_t prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(seed >> (56 - 8 * i));
    Sha256 h;
    h.update(prefix, 8);
    h.update(tensor_id.data(), tensor_id.size());
    const Digest d = h.finish();
    uint64_t key = 0;
    for (int i = 0; i < 8; ++i) key = (key << 8) | d[i];
    return key;
}

uint8_t pattern_byte(uint64_t key, uint64_t position) {
    return static_cast<uint8_t>(word_at(key, position >> 3) >> (8 * (position & 7)));
}

void pattern_fill(uint8_t* dst, uint64_t key, uint64_t from, uint64_t len) {
    uint64_t i = 0;
    for (; i < len && ((from + i) & 7) != 0; ++i) dst[i] = pattern_byte(key, from + i);
    // (j + 1) * kStride kept as a running sum: no multiply, so the loop vectorizes.
    uint64_t counter = (((from + i) >> 3) + 1) * kStride;
    const uint64_t words = (len - i) >> 3;
    for (uint64_t w = 0; w < words; ++w, counter += kStride) store_le(dst + i + 8 * w, key ^ counter);
    i += 8 * words;
    for (; i < len; ++i) dst[i] = pattern_byte(key, from + i);
}

uint64_t pattern_mismatch(const uint8_t* src, uint64_t key, uint64_t from, uint64_t len) {
    uint64_t i = 0;
    for (; i < len && ((from + i) & 7) != 0; ++i)
        if (src[i] != pattern_byte(key, from + i)) return i;
    uint64_t j = (from + i) >> 3;
    // Compare blocks of words branch-free, then find the byte in a bad block.
    constexpr uint64_t kBlock = 64;
    while (i + 8 * kBlock <= len) {
        uint64_t diff = 0, counter = (j + 1) * kStride;
        for (uint64_t w = 0; w < kBlock; ++w, counter += kStride)
            diff |= load_le(src + i + 8 * w) ^ key ^ counter;
        if (diff != 0) break;
        i += 8 * kBlock;
        j += kBlock;
    }
    for (; i + 8 <= len; i += 8, ++j)
        if (load_le(src + i) != word_at(key, j)) {
            for (uint64_t b = 0; b < 8; ++b)
                if (src[i + b] != pattern_byte(key, from + i + b)) return i + b;
        }
    for (; i < len; ++i)
        if (src[i] != pattern_byte(key, from + i)) return i;
    return len;
}

}  // namespace emel::memory
