#include "emel/memory/core/errors.hpp"

namespace emel::memory {

const char* error_code_name(ErrorCode code) noexcept {
    switch (code) {
        case ErrorCode::InvalidIrShapes: return "INVALID_IR_SHAPES";
        case ErrorCode::LivenessCycle: return "LIVENESS_CYCLE";
        case ErrorCode::AllocationOverflow: return "ALLOCATION_OVERFLOW";
        case ErrorCode::ArenaTooSmall: return "ARENA_TOO_SMALL";
        case ErrorCode::AlignmentViolation: return "ALIGNMENT_VIOLATION";
        case ErrorCode::AddressCollision: return "ADDRESS_COLLISION";
    }
    return "UNKNOWN";
}

PlanError::PlanError(ErrorCode code_, std::string message_, std::string tensor_,
                     std::string node_, std::string arena_)
    : code(code_),
      message(std::move(message_)),
      tensor(std::move(tensor_)),
      node(std::move(node_)),
      arena(std::move(arena_)) {
    what_text = std::string("[") + error_code_name(code) + "] " + message;
}

}  // namespace emel::memory
