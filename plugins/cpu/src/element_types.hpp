// Element types of the cpu plugin: how each bp_dtype is stored, loaded into the
// type it is reduced in, and stored back (f16/bf16 <-> f32 conversions included).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backplane/types.h"
#include "plugin_support/half_float.hpp"

namespace backplane::cpu {

// Buffers may wrap caller memory of any alignment, so every element access
// goes through memcpy: it is what the language guarantees for unaligned
// access, and compilers lower it to a plain (vectorisable) load or store.
template <class T>
inline T load_unaligned(const std::byte *p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
inline void store_unaligned(std::byte *p, T v) noexcept {
  std::memcpy(p, &v, sizeof(T));
}

using plugin_support::bfloat_to_float;
using plugin_support::bits_float;
using plugin_support::float_bits;
using plugin_support::float_to_bfloat;
using plugin_support::float_to_half;
using plugin_support::half_to_float;

// Element traits: `storage` is what sits in the buffer, `acc` what the
// reduction runs in. Half types accumulate in f32 and round once at the end.
struct Float16 {
  using storage = std::uint16_t;
  using acc = float;
  static acc load(const std::byte *p) noexcept { return half_to_float(load_unaligned<storage>(p)); }
  static storage to_storage(acc v) noexcept { return float_to_half(v); }
};

struct BFloat16 {
  using storage = std::uint16_t;
  using acc = float;
  static acc load(const std::byte *p) noexcept { return bfloat_to_float(load_unaligned<storage>(p)); }
  static storage to_storage(acc v) noexcept { return float_to_bfloat(v); }
};

template <class T>
struct Native {
  using storage = T;
  using acc = T;
  static acc load(const std::byte *p) noexcept { return load_unaligned<T>(p); }
  static storage to_storage(acc v) noexcept { return v; }
};

inline constexpr bool is_float_dtype(std::uint32_t dtype) noexcept {
  return dtype == BP_F16 || dtype == BP_BF16 || dtype == BP_F32 || dtype == BP_F64;
}

// Bytes per element; 0 for a value outside bp_dtype.
inline constexpr std::size_t dtype_size(std::uint32_t dtype) noexcept {
  switch (dtype) {
    case BP_F16:
    case BP_BF16:
      return 2;
    case BP_F32:
    case BP_I32:
    case BP_U32:
      return 4;
    case BP_F64:
    case BP_I64:
    case BP_U64:
      return 8;
    case BP_I8:
    case BP_U8:
      return 1;
    default:
      return 0;
  }
}

}  // namespace backplane::cpu
