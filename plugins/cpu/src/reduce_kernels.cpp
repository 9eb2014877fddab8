// The SIMD reduction kernel, compiled once per instruction set (Highway's
// foreach_target re-includes this file) and chosen at run time for the CPU
// it runs on: AVX-512, AVX2, or a portable fallback that runs the scalar
// kernel. Runtime dispatch rather than -march=native, so one build runs on
// any x86-64 (and under valgrind, which cannot execute AVX-512: its CPUID
// does not report it, so AVX2 is picked there).
#include <cstdint>

#include "backplane/types.h"
#include "reduce_kernels.hpp"

// SSSE3/SSE4 add little between the fallback and AVX2 on the machines this
// runs on; leaving them out halves the compile time of this file. A build
// may override the set (-DHWY_DISABLED_TARGETS=...) to test another target.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif

// Highway 1.0.3 compiles AVX3_DL only when asked to, yet makes it the
// static target when the compiler flags imply it (-march=native on Ice Lake,
// Zen 4 and later), and then refuses to build. Ask for it exactly then.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && \
    defined(__AVXVNNI__) && defined(__VAES__) && defined(__VPCLMULQDQ__) && defined(__AVX512VBMI__) &&   \
    defined(__AVX512VBMI2__) && defined(__AVX512VPOPCNTDQ__) && defined(__AVX512BITALG__) &&             \
    !defined(HWY_WANT_AVX3_DL)
#define HWY_WANT_AVX3_DL
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reduce_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>

HWY_BEFORE_NAMESPACE();
namespace backplane::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Targets with real vector registers; the emulated ones (EMU128, SCALAR)
// run the scalar kernel, which the compiler vectorises as far as it can.
constexpr bool kVectorTarget = HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR;
// F16C: f16 <-> f32 in one instruction, rounding to nearest even (Highway's
// AVX2 and AVX-512 targets require it). Elsewhere f16 takes the scalar path.
#if HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C) && HWY_ARCH_X86
constexpr bool kNativeF16 = true;
#else
constexpr bool kNativeF16 = false;
#endif
// 64-bit lane multiplication exists on AVX-512 only.
constexpr bool kMul64 = HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86;

// How a vector of an element type's accumulator is loaded from, and stored
// back to, the buffer's storage. `D` is the accumulator's descriptor; a
// vector of it covers Lanes(D()) elements.
template <class E>
struct VectorIo;

template <class T>
struct VectorIo<Native<T>> {
  using D = hn::ScalableTag<T>;
  using V = hn::Vec<D>;
  static V load(D d, const std::byte *p) { return hn::LoadU(d, reinterpret_cast<const T *>(p)); }
  static V narrow(D, V v) { return v; }
  static void store(D d, V v, std::byte *p) { hn::StoreU(v, d, reinterpret_cast<T *>(p)); }
  static void stream(D d, V v, std::byte *p) { hn::Stream(v, d, reinterpret_cast<T *>(p)); }
};

// f16: widened and narrowed by F16C, in registers.
template <>
struct VectorIo<Float16> {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  using DH = hn::Rebind<hwy::float16_t, D>;
  static V load(D d, const std::byte *p) { return hn::PromoteTo(d, hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t *>(p))); }
  static hn::Vec<DH> narrow(D, V v) { return hn::DemoteTo(DH(), v); }
  static void store(D, hn::Vec<DH> v, std::byte *p) { hn::StoreU(v, DH(), reinterpret_cast<hwy::float16_t *>(p)); }
  static void stream(D, hn::Vec<DH> v, std::byte *p) { hn::Stream(v, DH(), reinterpret_cast<hwy::float16_t *>(p)); }
};

// bf16: the top half of an f32. Highway 1.0's DemoteTo truncates, so the
// rounding to nearest even (and NaN kept NaN) is done here, as in
// float_to_bfloat.
template <>
struct VectorIo<BFloat16> {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  using DU = hn::RebindToUnsigned<D>;
  using DI = hn::RebindToSigned<D>;
  using DH = hn::Rebind<std::uint16_t, D>;
  static V load(D d, const std::byte *p) {
    const auto halves = hn::LoadU(DH(), reinterpret_cast<const std::uint16_t *>(p));
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(DU(), halves)));
  }
  static hn::Vec<DH> narrow(D, V v) {
    const DU du;
    const auto bits = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lsb)));
    const auto quiet_nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x0040u));
    const auto is_nan = hn::Lt(hn::Set(du, 0x7f800000u), hn::And(bits, hn::Set(du, 0x7fffffffu)));
    const auto top = hn::IfThenElse(is_nan, quiet_nan, rounded);  // each lane now < 2^16
    return hn::DemoteTo(DH(), hn::BitCast(DI(), top));
  }
  static void store(D, hn::Vec<DH> v, std::byte *p) { hn::StoreU(v, DH(), reinterpret_cast<std::uint16_t *>(p)); }
  static void stream(D, hn::Vec<DH> v, std::byte *p) { hn::Stream(v, DH(), reinterpret_cast<std::uint16_t *>(p)); }
};

