// The one reduction kernel of the cpu plugin, shared by all_reduce, reduce and
// reduce_scatter: reduce ranks' inputs element-wise and write every output.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "element_types.hpp"

namespace backplane::cpu {

// Integer arithmetic wraps (two's complement). It is done in the unsigned
// type, widened to at least `unsigned` so that u8/i8 promotion to int cannot
// overflow either; converting back is modular in C++20.
template <class T>
using wide_unsigned_t = decltype(std::make_unsigned_t<T>{} + 0u);

template <class T>
inline T wrapping_add(T a, T b) noexcept {
  using U = std::make_unsigned_t<T>;
  using W = wide_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) + static_cast<W>(static_cast<U>(b))));
}

template <class T>
inline T wrapping_mul(T a, T b) noexcept {
  using U = std::make_unsigned_t<T>;
  using W = wide_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
}

// Reduce operators. combine(acc, x) folds the next rank's value x into acc;
// ranks are folded in rank order, so float results are deterministic.
struct SumOp {
  static constexpr bool has_finalize = false;
  template <class A>
  static A combine(A acc, A x) noexcept {
    if constexpr (std::is_integral_v<A>) {
      return wrapping_add(acc, x);
    } else {
      return acc + x;
    }
  }
};

struct ProdOp {
  static constexpr bool has_finalize = false;
  template <class A>
  static A combine(A acc, A x) noexcept {
    if constexpr (std::is_integral_v<A>) {
      return wrapping_mul(acc, x);
    } else {
      return acc * x;
    }
  }
};

// Float min/max propagate NaN: a NaN on any rank gives NaN, whichever rank
// it is on. Otherwise `x < acc` decides, so +0 and -0 compare equal and the
// lower rank's zero is kept.
struct MinOp {
  static constexpr bool has_finalize = false;
  template <class A>
  static A combine(A acc, A x) noexcept {
    if constexpr (std::is_floating_point_v<A>) {
      return (x < acc || x != x) ? x : acc;
    } else {
      return x < acc ? x : acc;
    }
  }
};

struct MaxOp {
  static constexpr bool has_finalize = false;
  template <class A>
  static A combine(A acc, A x) noexcept {
    if constexpr (std::is_floating_point_v<A>) {
      return (acc < x || x != x) ? x : acc;
    } else {
      return acc < x ? x : acc;
    }
  }
};

// avg = sum / n, divided once at the end (in f32 for f16/bf16). Floats only:
// the capability table declares no integer avg.
struct AvgOp {
  static constexpr bool has_finalize = true;
  template <class A>
  static A combine(A acc, A x) noexcept {
    return acc + x;
  }
  template <class A>
  static A finalize(A sum, std::size_t n) noexcept {
    return sum / static_cast<A>(n);
  }
};

// Where one reduction reads and writes. Every input is read once and every
// output written once; outputs may alias inputs (in place), because each
// chunk is fully reduced into a private accumulator before any output of
// that chunk is written.
struct ReduceIo {
  const std::byte *const *inputs;  // input_count >= 1 pointers
  std::size_t input_count;
  std::byte *const *outputs;  // output_count pointers
  std::size_t output_count;
};

// Elements per chunk: the accumulator (at most 16 KiB of f64/u64) stays in
// L1 while the inputs stream through it.
inline constexpr std::size_t kChunkElements = 2048;

// Reduces elements [begin, end) (element indices, the same in every input
// and output). A range rather than the whole count so that a later thread
// pool can hand each worker its own slice.
template <class E, class Op>
void reduce_range(const ReduceIo &io, std::size_t begin, std::size_t end) noexcept {
  using S = typename E::storage;
  using A = typename E::acc;
  constexpr std::size_t s = sizeof(S);
  constexpr bool convert = !std::is_same_v<S, A>;

  alignas(64) A acc[kChunkElements];
  // Converted results of half types, so conversion happens once per element
  // however many outputs there are.
  [[maybe_unused]] alignas(64) std::conditional_t<convert, S[kChunkElements], char> staged;

  for (std::size_t first = begin; first < end; first += kChunkElements) {
    const std::size_t m = std::min(kChunkElements, end - first);
    const std::size_t offset = first * s;

    const std::byte *in = io.inputs[0] + offset;
    for (std::size_t i = 0; i < m; ++i) acc[i] = E::load(in + i * s);
    for (std::size_t r = 1; r < io.input_count; ++r) {
      in = io.inputs[r] + offset;
      for (std::size_t i = 0; i < m; ++i) acc[i] = Op::combine(acc[i], E::load(in + i * s));
    }
    if constexpr (Op::has_finalize) {
      for (std::size_t i = 0; i < m; ++i) acc[i] = Op::finalize(acc[i], io.input_count);
    }

    const void *result = acc;
    if constexpr (convert) {
      for (std::size_t i = 0; i < m; ++i) staged[i] = E::to_storage(acc[i]);
      result = staged;
    }
    for (std::size_t o = 0; o < io.output_count; ++o) std::memcpy(io.outputs[o] + offset, result, m * s);
  }
}

// Runs the kernel for (dtype, op) over [begin, end). Returns false, touching
// nothing, when there is no such kernel: a value outside the enums, or avg
// on an integer type.
bool reduce_elements(std::uint32_t dtype, std::uint32_t op, const ReduceIo &io, std::size_t begin,
                     std::size_t end) noexcept;

}  // namespace backplane::cpu
