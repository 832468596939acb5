#include "emel/memory/determinism/sha256.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

// The SHA-NI path needs GCC/Clang's target attribute and CPU detection.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define EMEL_SHA256_X86 1
#else
#define EMEL_SHA256_X86 0
#endif

namespace emel::memory {
namespace {

// 16-byte aligned so the SHA-NI path can load four constants at a time.
alignas(16) constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::array<uint32_t, 8> kInitialState = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress_portable(uint32_t state[8], const uint8_t* blocks, size_t num_blocks) {
    for (; num_blocks > 0; --num_blocks, blocks += 64) {
        const uint8_t* block = blocks;
        uint32_t w[64];
        for (int i = 0; i < 16; ++i)
            w[i] = uint32_t{block[4 * i]} << 24 | uint32_t{block[4 * i + 1]} << 16 |
                   uint32_t{block[4 * i + 2]} << 8 | uint32_t{block[4 * i + 3]};
        for (int i = 16; i < 64; ++i) {
            uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
        uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
        for (int i = 0; i < 64; ++i) {
            uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
            uint32_t ch = (e & f) ^ (~e & g);
            uint32_t t1 = h + s1 + ch + kRoundConstants[i] + w[i];
            uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
            uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
            uint32_t t2 = s0 + maj;
            h = g; g = f; f = e; e = d + t1;
            d = c; c = b; b = a; a = t1 + t2;
        }
        state[0] += a; state[1] += b; state[2] += c; state[3] += d;
        state[4] += e; state[5] += f; state[6] += g; state[7] += h;
    }
}

#if EMEL_SHA256_X86
// SHA-NI keeps the working variables in two registers, ABEF and CDGH (dword
// 3 first); sha256rnds2 does two rounds on them with two W+K words, and
// sha256msg1/msg2 compute the message schedule four words at a time. Only
// this function is compiled for the SHA extensions, so the rest of the build
// needs no flags and runs on any x86 CPU.
__attribute__((target("sha,sse4.1"))) void compress_shani(uint32_t state[8], const uint8_t* blocks,
                                                          size_t num_blocks) {
    // Byte order within each 32-bit word: message words are big-endian.
    const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    const __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
    const __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
    const __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    const auto* k = reinterpret_cast<const __m128i*>(kRoundConstants);

    for (; num_blocks > 0; --num_blocks, blocks += 64) {
        const __m128i abef_in = abef, cdgh_in = cdgh;
        // w[j & 3] holds schedule words 4j..4j+3 for the last four groups.
        __m128i w[4];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) {
            __m128i words;
            if (j < 4) {
                words = _mm_shuffle_epi8(
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * j)), byte_swap);
            } else {
                // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16]: msg1 adds the
                // s0 terms, the alignr brings W[t-7..t-4], msg2 adds the s1 terms.
                words = _mm_sha256msg1_epu32(w[j & 3], w[(j + 1) & 3]);
                words = _mm_add_epi32(words, _mm_alignr_epi8(w[(j + 3) & 3], w[(j + 2) & 3], 4));
                words = _mm_sha256msg2_epu32(words, w[(j + 3) & 3]);
            }
            w[j & 3] = words;
            const __m128i wk = _mm_add_epi32(words, _mm_load_si128(k + j));
            // Two rounds make the old ABEF the new CDGH, so the registers swap roles.
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef_in);
        cdgh = _mm_add_epi32(cdgh, cdgh_in);
    }

    const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}
#endif

bool detect_shani() {
#if EMEL_SHA256_X86
    __builtin_cpu_init();  // may run before the library's constructors
    return __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1");
#else
    return false;
#endif
}

Sha256::CompressFn compress_for(Sha256Implementation impl) {
    switch (impl) {
        case Sha256Implementation::Portable:
            return compress_portable;
        case Sha256Implementation::ShaNi:
#if EMEL_SHA256_X86
            if (sha256_shani_available()) return compress_shani;
#endif
            throw std::invalid_argument("SHA-256 implementation 'shani' is not available on this CPU/build");
        case Sha256Implementation::Auto:
            break;
    }
    // Resolved once; every hasher after that takes the same path.
    static const Sha256::CompressFn automatic =
        compress_for(sha256_auto_implementation() == Sha256Implementation::ShaNi
                         ? Sha256Implementation::ShaNi
                         : Sha256Implementation::Portable);
    return automatic;
}

}  // namespace

bool sha256_shani_available() {
    static const bool available = detect_shani();
    return available;
}

Sha256Implementation sha256_auto_implementation() {
    return sha256_shani_available() ? Sha256Implementation::ShaNi : Sha256Implementation::Portable;
}

std::string_view sha256_implementation_name(Sha256Implementation impl) {
    switch (impl) {
        case Sha256Implementation::Auto: return "auto";
        case Sha256Implementation::Portable: return "portable";
        case Sha256Implementation::ShaNi: return "shani";
    }
    return "auto";
}

Sha256Implementation parse_sha256_implementation(std::string_view name) {
    for (auto impl : {Sha256Implementation::Auto, Sha256Implementation::Portable, Sha256Implementation::ShaNi})
        if (name == sha256_implementation_name(impl)) return impl;
    throw std::invalid_argument("unknown SHA-256 implementation '" + std::string(name) +
                                "' (expected 'auto', 'portable' or 'shani')");
}

Sha256::Sha256(Sha256Implementation impl)
    : compress_(compress_for(impl)), state_(kInitialState), buffer_{} {}

void Sha256::update(const void* data, size_t len) {
    if (finished_) throw std::logic_error("Sha256::update after finish");
    const auto* p = static_cast<const uint8_t*>(data);
    total_bytes_ += len;
    if (buffered_ > 0) {  // top up the partial block first
        const size_t take = std::min(len, size_t{64} - buffered_);
        std::memcpy(buffer_.data() + buffered_, p, take);
        buffered_ += take;
        p += take;
        len -= take;
        if (buffered_ < 64) return;
        compress_(state_.data(), buffer_.data(), 1);
        buffered_ = 0;
    }
    // Whole blocks straight from the caller's memory, in one call.
    const size_t whole = len / 64;
    if (whole > 0) {
        compress_(state_.data(), p, whole);
        p += whole * 64;
        len -= whole * 64;
    }
    std::memcpy(buffer_.data(), p, len);
    buffered_ = len;
}

Digest Sha256::finish() {
    if (finished_) throw std::logic_error("Sha256::finish called twice");
    // Padding: 0x80, zeros to 56 mod 64, then the message length in bits (big-endian).
    const uint64_t bit_length = total_bytes_ * 8;
    uint8_t padding[72] = {0x80};
    const size_t zeros = (buffered_ < 56 ? 56 : 120) - buffered_ - 1;
    for (int i = 0; i < 8; ++i) padding[1 + zeros + i] = static_cast<uint8_t>(bit_length >> (56 - 8 * i));
    update(padding, 1 + zeros + 8);
    finished_ = true;
    Digest out{};
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(state_[i] >> (24 - 8 * j));
    return out;
}

Digest sha256(const void* data, size_t len) {
    Sha256 h;
    h.update(data, len);
    return h.finish();
}

std::string to_hex(const Digest& d) {
    static const char* digits = "0123456789abcdef";
    std::string s(64, '0');
    for (size_t i = 0; i < 32; ++i) {
        s[2 * i] = digits[d[i] >> 4];
        s[2 * i + 1] = digits[d[i] & 15];
    }
    return s;
}

}  // namespace emel::memory