// The operators of reduce_kernels.hpp, lane-wise with identical results.
template <class Op, class D, class V>
HWY_INLINE V combine(D, V acc, V x) {
  using T = hn::TFromD<D>;
  if constexpr (std::is_same_v<Op, SumOp> || std::is_same_v<Op, AvgOp>) {
    return hn::Add(acc, x);  // integer lanes wrap
  } else if constexpr (std::is_same_v<Op, ProdOp>) {
    return hn::Mul(acc, x);  // integer lanes keep the low bits: wraps
  } else if constexpr (std::is_same_v<Op, MinOp>) {
    if constexpr (std::is_floating_point_v<T>) {
      return hn::IfThenElse(hn::Or(hn::Lt(x, acc), hn::Ne(x, x)), x, acc);
    } else {
      return hn::Min(acc, x);
    }
  } else {
    static_assert(std::is_same_v<Op, MaxOp>);
    if constexpr (std::is_floating_point_v<T>) {
      return hn::IfThenElse(hn::Or(hn::Lt(acc, x), hn::Ne(x, x)), x, acc);
    } else {
      return hn::Max(acc, x);
    }
  }
}

// Whether (E, Op) has a SIMD path on this target.
template <class E, class Op>
constexpr bool vectorised() {
  using A = typename E::acc;
  if (!kVectorTarget) return false;
  if constexpr (std::is_same_v<E, Float16>) {
    if (!kNativeF16) return false;
  }
  if constexpr (std::is_same_v<Op, ProdOp> && std::is_integral_v<A>) {
    if (sizeof(A) == 1) return false;  // no 8-bit lane multiply
    if (sizeof(A) == 8 && !kMul64) return false;
  }
  return true;
}

// Vectors per step of the main loop. Two independent accumulators give the
// loads and the f16/bf16 conversions some overlap; measured here with
// streaming stores to memory, 4 per step ran 10-18% slower than 1 or 2
// (more lines of every output in flight at once), and 2 was best in place.
constexpr std::size_t kUnroll = 2;
// Streaming stores want the output aligned to the widest store.
constexpr std::size_t kStreamAlignment = 64;

template <class E, class Op>
void reduce(const ReduceIo &io, std::size_t begin, std::size_t end) {
  if constexpr (!vectorised<E, Op>()) {
    reduce_scalar<E, Op>(io, begin, end);
  } else {
    using VI = VectorIo<E>;
    using D = typename VI::D;
    using V = hn::Vec<D>;
    using A = hn::TFromD<D>;
    constexpr std::size_t s = sizeof(typename E::storage);
    const D d;
    const std::size_t lanes = hn::Lanes(d);
    const std::size_t n_in = io.input_count;
    const std::size_t n_out = io.output_count;
    const std::byte *const *inputs = io.inputs;
    std::byte *const *outputs = io.outputs;
    const std::size_t in_off = io.input_offset;
    const std::size_t out_off = io.output_offset;
    const std::size_t skip = io.skip_output;

    // Streaming needs every output at the same alignment, reachable by
    // whole elements; then a scalar head aligns them all at once.
    bool stream = io.streaming && begin < end;
    std::size_t i = begin;
    if (stream) {
      const auto address = [&](std::size_t o) {
        return reinterpret_cast<std::uintptr_t>(outputs[o] + out_off + i * s);
      };
      const std::uintptr_t misalignment = address(0) % kStreamAlignment;
      for (std::size_t o = 1; o < n_out && stream; ++o) stream = address(o) % kStreamAlignment == misalignment;
      const std::size_t head_bytes = (kStreamAlignment - misalignment) % kStreamAlignment;
      if (head_bytes % s != 0) stream = false;
      if (stream && head_bytes != 0) {
        const std::size_t head_end = std::min(end, i + head_bytes / s);
        reduce_each<E, Op>(io, i, head_end);
        i = head_end;
      }
    }

    const auto finish = [&](V v) {
      if constexpr (Op::has_finalize) {
        return hn::Div(v, hn::Set(d, static_cast<A>(n_in)));
      } else {
        return v;
      }
    };

    // The vector loops, with the store kind fixed at compile time so the
    // innermost loop (over outputs) carries no extra branch.
    const auto vector_loops = [&](auto streaming) {
      constexpr bool kStream = decltype(streaming)::value;
      const auto put = [&](const auto &v, std::byte *q) {
        if constexpr (kStream) {
          VI::stream(d, v, q);
        } else {
          VI::store(d, v, q);
        }
      };
      const std::size_t stride = lanes * s;
      for (; i + kUnroll * lanes <= end; i += kUnroll * lanes) {
        const std::size_t at = i * s;
        const std::byte *p = inputs[0] + in_off + at;
        V a0 = VI::load(d, p);
        V a1 = VI::load(d, p + stride);
        for (std::size_t r = 1; r < n_in; ++r) {
          p = inputs[r] + in_off + at;
          a0 = combine<Op>(d, a0, VI::load(d, p));
          a1 = combine<Op>(d, a1, VI::load(d, p + stride));
        }
        const auto s0 = VI::narrow(d, finish(a0));
        const auto s1 = VI::narrow(d, finish(a1));
        for (std::size_t o = 0; o < n_out; ++o) {
          if (o == skip) continue;
          std::byte *q = outputs[o] + out_off + at;
          put(s0, q);
          put(s1, q + stride);
        }
      }
      for (; i + lanes <= end; i += lanes) {
        const std::size_t at = i * s;
        V a = VI::load(d, inputs[0] + in_off + at);
        for (std::size_t r = 1; r < n_in; ++r) a = combine<Op>(d, a, VI::load(d, inputs[r] + in_off + at));
        const auto narrowed = VI::narrow(d, finish(a));
        for (std::size_t o = 0; o < n_out; ++o) {
          if (o != skip) put(narrowed, outputs[o] + out_off + at);
        }
      }
    };
    if (stream) {
      vector_loops(std::true_type{});
    } else {
      vector_loops(std::false_type{});
    }
    if (i < end) reduce_each<E, Op>(io, i, end);
    // Streaming stores are weakly ordered: drain them before the caller
    // publishes completion (an atomic's release does not order them).
    if (stream) hwy::FlushStream();
  }
}

