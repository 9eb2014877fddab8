// Reference semantics for collectives, written independently of any plugin:
// element encodings (f16/bf16 by arithmetic on doubles, not by bit tricks),
// deterministic per-rank inputs, and element-wise reductions.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backplane/types.h"

namespace backplane::reference {

// ---- f16 / bf16 ---------------------------------------------------------
//
// A binary floating-point format with `mantissa_bits` stored fraction bits
// and exponent bias `bias`, encoded by scaling with powers of two (exact in
// double) and rounding with std::nearbyint (ties to even in the default
// rounding mode).
template <int mantissa_bits, int exponent_bits>
struct SmallFloat {
  static constexpr int bias = (1 << (exponent_bits - 1)) - 1;
  static constexpr int min_normal_exponent = 1 - bias;
  static constexpr int max_exponent = bias;
  static constexpr std::uint32_t exponent_all_ones = (1u << exponent_bits) - 1;
  static constexpr std::uint16_t sign_bit = static_cast<std::uint16_t>(1u << (mantissa_bits + exponent_bits));

  static std::uint16_t infinity(bool negative) {
    return static_cast<std::uint16_t>((negative ? sign_bit : 0u) | (exponent_all_ones << mantissa_bits));
  }

  static std::uint16_t encode(double x) {
    if (std::isnan(x)) return static_cast<std::uint16_t>(infinity(false) | (1u << (mantissa_bits - 1)));
    const bool negative = std::signbit(x);
    const std::uint16_t sign = negative ? sign_bit : 0;
    double magnitude = std::fabs(x);
    if (magnitude == 0) return sign;
    if (std::isinf(magnitude)) return infinity(negative);
    int exponent = std::ilogb(magnitude);  // magnitude in [2^e, 2^(e+1))
    if (exponent < min_normal_exponent) {
      // Subnormal: a multiple of the smallest subnormal 2^(min_normal - m).
      const double q = std::nearbyint(std::ldexp(magnitude, mantissa_bits - min_normal_exponent));
      return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(q));  // q == 2^m is the smallest normal
    }
    double q = std::nearbyint(std::ldexp(magnitude, mantissa_bits - exponent));  // in [2^m, 2^(m+1)]
    if (q == std::ldexp(1.0, mantissa_bits + 1)) {
      q /= 2;
      ++exponent;
    }
    if (exponent > max_exponent) return infinity(negative);
    const auto fraction = static_cast<std::uint32_t>(q) - (1u << mantissa_bits);
    return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exponent + bias) << mantissa_bits) |
                                      fraction);
  }

  static double decode(std::uint16_t bits) {
    const bool negative = bits & sign_bit;
    const std::uint32_t exponent = (bits >> mantissa_bits) & exponent_all_ones;
    const std::uint32_t fraction = bits & ((1u << mantissa_bits) - 1);
    double magnitude;
    if (exponent == exponent_all_ones) {
      magnitude = fraction ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<double>(fraction), min_normal_exponent - mantissa_bits);
    } else {
      magnitude = std::ldexp(static_cast<double>(fraction + (1u << mantissa_bits)),
                             static_cast<int>(exponent) - bias - mantissa_bits);
    }
    return negative ? -magnitude : magnitude;
  }
};

using Half = SmallFloat<10, 5>;
using BHalf = SmallFloat<7, 8>;

// ---- element traits -----------------------------------------------------

// Integer element types: values are the type itself.
template <class T>
struct IntElement {
  using storage = T;
  static constexpr bool is_float = false;
};

// Floating element types: values travel as double (every value used here
// is exact in double), `accumulate` is the type the sum is divided in for
// avg (f32 for f16/bf16, as specified).
template <class Storage, class Codec, class Accumulate>
struct FloatElement {
  using storage = Storage;
  using accumulate = Accumulate;
  static constexpr bool is_float = true;
  static double to_double(storage s) {
    if constexpr (std::is_same_v<Codec, void>) {
      return static_cast<double>(s);
    } else {
      return Codec::decode(s);
    }
  }
  static storage from_double(double d) {
    if constexpr (std::is_same_v<Codec, void>) {
      return static_cast<storage>(d);
    } else {
      return Codec::encode(d);
    }
  }
};

