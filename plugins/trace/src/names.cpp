// Name tables of the trace file (names.hpp).
#include "names.hpp"

#include <array>

#include "backplane/plugin.h"

namespace backplane::trace {
namespace {

constexpr std::array<const char *, BP_LAYER_OPERATION_COUNT> kOperationNames = {
    "buffer_create", "buffer_wrap_host", "buffer_write", "buffer_read", "buffer_destroy", "collective"};
constexpr std::array<const char *, BP_COLLECTIVE_COUNT> kCollectiveNames = {
    "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "scatter", "all_to_all", "barrier"};
constexpr std::array<const char *, BP_DTYPE_COUNT> kDtypeNames = {"f16", "bf16", "f32", "f64", "i8",
                                                                  "u8",  "i32",  "u32", "i64", "u64"};
constexpr std::array<const char *, BP_REDUCE_OP_COUNT> kReduceOpNames = {"sum", "prod", "min", "max", "avg"};
constexpr std::array<const char *, BP_CODE_COUNT> kCodeNames = {"OK",
                                                                "INVALID_ARGUMENT",
                                                                "UNSUPPORTED_DEVICE",
                                                                "UNSUPPORTED_COLLECTIVE",
                                                                "UNSUPPORTED_DTYPE",
                                                                "UNSUPPORTED_REDUCE_OP",
                                                                "MIXED_DEVICE_KINDS",
                                                                "NESTED_LAYER",
                                                                "PLUGIN_NOT_FOUND",
                                                                "PLUGIN_LOAD",
                                                                "PLUGIN_ABI",
                                                                "PLUGIN_INIT",
                                                                "PLUGIN_CONFLICT",
                                                                "CONFIG",
                                                                "DEVICE_FAILURE",
                                                                "OUT_OF_MEMORY",
                                                                "TIMEOUT",
                                                                "INTERNAL"};

template <std::size_t N>
const char *name_in(const std::array<const char *, N> &names, std::uint32_t value) {
  return value < N ? names[value] : "?";
}

}  // namespace

const char *operation_name(std::uint32_t operation) { return name_in(kOperationNames, operation); }
const char *collective_name(std::uint32_t collective) { return name_in(kCollectiveNames, collective); }
const char *dtype_name(std::uint32_t dtype) { return name_in(kDtypeNames, dtype); }
const char *reduce_op_name(std::uint32_t op) { return name_in(kReduceOpNames, op); }
const char *code_name(std::int32_t code) {
  return code >= 0 ? name_in(kCodeNames, static_cast<std::uint32_t>(code)) : "?";
}

bool collective_reduces(std::uint32_t collective) {
  return collective == BP_ALL_REDUCE || collective == BP_REDUCE || collective == BP_REDUCE_SCATTER;
}

bool collective_has_root(std::uint32_t collective) {
  return collective == BP_REDUCE || collective == BP_BROADCAST || collective == BP_GATHER || collective == BP_SCATTER;
}

}  // namespace backplane::trace
