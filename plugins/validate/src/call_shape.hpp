// What a hooked collective is, as validate compares and records it: the
// request's fields with the meaningless ones (the op of a collective that
// does not reduce, the root of one without a root, the element type and
// count of a barrier) set to kNone, so that two runs of one program agree
// on every field whatever the caller left in them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "backplane/plugin.h"

namespace backplane::validate {

inline constexpr std::uint32_t kNone = 0xFFFFFFFFu;

struct CallShape {
  std::uint32_t collective = kNone;
  std::uint32_t dtype = kNone;
  std::uint32_t op = kNone;
  std::uint32_t root = kNone;
  std::uint64_t count = 0;
  std::uint64_t rank_count = 0;

  bool operator==(const CallShape &) const = default;
};

CallShape shape_of(const bp_layer_call &call) noexcept;

bool collective_reduces(std::uint32_t collective) noexcept;
bool collective_has_root(std::uint32_t collective) noexcept;
bool dtype_is_float(std::uint32_t dtype) noexcept;
// Bytes of one element; 0 for a value out of range.
std::size_t dtype_size(std::uint32_t dtype) noexcept;

// Stable names, as the host spells them ("all_reduce", "f32", "sum"); NULL
// for a value out of range.
const char *collective_name(std::uint32_t collective) noexcept;
const char *dtype_name(std::uint32_t dtype) noexcept;
const char *reduce_op_name(std::uint32_t op) noexcept;
// The inverses over the names above; kNone when unknown.
std::uint32_t collective_from_name(std::string_view name) noexcept;
std::uint32_t dtype_from_name(std::string_view name) noexcept;
std::uint32_t reduce_op_from_name(std::string_view name) noexcept;

// "all_reduce(f32, sum) of 1024", "broadcast(f32, root 2) of 16", "barrier".
std::string describe(const CallShape &shape);

// The 64-bit fingerprint of a call: the shape's fields (in the order of the
// struct), the name's length and the name in little-endian 8-byte words,
// folded one word at a time (xor, multiply by FNV's prime), then SplitMix64's
// finaliser, so one changed bit moves about half of the result. The same in
// every process and on every machine.
std::uint64_t fingerprint(const CallShape &shape, std::string_view group_name) noexcept;

}  // namespace backplane::validate
