// The 16-bit float formats the mpi plugin reduces through user-defined MPI
// ops: IEEE binary16 (f16) and bfloat16, widened to binary32 to compute
// and rounded back to nearest, ties to even. NaN stays NaN (made quiet).
#pragma once

#include <cstdint>
#include <cstring>

namespace backplane::mpi {

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

// binary16 -> binary32: exact, every half is a float.
inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN with its payload
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa x 2^-24, exact in binary32.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return bits_float(sign | float_bits(magnitude));
}

// binary32 -> binary16: overflow gives Inf, tiny values subnormals or zero.
inline std::uint16_t float_to_half(float f) noexcept {
  const std::uint32_t x = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u)  // NaN: the top payload bits, and the quiet bit so that it cannot read as Inf
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  // From 65520 (halfway between 65504, the largest half, and 65536) up: the
  // tie goes to the even neighbour, Inf.
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // a normal half: rebias 127 -> 15, drop 13 bits; a carry bumps the exponent
    std::uint32_t h = (magnitude - 0x38000000u) >> 13;
    const std::uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  // Below 2^-14: subnormal or zero; 2^-25 itself is a tie going to 0.
  if (magnitude <= 0x33000000u) return sign;
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - (magnitude >> 23);  // 14..24: value / 2^-24 = significand >> shift
  std::uint32_t h = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u) != 0)) ++h;  // may carry into the smallest normal: still right
  return static_cast<std::uint16_t>(sign | h);
}

// bfloat16 is the top half of a binary32.
inline float bfloat_to_float(std::uint16_t b) noexcept { return bits_float(static_cast<std::uint32_t>(b) << 16); }

inline std::uint16_t float_to_bfloat(float f) noexcept {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);  // NaN, never Inf
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // a carry up to Inf is right
}

}  // namespace backplane::mpi
