// What every collective must compute, from the table in types.h alone and
// independently of any plugin (no plugin's conversion or reduction code is
// shared): element encodings, each collective's buffer layout, generated
// inputs whose results are exact, the results themselves, and an
// element-wise comparison. The CLI, the conformance suite and the tests all
// check against this; staged_case.hpp puts a case on real devices.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backplane/types.h"

namespace backplane::reference {

// ---- element encodings ----------------------------------------------------
//
// A binary floating-point format with `mantissa_bits` stored fraction bits
// and `exponent_bits` of exponent, encoded by arithmetic on doubles: scaling
// by powers of two (exact) and std::nearbyint (ties to even in the default
// rounding mode). Written from the format's definition rather than by bit
// manipulation, so it shares no trick with the plugins it checks.
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

  // Rounds to nearest even; past the largest finite value, infinity; NaN
  // becomes the quiet NaN.
  static std::uint16_t encode(double x) {
    if (std::isnan(x)) return static_cast<std::uint16_t>(infinity(false) | (1u << (mantissa_bits - 1)));
    const bool negative = std::signbit(x);
    const std::uint16_t sign = negative ? sign_bit : 0;
    const double magnitude = std::fabs(x);
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

using Half = SmallFloat<10, 5>;     // IEEE binary16
using BFloat16 = SmallFloat<7, 8>;  // the upper half of an IEEE binary32

// ---- element types --------------------------------------------------------
//
// Traits of one bp_dtype: `storage` is the C++ type of its bytes. Floating
// types carry their values as double (every value of every format here is
// exact in double).

template <class T>
struct IntElement {
  using storage = T;
  static constexpr bool is_float = false;
};

// Codec: Half or BFloat16 for the 16-bit formats, void where the storage
// type is the value type.
template <class Storage, class Codec>
struct FloatElement {
  using storage = Storage;
  static constexpr bool is_float = true;
  static double to_double(Storage s) {
    if constexpr (std::is_void_v<Codec>)
      return static_cast<double>(s);
    else
      return Codec::decode(s);
  }
  static Storage from_double(double d) {
    if constexpr (std::is_void_v<Codec>)
      return static_cast<Storage>(d);
    else
      return Codec::encode(d);
  }
};

using F16 = FloatElement<std::uint16_t, Half>;
using BF16 = FloatElement<std::uint16_t, BFloat16>;
using F32 = FloatElement<float, void>;
using F64 = FloatElement<double, void>;
using I8 = IntElement<std::int8_t>;
using U8 = IntElement<std::uint8_t>;
using I32 = IntElement<std::int32_t>;
using U32 = IntElement<std::uint32_t>;
using I64 = IntElement<std::int64_t>;
using U64 = IntElement<std::uint64_t>;

// Calls fn(Traits{}) with the traits of `dtype`. A dtype out of range is
// the caller's bug (std::invalid_argument), never a value to guess at.
template <class Fn>
decltype(auto) with_dtype(bp_dtype dtype, Fn &&fn) {
  switch (dtype) {
    case BP_DTYPE_MAX_ENUM:  // not a value; refused after the switch
      break;
    case BP_F16: return fn(F16{});
    case BP_BF16: return fn(BF16{});
    case BP_F32: return fn(F32{});
    case BP_F64: return fn(F64{});
    case BP_I8: return fn(I8{});
    case BP_U8: return fn(U8{});
    case BP_I32: return fn(I32{});
    case BP_U32: return fn(U32{});
    case BP_I64: return fn(I64{});
    case BP_U64: return fn(U64{});
  }
  throw std::invalid_argument("element type out of range: " + std::to_string(static_cast<long long>(dtype)));
}

bool is_float_dtype(bp_dtype dtype);
bool is_signed_dtype(bp_dtype dtype);  // the floats and i8, i32, i64
size_t element_size(bp_dtype dtype);   // bytes of one element

// Element `index` of an array of E in bytes. memcpy keeps the access free of
// alignment and aliasing questions and compiles to a plain load or store.
template <class E>
typename E::storage load(const std::byte *data, size_t index) {
  typename E::storage value;
  std::memcpy(&value, data + index * sizeof value, sizeof value);
  return value;
}

template <class E>
void store(std::byte *data, size_t index, typename E::storage value) {
  std::memcpy(data + index * sizeof value, &value, sizeof value);
}

// ---- layout -----------------------------------------------------------------

// One collective call, as the C API takes it.
struct CollectiveCase {
  bp_collective collective = BP_ALL_REDUCE;
  bp_dtype dtype = BP_F32;
  bp_reduce_op op = BP_SUM;  // read only for reducing collectives
  size_t count = 0;          // the call's count argument
  size_t ranks = 1;          // group size
  uint32_t root = 0;         // read only for rooted collectives
  bool in_place = false;     // see RankLayout for which ranks that concerns
};

bool is_reducing(bp_collective collective);  // all_reduce, reduce, reduce_scatter
bool is_rooted(bp_collective collective);    // reduce, broadcast, gather, scatter
// 1, or the group size for the collectives whose largest buffer holds one
// block per rank (all_gather, reduce_scatter, gather, scatter, all_to_all).
size_t blocks_per_buffer(bp_collective collective, size_t ranks);

// Where one rank's data lives, in elements of the case's dtype (NCCL's
// counts, the table in types.h).
//  Out of place: send[rank] and recv[rank] are separate buffers, or NULL
//  where types.h allows it (the side of a rooted collective a non-root rank
//  does not use); the contribution starts at element 0 of send and the
//  result at element 0 of recv.
//  In place: a rank that uses both sides passes one buffer as send[rank]
//  and recv[rank]; its contribution and result then sit at the offsets
//  below (block `rank` for all_gather/gather inputs and reduce_scatter/
//  scatter results). A rank that uses one side only (non-root ranks of
//  rooted collectives) is laid out as out of place.
// A call whose ranks differ in placement takes each rank's layout from a
// case with that rank's in_place.
struct RankLayout {
  bool in_place = false;     // one buffer passed as both send[rank] and recv[rank]
  bool has_send = false;     // send[rank] is a buffer, not NULL
  bool has_recv = false;     // recv[rank] is a buffer, not NULL
  size_t send = 0;           // elements of send[rank] (in place: of the one buffer)
  size_t recv = 0;           // elements of recv[rank] (in place: of the one buffer)
  size_t input_offset = 0;   // where the contribution starts in send[rank]
  size_t result_offset = 0;  // where the result starts in recv[rank]
  size_t contribution = 0;   // elements the rank contributes (0: none)
  size_t result = 0;         // elements of result to check on this rank (0: none)
};
RankLayout rank_layout(const CollectiveCase &c, size_t rank);

// ---- inputs -----------------------------------------------------------------

// The hash every generated input comes from (splitmix64's finalizer): well
// mixed, and different for every (seed, rank, index).
uint64_t input_hash(uint64_t seed, uint64_t rank, uint64_t index);

// Rank `rank`'s whole contribution, `rank_layout(c, rank).contribution`
// elements in the dtype's bytes (empty when it has none); deterministic in
// (case, rank, element, seed). The values are chosen so that the result is
// exact whatever order a plugin combines the ranks in and whatever precision
// at least the dtype's own it computes in, for any group size, and so that
// a mistake shows:
//  - Data movement (broadcast, gathers, scatter, all_to_all): any bit
//    pattern, NaN payloads, subnormals and -0 included, since nothing may
//    interpret them; the results compare bit for bit.
//  - Integer sum, prod, min, max: the type's full range; sums and products
//    wrap as unsigned arithmetic of the type's width does (the same in any
//    order), so a signedness or width mistake shows. A product takes 2,
//    -1 and 1 mostly, and an arbitrary value one time in eight.
//  - Float sum: whole numbers whose sum over the group stays exactly
//    representable (|sum| <= 2048 for f16, 256 for bf16, 2^24 for f32,
//    2^53 for f64).
//  - Avg, of any type: whole numbers of at most 1000 that add up to a
//    multiple of the group size, so the average is a whole number whatever
//    the plugin's rounding and division (integer sums never wrap).
//  - Float prod: ±1, with at most one rank per element contributing ±2
//    or ±0.5, so every product is ±1, ±2 or ±0.5.
//  - Float min and max: fractions using the format's whole precision (a
//    multiple of 1/4 below 64 for the 16-bit types, 23 bits for f32, 52
//    bits for f64), so a value passed through a narrower type shows.
std::vector<std::byte> make_contribution(const CollectiveCase &c, size_t rank, uint64_t seed = 0);

// ---- results ----------------------------------------------------------------

// What rank `rank` must hold after the collective, given every rank's
// contribution (indexed by rank; an entry may be empty where the rank
// contributes nothing): `rank_layout(c, rank).result` elements, in bytes.
// Floats reduce in double and round once at the end; integers wrap as
// unsigned arithmetic of their width does; avg is the sum divided by the
// group size, truncated toward zero for integers. With make_contribution()'s
// values every one of these is exact.
std::vector<std::byte> reference_result(const CollectiveCase &c,
                                        const std::vector<std::vector<std::byte>> &contributions, size_t rank);

// ---- comparison -------------------------------------------------------------

// How two elements must agree. value: floats by value (+0 equals -0, NaN
// equals NaN, as reductions may legitimately differ there), integers
// exactly. bits: every bit.
enum class Equality { value, bits };
// What a result of `collective` must match its reference by: bits for the
// collectives that only move data, value for the reducing ones.
Equality result_equality(bp_collective collective);

// Element-wise comparison of two arrays of `dtype`.
struct Comparison {
  size_t wrong = 0;           // elements that differ, or that only one of the two has
  size_t first_index = 0;     // the first of them
  std::string got, expected;  // its two values, printed (empty where one side has none)
};
Comparison compare(bp_dtype dtype, std::span<const std::byte> got, std::span<const std::byte> expected,
                   Equality equality);

// One element printed: integers as the number ("-3", "255"), floats as the
// number and their bits ("0.5 (0x3800)"), which tell -0, NaN payloads and
// one unit in the last place apart.
std::string format_value(bp_dtype dtype, const std::byte *element);

}  // namespace backplane::reference
