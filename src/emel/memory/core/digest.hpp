// Digest: a SHA-256 value, as a Plan carries its hashes (core/plan.hpp).
// Computed by determinism/ (sha256.hpp, plan_hash.cpp); defined here so the
// core's plan needs nothing from determinism/.
#pragma once

#include <array>
#include <cstdint>

namespace emel::memory {

using Digest = std::array<uint8_t, 32>;

}  // namespace emel::memory
