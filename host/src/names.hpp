// Stable names of the ABI's enums, and the facts about them dispatch needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backplane/types.h"

namespace backplane {

const char *code_name(bp_code code);
const char *dtype_name(uint32_t dtype);            // "?" when out of range
const char *reduce_op_name(uint32_t op);           // "?" when out of range
const char *collective_name(uint32_t collective);  // "?" when out of range
size_t dtype_size(uint32_t dtype);                 // 0 when out of range

constexpr uint32_t all_dtypes_mask = (1u << BP_DTYPE_COUNT) - 1;
constexpr uint32_t all_reduce_ops_mask = (1u << BP_REDUCE_OP_COUNT) - 1;
constexpr uint32_t all_capability_flags = BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE;

// all_reduce, reduce and reduce_scatter combine values with an op.
constexpr bool collective_reduces(uint32_t collective) {
  return collective == BP_ALL_REDUCE || collective == BP_REDUCE || collective == BP_REDUCE_SCATTER;
}
// reduce, broadcast, gather and scatter have a root.
constexpr bool collective_has_root(uint32_t collective) {
  return collective == BP_REDUCE || collective == BP_BROADCAST || collective == BP_GATHER ||
         collective == BP_SCATTER;
}

// A device's name, "kind:index" (bp_device_info.name), split: the one
// spelling bp_host_find_device and fleet groups both take. The kind is of
// [a-z0-9_] as plugins declare kinds; the index is decimal, below 2^32 and
// without leading zeros, so that each device has exactly one name.
struct DeviceNameParts {
  std::string_view kind;
  uint32_t index = 0;
};
// nullopt when `name` is not spelled so: *why says what is wrong, and
// *respelled (when given) is the name written right where there is one
// ("cpu:1" for "cpu:01", "cpu:0" for "CPU:0"), else "".
std::optional<DeviceNameParts> parse_device_name(std::string_view name, std::string *why,
                                                 std::string *respelled = nullptr);

// "f32, i32" for a dtype mask; "sum, max" for an op mask.
std::string dtype_list(uint32_t mask);
std::string reduce_op_list(uint32_t mask);

}  // namespace backplane
