// The C API (include/emel/memory.h): a plan's hashes, replay token, rank and
// world size (docs/determinism.md). Helpers shared with the other areas, and
// guarded(), are in status.hpp.
#include "emel/memory/c_api/status.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/determinism/sha256.hpp"

using namespace emel::memory;
using namespace emel::memory::c_api;

extern "C" {

// ----------------------------------------------------------- determinism

namespace {

const Digest& hash_of(const emel_plan& c, int kind, const char* fn) {
    const PlanHashes& h = c.plan.hashes;
    switch (kind) {
        case EMEL_HASH_IR: return h.ir;
        case EMEL_HASH_EXECUTION_ORDER: return h.execution_order;
        case EMEL_HASH_ARENA_CONFIG: return h.arena_config;
        case EMEL_HASH_SHARD_SPEC: return h.shard_spec;
        case EMEL_HASH_PLAN: return h.plan;
        default: break;
    }
    bad_arg(fn, "unknown hash kind " + std::to_string(kind));
}

void write_hex(const Digest& d, char* buf, size_t size, const char* fn) {
    need(buf, fn, "buf");
    if (size < EMEL_HASH_HEX_SIZE)
        bad_arg(fn, "buf holds " + std::to_string(size) + " chars; a hash needs " +
                        std::to_string(EMEL_HASH_HEX_SIZE) + " (64 hex digits and a NUL)");
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < d.size(); ++i) {
        buf[2 * i] = digits[d[i] >> 4];
        buf[2 * i + 1] = digits[d[i] & 15];
    }
    buf[2 * d.size()] = '\0';
}

void write_raw(const Digest& d, uint8_t* out, const char* fn) {
    need(out, fn, "out");
    std::memcpy(out, d.data(), d.size());
}

}  // namespace

EMEL_API emel_status emel_plan_hash(const emel_plan* plan, emel_hash_kind kind, uint8_t* out) {
    static const char* fn = "emel_plan_hash";
    return guarded([&] { write_raw(hash_of(check_plan(plan, fn), enum_arg(kind), fn), out, fn); });
}

EMEL_API emel_status emel_plan_hash_hex(const emel_plan* plan, emel_hash_kind kind, char* buf,
                                        size_t size) {
    static const char* fn = "emel_plan_hash_hex";
    return guarded([&] { write_hex(hash_of(check_plan(plan, fn), enum_arg(kind), fn), buf, size, fn); });
}

EMEL_API emel_status emel_plan_replay_token(const emel_plan* plan, uint8_t* out) {
    static const char* fn = "emel_plan_replay_token";
    return guarded([&] { write_raw(check_plan(plan, fn).plan.replay_token, out, fn); });
}

EMEL_API emel_status emel_plan_replay_token_hex(const emel_plan* plan, char* buf, size_t size) {
    static const char* fn = "emel_plan_replay_token_hex";
    return guarded([&] { write_hex(check_plan(plan, fn).plan.replay_token, buf, size, fn); });
}

EMEL_API emel_status emel_plan_rank(const emel_plan* plan, uint64_t* out) {
    return guarded([&] {
        const emel_plan& c = check_plan(plan, "emel_plan_rank");
        need(out, "emel_plan_rank", "out");
        *out = c.plan.rank;
    });
}

EMEL_API emel_status emel_plan_world_size(const emel_plan* plan, uint64_t* out) {
    return guarded([&] {
        const emel_plan& c = check_plan(plan, "emel_plan_world_size");
        need(out, "emel_plan_world_size", "out");
        *out = c.plan.world_size;
    });
}

}  // extern "C"