template <class E>
ReduceKernel kernel_for_op(std::uint32_t op) {
  switch (op) {
    case BP_SUM:
      return &reduce<E, SumOp>;
    case BP_PROD:
      return &reduce<E, ProdOp>;
    case BP_MIN:
      return &reduce<E, MinOp>;
    case BP_MAX:
      return &reduce<E, MaxOp>;
    case BP_AVG:
      if constexpr (std::is_floating_point_v<typename E::acc>) {
        return &reduce<E, AvgOp>;
      } else {
        return nullptr;
      }
    default:
      return nullptr;
  }
}

ReduceKernel SelectReduceKernel(std::uint32_t dtype, std::uint32_t op) {
  switch (dtype) {
    case BP_F16:
      return kernel_for_op<Float16>(op);
    case BP_BF16:
      return kernel_for_op<BFloat16>(op);
    case BP_F32:
      return kernel_for_op<Native<float>>(op);
    case BP_F64:
      return kernel_for_op<Native<double>>(op);
    case BP_I8:
      return kernel_for_op<Native<std::int8_t>>(op);
    case BP_U8:
      return kernel_for_op<Native<std::uint8_t>>(op);
    case BP_I32:
      return kernel_for_op<Native<std::int32_t>>(op);
    case BP_U32:
      return kernel_for_op<Native<std::uint32_t>>(op);
    case BP_I64:
      return kernel_for_op<Native<std::int64_t>>(op);
    case BP_U64:
      return kernel_for_op<Native<std::uint64_t>>(op);
    default:
      return nullptr;
  }
}

const char *TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace backplane::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace backplane::cpu {

HWY_EXPORT(SelectReduceKernel);
HWY_EXPORT(TargetName);

namespace {

// Every (dtype, op) kernel of the chosen target, looked up once: a call then
// costs an array index rather than a dispatch and a switch.
struct KernelTable {
  ReduceKernel kernels[BP_DTYPE_COUNT][BP_REDUCE_OP_COUNT];
  KernelTable() noexcept {
    for (std::uint32_t t = 0; t < BP_DTYPE_COUNT; ++t) {
      for (std::uint32_t op = 0; op < BP_REDUCE_OP_COUNT; ++op) {
        kernels[t][op] = HWY_DYNAMIC_DISPATCH(SelectReduceKernel)(t, op);
      }
    }
  }
};

const KernelTable &kernel_table() noexcept {
  static const KernelTable table;
  return table;
}

}  // namespace

ReduceKernel reduce_kernel(std::uint32_t dtype, std::uint32_t op) noexcept {
  if (dtype >= BP_DTYPE_COUNT || op >= BP_REDUCE_OP_COUNT) return nullptr;
  return kernel_table().kernels[dtype][op];
}

ReduceKernel copy_kernel() noexcept { return reduce_kernel(BP_U8, BP_SUM); }

const char *kernel_target_name() noexcept {
  (void)kernel_table();  // built here, at load, rather than in the first collective
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}

}  // namespace backplane::cpu
#endif  // HWY_ONCE
