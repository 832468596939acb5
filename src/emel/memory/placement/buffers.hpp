// The offset strategies' stage input: an arena's tensors as Buffers
// (buffers.cpp), used by assign_offsets (offsets.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/placement/placement.hpp"

namespace emel::memory {

// An arena's buffers for the offset strategies and how tensors map to them.
struct ArenaBuffers {
    Buffers buffers;
    std::vector<uint32_t> group_of;      // per tensor (global index): its buffer, or kNone
    std::vector<uint32_t> first_member;  // per buffer
};

ArenaBuffers build_buffers(const Graph& g, Plan& p,                     // buffers.cpp
                           const std::vector<uint32_t>& members,
                           const std::vector<std::vector<uint32_t>>& partners);

}  // namespace emel::memory
