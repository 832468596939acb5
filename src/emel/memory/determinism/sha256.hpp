// SHA-256 (FIPS 180-4), written here so the core needs no crypto library.
// Used for plan hashes, checkpoint digests and arena state hashes.
//
// Two compression functions: a portable one, and on x86 one using the SHA
// extensions (SHA-NI), chosen once at run time from what the CPU supports.
// Both produce the same digests; the tests run each against FIPS vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "emel/memory/core/digest.hpp"

namespace emel::memory {

enum class Sha256Implementation : uint8_t {
    Auto,      // SHA-NI when the CPU has it, otherwise Portable
    Portable,  // plain C++, any platform
    ShaNi,     // x86 SHA extensions; std::invalid_argument if unavailable
};

// Whether this build and CPU can run the SHA-NI path.
bool sha256_shani_available();
// The implementation Auto resolves to on this machine: Portable or ShaNi.
Sha256Implementation sha256_auto_implementation();
// "auto", "portable", "shani" (and back; std::invalid_argument on others).
std::string_view sha256_implementation_name(Sha256Implementation impl);
Sha256Implementation parse_sha256_implementation(std::string_view name);

// Incremental hasher: update() any number of times, then finish() once.
class Sha256 {
public:
    Sha256() : Sha256(Sha256Implementation::Auto) {}
    explicit Sha256(Sha256Implementation impl);
    void update(const void* data, size_t len);
    void update(const std::vector<uint8_t>& bytes) { update(bytes.data(), bytes.size()); }
    Digest finish();

    // Compresses `num_blocks` consecutive 64-byte blocks into state.
    using CompressFn = void (*)(uint32_t state[8], const uint8_t* blocks, size_t num_blocks);

private:
    CompressFn compress_;
    std::array<uint32_t, 8> state_;
    std::array<uint8_t, 64> buffer_;
    size_t buffered_ = 0;
    uint64_t total_bytes_ = 0;
    bool finished_ = false;
};

Digest sha256(const void* data, size_t len);
inline Digest sha256(const std::vector<uint8_t>& bytes) { return sha256(bytes.data(), bytes.size()); }

// Lower-case hexadecimal, 64 characters.
std::string to_hex(const Digest& d);

}  // namespace emel::memory
