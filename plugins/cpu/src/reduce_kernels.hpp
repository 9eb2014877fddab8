// The one reduction kernel of the cpu plugin, shared by all_reduce, reduce and
// reduce_scatter, and (as a u8 "sum" of one input) by every collective that
// only moves data: read each input element once, combine in registers, write
// every output once. This header holds the element-wise semantics (the scalar
// operators, also used for tails and by the non-SIMD fallback) and the
// interface; reduce_kernels.cpp holds the SIMD kernel, compiled for several
// instruction sets and picked at run time (Highway dynamic dispatch).
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
// ranks are folded in rank order, so float results are deterministic. The
// SIMD kernel implements exactly these semantics lane by lane.
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

inline constexpr std::size_t kNoOutputSkipped = ~std::size_t{0};

// Where one kernel call reads and writes. Element i of input r is at
// inputs[r] + input_offset + i * size, of output o at outputs[o] +
// output_offset + i * size. Every input element is read once and every
// output element written once. An output may alias an input at the same
// element (in place): each element is read from every input before it is
// written anywhere. Outputs never overlap each other.
struct ReduceIo {
  const std::byte *const *inputs;  // input_count >= 1 pointers
  std::size_t input_count;
  std::size_t input_offset;        // bytes added to every input
  std::byte *const *outputs;       // output_count pointers
  std::size_t output_count;
  std::size_t output_offset;       // bytes added to every output
  std::size_t skip_output;         // an output index left unwritten, or kNoOutputSkipped
  // Write with non-temporal (streaming) stores where the outputs' alignment
  // allows: for data far larger than the caches, it spares the read of each
  // output line before it is overwritten and leaves the caches to the inputs.
  bool streaming;
};

// Reduces elements [begin, end) of `io`. A range, so the thread pool can
// hand each thread its own slice.
using ReduceKernel = void (*)(const ReduceIo &io, std::size_t begin, std::size_t end);

// The kernel for (dtype, op) on the best instruction set of this CPU, or
// NULL when there is none: a value outside the enums, or avg on an integer
// type. Cheap (a table lookup); call it once per collective.
ReduceKernel reduce_kernel(std::uint32_t dtype, std::uint32_t op) noexcept;

// The kernel that copies bytes: one input, any number of outputs
// (reduce_kernel(BP_U8, BP_SUM) with a single input).
ReduceKernel copy_kernel() noexcept;

// Name of the instruction set the kernels run on here ("AVX3", "AVX2",
// "EMU128", ...), for logs. The first call also builds the kernel table.
const char *kernel_target_name() noexcept;

// Scalar reduction, one element at a time: for the few elements at the ends
// of a range that the SIMD loop leaves (and tiny calls), where setting up a
// chunk would cost more than the work.
template <class E, class Op>
inline void reduce_each(const ReduceIo &io, std::size_t begin, std::size_t end) noexcept {
  using S = typename E::storage;
  using A = typename E::acc;
  constexpr std::size_t s = sizeof(S);
  for (std::size_t i = begin; i < end; ++i) {
    const std::size_t at = i * s;
    A acc = E::load(io.inputs[0] + io.input_offset + at);
    for (std::size_t r = 1; r < io.input_count; ++r) {
      acc = Op::combine(acc, E::load(io.inputs[r] + io.input_offset + at));
    }
    if constexpr (Op::has_finalize) acc = Op::finalize(acc, io.input_count);
    const S value = E::to_storage(acc);
    for (std::size_t o = 0; o < io.output_count; ++o) {
      if (o != io.skip_output) store_unaligned<S>(io.outputs[o] + io.output_offset + at, value);
    }
  }
}

// Elements per chunk of the scalar path: its accumulator (at most 16 KiB of
// f64/u64) stays in L1 while the inputs stream through it.
inline constexpr std::size_t kScalarChunkElements = 2048;

// Scalar reduction of elements [begin, end): the semantics reference, used
// for (type, op) pairs or instruction sets without a SIMD path. Chunked, so each input is
// read sequentially: every rank's chunk is folded, in rank order, into an
// accumulator on the stack, which is then written to every output.
template <class E, class Op>
inline void reduce_scalar(const ReduceIo &io, std::size_t begin, std::size_t end) noexcept {
  using S = typename E::storage;
  using A = typename E::acc;
  constexpr std::size_t s = sizeof(S);
  A acc[kScalarChunkElements];
  S staged[kScalarChunkElements];
  for (std::size_t first = begin; first < end; first += kScalarChunkElements) {
    const std::size_t m = std::min(kScalarChunkElements, end - first);
    const std::size_t at = first * s;
    const std::byte *in = io.inputs[0] + io.input_offset + at;
    for (std::size_t i = 0; i < m; ++i) acc[i] = E::load(in + i * s);
    for (std::size_t r = 1; r < io.input_count; ++r) {
      in = io.inputs[r] + io.input_offset + at;
      for (std::size_t i = 0; i < m; ++i) acc[i] = Op::combine(acc[i], E::load(in + i * s));
    }
    if constexpr (Op::has_finalize) {
      for (std::size_t i = 0; i < m; ++i) acc[i] = Op::finalize(acc[i], io.input_count);
    }
    for (std::size_t i = 0; i < m; ++i) staged[i] = E::to_storage(acc[i]);
    for (std::size_t o = 0; o < io.output_count; ++o) {
      if (o != io.skip_output) std::memcpy(io.outputs[o] + io.output_offset + at, staged, m * s);
    }
  }
}

}  // namespace backplane::cpu
