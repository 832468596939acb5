// The options' own checks (validate_options), run before the graph is
// validated. The stages run in order in pipeline/pipeline.cpp.
#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

void validate_options(const PlanOptions& opt) {
    if (!is_power_of_two(opt.default_alignment))
        throw PlanError(ErrorCode::AlignmentViolation,
                        "default arena alignment must be a power of two, got " +
                            std::to_string(opt.default_alignment));
    for (const auto& [name, c] : opt.arenas)
        if (c.has_alignment && !is_power_of_two(c.alignment_bytes))
            throw PlanError(ErrorCode::AlignmentViolation,
                            "arena '" + name + "': alignment_bytes must be a power of two, got " +
                                std::to_string(c.alignment_bytes),
                            {}, {}, name);
    if (!opt.replay_token.empty() && opt.replay_token.size() != 32)
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "replay_token must be exactly 32 bytes, got " +
                            std::to_string(opt.replay_token.size()));
    if (opt.world_size < 1)
        throw PlanError(ErrorCode::InvalidIrShapes, "world_size must be at least 1, got 0");
    if (opt.rank >= opt.world_size)
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "rank must be in [0, world_size) = [0, " + std::to_string(opt.world_size) +
                            "), got " + std::to_string(opt.rank));
}

}  // namespace emel::memory
