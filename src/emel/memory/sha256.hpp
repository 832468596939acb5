// SHA-256 (FIPS 180-4), written here so the core needs no crypto library.
// Used for plan hashes, checkpoint digests and arena state hashes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace emel::memory {

using Digest = std::array<uint8_t, 32>;

// Incremental hasher: update() any number of times, then finish() once.
class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t len);
    void update(const std::vector<uint8_t>& bytes) { update(bytes.data(), bytes.size()); }
    Digest finish();

private:
    void compress(const uint8_t block[64]);
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
