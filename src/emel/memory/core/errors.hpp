// The one error type of the core: a failure code plus the ids it is about.
// Every check on user input throws PlanError; nothing aborts or asserts.
#pragma once

#include <exception>
#include <string>

namespace emel::memory {

enum class ErrorCode {
    InvalidIrShapes,
    LivenessCycle,
    AllocationOverflow,
    ArenaTooSmall,
    AlignmentViolation,
    AddressCollision,
};

// The spec's spelling of a code, e.g. "LIVENESS_CYCLE".
const char* error_code_name(ErrorCode code) noexcept;

struct PlanError : std::exception {
    ErrorCode code;
    std::string message;
    std::string tensor;  // offending tensor id, "" when none
    std::string node;    // offending node id, "" when none
    std::string arena;   // offending arena name, "" when none
    std::string what_text;

    PlanError(ErrorCode code_, std::string message_, std::string tensor_ = {},
              std::string node_ = {}, std::string arena_ = {});
    const char* what() const noexcept override { return what_text.c_str(); }
};

}  // namespace emel::memory