using F16 = FloatElement<std::uint16_t, Half, float>;
using BF16 = FloatElement<std::uint16_t, BHalf, float>;
using F32 = FloatElement<float, void, float>;
using F64 = FloatElement<double, void, double>;

// Calls fn(Traits{}) with the traits of `dtype`.
template <class Fn>
decltype(auto) with_dtype(bp_dtype dtype, Fn &&fn) {
  switch (dtype) {
    case BP_F16: return fn(F16{});
    case BP_BF16: return fn(BF16{});
    case BP_F32: return fn(F32{});
    case BP_F64: return fn(F64{});
    case BP_I8: return fn(IntElement<std::int8_t>{});
    case BP_U8: return fn(IntElement<std::uint8_t>{});
    case BP_I32: return fn(IntElement<std::int32_t>{});
    case BP_U32: return fn(IntElement<std::uint32_t>{});
    case BP_I64: return fn(IntElement<std::int64_t>{});
    case BP_U64: return fn(IntElement<std::uint64_t>{});
    default: break;
  }
  return fn(F32{});
}

inline bool is_float_dtype(bp_dtype dtype) {
  return dtype == BP_F16 || dtype == BP_BF16 || dtype == BP_F32 || dtype == BP_F64;
}

// ---- deterministic inputs ------------------------------------------------

// splitmix64: a different, well-mixed value for every (rank, element, salt).
inline std::uint64_t mix(std::uint64_t rank, std::uint64_t element, std::uint64_t salt) {
  std::uint64_t z = rank * 0x9e3779b97f4a7c15ull + element * 0xbf58476d1ce4e5b9ull + salt * 0x94d049bb133111ebull +
                    0x2545f4914f6cdd1dull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Signed integer in [-half_range, half_range) from a hash.
inline std::int64_t centered(std::uint64_t h, std::int64_t half_range) {
  return static_cast<std::int64_t>(h % static_cast<std::uint64_t>(2 * half_range)) - half_range;
}

// The input of `rank` at `element` for a reduction with `op`, chosen so the
// exact result is representable: sums of floats are integers small enough
// for the format (f16: |x| < 128, 8 ranks sum below 2048; bf16: |x| <= 32,
// sums within 256; f32: 2^20; f64: 2^40), products are of 1, 2, -1 and 0.5,
// min/max use multiples of a power of two that the format holds exactly.
// Integers use their full range (sums and products wrap), so a signedness
// or width mistake shows.
template <class E>
typename E::storage reduce_input(bp_reduce_op op, std::size_t rank, std::size_t element) {
  using S = typename E::storage;
  const std::uint64_t h = mix(rank, element, 1 + static_cast<std::uint64_t>(op));
  if constexpr (E::is_float) {
    double v = 0;
    switch (op) {
      case BP_SUM:
      case BP_AVG: {
        std::int64_t half_range = 1;
        if constexpr (std::is_same_v<E, F16>) half_range = 128;
        if constexpr (std::is_same_v<E, BF16>) half_range = 32;
        if constexpr (std::is_same_v<E, F32>) half_range = std::int64_t{1} << 20;
        if constexpr (std::is_same_v<E, F64>) half_range = std::int64_t{1} << 40;
        v = static_cast<double>(centered(h, half_range));
        break;
      }
      case BP_PROD: {
        const unsigned pick = static_cast<unsigned>(h % 16);
        v = pick == 0 ? 2.0 : pick == 1 ? -1.0 : pick == 2 ? 0.5 : 1.0;
        break;
      }
      case BP_MIN:
      case BP_MAX: {
        if constexpr (std::is_same_v<E, F16> || std::is_same_v<E, BF16>) {
          v = static_cast<double>(centered(h, 256)) * 0.25;  // 8 significant bits at most
        } else if constexpr (std::is_same_v<E, F32>) {
          v = std::ldexp(static_cast<double>(centered(h, std::int64_t{1} << 23)), -8);
        } else {
          v = std::ldexp(static_cast<double>(centered(h, std::int64_t{1} << 52)), -20);
        }
        break;
      }
      default: break;
    }
    return E::from_double(v);
  } else {
    if (op == BP_PROD) {
      const unsigned pick = static_cast<unsigned>(h % 8);
      if (pick == 0) return static_cast<S>(mix(rank, element, 99));  // anything: products wrap
      if (pick == 1) return static_cast<S>(2);
      if (pick == 2) return static_cast<S>(-1);  // all ones for unsigned types
      return static_cast<S>(1);
    }
    return static_cast<S>(h);  // full range, wraps on purpose
  }
}

// Raw bytes for data-movement collectives: any bit pattern goes (NaN
// payloads included), since nothing may interpret them. Fills `bytes`
// bytes of rank `rank`'s data, eight bytes per hash.
inline void fill_movement_bytes(std::size_t rank, std::uint8_t *out, std::size_t bytes) {
  for (std::size_t at = 0; at < bytes; at += 8) {
    const std::uint64_t word = mix(rank, at / 8, 1000);
    std::memcpy(out + at, &word, bytes - at < 8 ? bytes - at : 8);
  }
}

// ---- element-wise reduction -------------------------------------------

template <class T>
T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<std::uint64_t>(static_cast<U>(a)) +
                                       static_cast<std::uint64_t>(static_cast<U>(b))));
}

