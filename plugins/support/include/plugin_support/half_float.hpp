// The 16-bit float formats plugins convert to compute on: IEEE binary16
// (f16) and bfloat16, widened to binary32 exactly and rounded back to
// nearest, ties to even. Overflow gives Inf, tiny values subnormals or
// zero, NaN stays NaN (made quiet). Shared by the cpu plugin's kernels and
// the mpi plugin's user-defined MPI ops, so both round alike.
#pragma once

#include <cstdint>
#include <cstring>

namespace backplane::plugin_support {

inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE binary16 -> binary32. Exact: every half is a float.
inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // Inf, or NaN with its payload kept
    return bits_float(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);  // +-0
    // Subnormal: shift the leading 1 into the implicit position.
    exponent = 113;  // 127 - 15 + 1
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
    return bits_float(sign | (exponent << 23) | (mantissa << 13));
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// binary32 -> binary16, rounding to nearest, ties to even; overflow gives
// Inf, tiny values give subnormals or zero, NaN stays NaN (made quiet).
inline std::uint16_t float_to_half(float f) noexcept {
  std::uint32_t x = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {
    if (x > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
      return static_cast<std::uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    }
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  // 65520 is halfway between the largest half (65504) and 65536; the tie
  // goes to the even neighbour, which is Inf.
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (x < 0x38800000u) {  // below 2^-14: a half subnormal or zero
    // 2^-25 and below round to zero (exactly 2^-25 is a tie going to 0).
    if (x <= 0x33000000u) return sign;
    const std::uint32_t exponent = x >> 23;  // 102..112 here
    const std::uint32_t mantissa = (x & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;  // value / 2^-24 = mantissa >> shift
    std::uint32_t q = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into the smallest normal: still right
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits. A
  // carry out of the mantissa correctly bumps the exponent.
  std::uint32_t h = (x - 0x38000000u) >> 13;
  const std::uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

// bfloat16 is the top half of a binary32.
inline float bfloat_to_float(std::uint16_t b) noexcept {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t float_to_bfloat(float f) noexcept {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: rounding could turn it into Inf
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  }
  // Round to nearest even; a carry into the exponent (up to Inf) is correct.
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

}  // namespace backplane::plugin_support
