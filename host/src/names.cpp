// Names of codes, element types, reduce ops and collectives: the strings
// that appear in messages, JSON and the CLI, frozen like the numbers.
#include "names.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "backplane/backplane.h"

namespace backplane {
namespace {

constexpr std::array<const char *, BP_CODE_COUNT> code_names = {
    "OK",
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
    "INTERNAL",
};

constexpr std::array<const char *, BP_DTYPE_COUNT> dtype_names = {
    "f16", "bf16", "f32", "f64", "i8", "u8", "i32", "u32", "i64", "u64"};
constexpr std::array<size_t, BP_DTYPE_COUNT> dtype_sizes = {2, 2, 4, 8, 1, 1, 4, 4, 8, 8};
constexpr std::array<const char *, BP_REDUCE_OP_COUNT> reduce_op_names = {"sum", "prod", "min",
                                                                          "max", "avg"};
constexpr std::array<const char *, BP_COLLECTIVE_COUNT> collective_names = {
    "all_reduce", "reduce",     "broadcast", "all_gather", "reduce_scatter",
    "gather",     "scatter",    "all_to_all", "barrier"};

template <size_t N>
const char *name_or_unknown(const std::array<const char *, N> &names, uint32_t value) {
  return value < N ? names[value] : "?";
}

template <size_t N>
bool find_name(const std::array<const char *, N> &names, const char *name, uint32_t *index) {
  if (!name) return false;
  for (uint32_t i = 0; i < N; ++i) {
    if (std::strcmp(names[i], name) == 0) {
      *index = i;
      return true;
    }
  }
  return false;
}

template <size_t N>
std::string mask_list(const std::array<const char *, N> &names, uint32_t mask) {
  std::string list;
  for (uint32_t i = 0; i < N; ++i) {
    if (!(mask & (1u << i))) continue;
    if (!list.empty()) list += ", ";
    list += names[i];
  }
  return list.empty() ? "none" : list;
}

}  // namespace

const char *code_name(bp_code code) {
  return static_cast<uint32_t>(code) < BP_CODE_COUNT ? code_names[code] : "?";
}
const char *dtype_name(uint32_t dtype) { return name_or_unknown(dtype_names, dtype); }
const char *reduce_op_name(uint32_t op) { return name_or_unknown(reduce_op_names, op); }
const char *collective_name(uint32_t collective) {
  return name_or_unknown(collective_names, collective);
}
size_t dtype_size(uint32_t dtype) { return dtype < BP_DTYPE_COUNT ? dtype_sizes[dtype] : 0; }
std::optional<DeviceNameParts> parse_device_name(std::string_view name, std::string *why, std::string *respelled) {
  if (respelled) respelled->clear();
  const size_t colon = name.rfind(':');
  if (colon == std::string_view::npos) {
    *why = "it is not of the form kind:index";
    return std::nullopt;
  }
  const std::string_view kind = name.substr(0, colon), index = name.substr(colon + 1);
  auto is_kind_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; };
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  const bool kind_ok = !kind.empty() && std::all_of(kind.begin(), kind.end(), is_kind_char);
  const bool digits = !index.empty() && std::all_of(index.begin(), index.end(), is_digit);
  // The same name written right: lower case, leading zeros dropped.
  auto respell = [&] {
    if (!respelled || kind.empty() || !digits) return;
    std::string lowered(kind);
    for (char &c : lowered) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (!std::all_of(lowered.begin(), lowered.end(), is_kind_char)) return;
    const size_t first_digit = std::min(index.find_first_not_of('0'), index.size() - 1);
    if (index.size() - first_digit > 10) return;
    *respelled = lowered + ":" + std::string(index.substr(first_digit));
  };
  if (!kind_ok) {
    *why = kind.empty() ? "the kind before ':' is empty" : "the kind '" + std::string(kind) + "' is not of [a-z0-9_]";
    respell();
    return std::nullopt;
  }
  if (!digits) {
    *why = "the index '" + std::string(index) + "' is not a decimal number";
    return std::nullopt;
  }
  if (index.size() > 1 && index.front() == '0') {
    *why = "the index '" + std::string(index) + "' has a leading zero";
    respell();
    return std::nullopt;
  }
  uint64_t value = 0;
  for (char c : index) {
    value = value * 10 + static_cast<uint64_t>(c - '0');
    if (value > UINT32_MAX) {
      *why = "the index " + std::string(index) + " is above " + std::to_string(UINT32_MAX);
      return std::nullopt;
    }
  }
  return DeviceNameParts{kind, static_cast<uint32_t>(value)};
}

std::string dtype_list(uint32_t mask) { return mask_list(dtype_names, mask); }
std::string reduce_op_list(uint32_t mask) { return mask_list(reduce_op_names, mask); }

}  // namespace backplane

extern "C" {

const char *bp_code_name(bp_code code) { return backplane::code_name(code); }
const char *bp_dtype_name(bp_dtype dtype) { return backplane::dtype_name(dtype); }
const char *bp_reduce_op_name(bp_reduce_op op) { return backplane::reduce_op_name(op); }
const char *bp_collective_name(bp_collective collective) {
  return backplane::collective_name(collective);
}
size_t bp_dtype_size(bp_dtype dtype) { return backplane::dtype_size(dtype); }

bool bp_dtype_from_name(const char *name, bp_dtype *out) {
  uint32_t index = 0;
  if (!out || !backplane::find_name(backplane::dtype_names, name, &index)) return false;
  *out = static_cast<bp_dtype>(index);
  return true;
}
bool bp_reduce_op_from_name(const char *name, bp_reduce_op *out) {
  uint32_t index = 0;
  if (!out || !backplane::find_name(backplane::reduce_op_names, name, &index)) return false;
  *out = static_cast<bp_reduce_op>(index);
  return true;
}
bool bp_collective_from_name(const char *name, bp_collective *out) {
  uint32_t index = 0;
  if (!out || !backplane::find_name(backplane::collective_names, name, &index)) return false;
  *out = static_cast<bp_collective>(index);
  return true;
}

}  // extern "C"