template <class T>
T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<std::uint64_t>(static_cast<U>(a)) *
                                       static_cast<std::uint64_t>(static_cast<U>(b))));
}

// Reduces values[0..n) (rank order) with `op`. Floats: the inputs are
// chosen so sums and products are exact in double, hence in any order; avg
// is that exact sum divided by n in the accumulation type, rounded once.
template <class E>
typename E::storage reduce_values(bp_reduce_op op, const typename E::storage *values, std::size_t n) {
  using S = typename E::storage;
  if constexpr (E::is_float) {
    double acc = E::to_double(values[0]);
    for (std::size_t r = 1; r < n; ++r) {
      const double x = E::to_double(values[r]);
      switch (op) {
        case BP_SUM:
        case BP_AVG: acc += x; break;
        case BP_PROD: acc *= x; break;
        case BP_MIN: acc = x < acc ? x : acc; break;
        case BP_MAX: acc = x > acc ? x : acc; break;
        default: break;
      }
    }
    if (op == BP_AVG) {
      using A = typename E::accumulate;
      const A quotient = static_cast<A>(acc) / static_cast<A>(n);  // acc is exact in A
      return E::from_double(static_cast<double>(quotient));
    }
    return E::from_double(acc);
  } else {
    S acc = values[0];
    for (std::size_t r = 1; r < n; ++r) {
      switch (op) {
        case BP_SUM: acc = wrap_add(acc, values[r]); break;
        case BP_PROD: acc = wrap_mul(acc, values[r]); break;
        case BP_MIN: acc = values[r] < acc ? values[r] : acc; break;
        case BP_MAX: acc = values[r] > acc ? values[r] : acc; break;
        default: break;  // avg is not defined for integers
      }
    }
    return acc;
  }
}

// A value as text, for failure messages: the number and the raw bits.
template <class E>
std::string describe(typename E::storage s) {
  std::string text;
  if constexpr (E::is_float) {
    text = std::to_string(E::to_double(s));
  } else if constexpr (std::is_signed_v<typename E::storage>) {
    text = std::to_string(static_cast<long long>(s));
  } else {
    text = std::to_string(static_cast<unsigned long long>(s));
  }
  std::uint64_t bits = 0;
  std::memcpy(&bits, &s, sizeof s);
  char hex[32];
  std::snprintf(hex, sizeof hex, " (0x%llx)", static_cast<unsigned long long>(bits));
  return text + hex;
}

}  // namespace backplane::reference
