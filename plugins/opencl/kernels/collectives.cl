// The opencl plugin's kernels (OpenCL C 1.2): one reduction kernel per
// element type and reduce op, and copy kernels of three widths. Every
// collective is a short sequence of these (src/collectives.cpp).
//
// Build options (src/program_cache.cpp) say what the device offers:
//   BP_HAVE_FP64   1 with cl_khr_fp64 (or a double-precision FP config)
//   BP_HAVE_INT64  1 unless the device is an embedded profile without
//                  cles_khr_int64
// and the kernels of types the device lacks are left out; and
//   BP_RANKS       the comm's rank count, 1..8, or 0 for more (see below).
//
// Buffers are passed as up to BP_MAX_BUFFERS separate pointer arguments,
// each with an element offset (OpenCL C 1.2 has no arrays of buffers, and
// sub-buffers need aligned offsets). Work item e handles element e of
// every buffer: it reads all its inputs before writing any output, so an
// output may be one of the inputs (in place), element for element.
//
// There is no work item past the last element, so no kernel tests its
// index against a count: the host launches the elements in whole
// work-groups and the tail, if any, as a second launch at a global offset
// (src/collectives.cpp). On PoCL the test alone cost 10-30% of the
// bandwidth at 1-32 MiB (it keeps the work-group loop from vectorising
// cleanly).
//
// How many of the 8 are used is a switch that falls through, not a chain
// of ifs: PoCL's work-group vectoriser turns 8 guarded loads into scalar
// code (measured 0.2 GB/s against 17-30 GB/s for the switch). Inputs
// combine in the order in0, in7, in6, ..., in1; the ops are commutative,
// and the floating ones round the same for the exact values the tests use.

#define BP_MAX_BUFFERS 8

#if BP_HAVE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

// ---- element access: storage type S, arithmetic in A ----------------------

// bfloat16 is the upper half of an IEEE single: widening is a shift, and
// narrowing rounds to nearest even (NaN stays a quiet NaN). Every device can
// do this, so bf16 needs no extension.
float bp_bf16_to_float(ushort bits) { return as_float((uint)bits << 16); }
ushort bp_float_to_bf16(float value) {
  const uint bits = as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (ushort)((bits >> 16) | 0x40u);
  return (ushort)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Plain loads and stores.
#define BP_LOAD(p, i) ((p)[i])
#define BP_STORE(p, i, a) ((p)[i] = (a))
// Integers add and multiply as unsigned numbers of their width, which wrap
// (signed overflow is undefined in OpenCL C as in C); as_type reinterprets.
#define BP_LOAD_AS_U8(p, i) as_uchar((p)[i])
#define BP_STORE_AS_I8(p, i, a) ((p)[i] = as_char((uchar)(a)))
#define BP_LOAD_AS_U32(p, i) as_uint((p)[i])
#define BP_STORE_AS_I32(p, i, a) ((p)[i] = as_int((uint)(a)))
#define BP_LOAD_AS_U64(p, i) as_ulong((p)[i])
#define BP_STORE_AS_I64(p, i, a) ((p)[i] = as_long((ulong)(a)))
#define BP_STORE_U8(p, i, a) ((p)[i] = (uchar)(a))
// f16 through float: vload_half and vstore_half_rte are core OpenCL C 1.2.
#define BP_LOAD_F16(p, i) vload_half((size_t)(i), (p))
#define BP_STORE_F16(p, i, a) vstore_half_rte((a), (size_t)(i), (p))
#define BP_LOAD_BF16(p, i) bp_bf16_to_float((p)[i])
#define BP_STORE_BF16(p, i, a) ((p)[i] = bp_float_to_bf16(a))

// ---- reduce ops -------------------------------------------------------------

#define BP_SUM(a, b) ((a) + (b))
#define BP_PROD(a, b) ((a) * (b))
#define BP_MIN(a, b) min((a), (b))
#define BP_MAX(a, b) max((a), (b))
#define BP_FMIN(a, b) fmin((a), (b))
#define BP_FMAX(a, b) fmax((a), (b))
#define BP_KEEP(a, ranks) (a)
#define BP_MEAN(a, ranks) ((a) / (ranks))

// ---- the reduction kernel -------------------------------------------------

// out_k[o_k + e] = op over j < INPUTS of in_j[i_j + e], for k < OUTPUTS;
// `ranks` divides the result for avg.
#define BP_REDUCE_KERNEL(NAME, INPUTS, OUTPUTS, S, A, LOAD, STORE, COMBINE, FINISH)                 \
  kernel void NAME(global const S *in0, global const S *in1, global const S *in2,                   \
                   global const S *in3, global const S *in4, global const S *in5,                   \
                   global const S *in6, global const S *in7, ulong i0, ulong i1, ulong i2,          \
                   ulong i3, ulong i4, ulong i5, ulong i6, ulong i7, uint inputs, global S *out0,   \
                   global S *out1, global S *out2, global S *out3, global S *out4, global S *out5,  \
                   global S *out6, global S *out7, ulong o0, ulong o1, ulong o2, ulong o3,          \
                   ulong o4, ulong o5, ulong o6, ulong o7, uint outputs, uint ranks) {              \
    const ulong e = get_global_id(0);                                                               \
    A a = (A)(LOAD(in0, i0 + e));                                                                   \
    switch (INPUTS) {                                                                               \
      case 8: a = COMBINE(a, (A)(LOAD(in7, i7 + e)));                                               \
      case 7: a = COMBINE(a, (A)(LOAD(in6, i6 + e)));                                               \
      case 6: a = COMBINE(a, (A)(LOAD(in5, i5 + e)));                                               \
      case 5: a = COMBINE(a, (A)(LOAD(in4, i4 + e)));                                               \
      case 4: a = COMBINE(a, (A)(LOAD(in3, i3 + e)));                                               \
      case 3: a = COMBINE(a, (A)(LOAD(in2, i2 + e)));                                               \
      case 2: a = COMBINE(a, (A)(LOAD(in1, i1 + e)));                                               \
      default: break;                                                                               \
    }                                                                                               \
    a = FINISH(a, (A)ranks);                                                                        \
    switch (OUTPUTS) {                                                                              \
      case 8: STORE(out7, o7 + e, a);                                                               \
      case 7: STORE(out6, o6 + e, a);                                                               \
      case 6: STORE(out5, o5 + e, a);                                                               \
      case 5: STORE(out4, o4 + e, a);                                                               \
      case 4: STORE(out3, o3 + e, a);                                                               \
      case 3: STORE(out2, o2 + e, a);                                                               \
      case 2: STORE(out1, o1 + e, a);                                                               \
      default: STORE(out0, o0 + e, a);                                                              \
    }                                                                                               \
  }

// The kernels of one (type, op), named PREFIX_<type>_<op>. With BP_RANKS
// = n (1..8) the program is for comms of n ranks, and the arities are
// constants, so the switches fold away: reduce_all_* (n inputs, n outputs:
// all_reduce) and reduce_one_* (n inputs, 1 output: reduce,
// reduce_scatter). Unspecialised, PoCL runs the same kernel 3-4x slower
// (45 against 11-15 GB/s for 2 inputs and 2 outputs). With BP_RANKS = 0
// (comms of more ranks) there is one kernel, reduce_*, whose arities are
// its `inputs` and `outputs` arguments.
#if BP_RANKS > 0
#define BP_REDUCE_KERNELS(T, OP, S, A, LOAD, STORE, COMBINE, FINISH)                                   \
  BP_REDUCE_KERNEL(reduce_all_##T##_##OP, BP_RANKS, BP_RANKS, S, A, LOAD, STORE, COMBINE, FINISH)     \
  BP_REDUCE_KERNEL(reduce_one_##T##_##OP, BP_RANKS, 1, S, A, LOAD, STORE, COMBINE, FINISH)
#else
#define BP_REDUCE_KERNELS(T, OP, S, A, LOAD, STORE, COMBINE, FINISH) \
  BP_REDUCE_KERNEL(reduce_##T##_##OP, inputs, outputs, S, A, LOAD, STORE, COMBINE, FINISH)
#endif

// Floating types: sum, prod, min, max and avg, in A.
#define BP_FLOAT_KERNELS(T, S, A, LOAD, STORE)                        \
  BP_REDUCE_KERNELS(T, sum, S, A, LOAD, STORE, BP_SUM, BP_KEEP)       \
  BP_REDUCE_KERNELS(T, prod, S, A, LOAD, STORE, BP_PROD, BP_KEEP)     \
  BP_REDUCE_KERNELS(T, min, S, A, LOAD, STORE, BP_FMIN, BP_KEEP)      \
  BP_REDUCE_KERNELS(T, max, S, A, LOAD, STORE, BP_FMAX, BP_KEEP)      \
  BP_REDUCE_KERNELS(T, avg, S, A, LOAD, STORE, BP_SUM, BP_MEAN)

// Integer types: sum and prod wrap in the unsigned type U; min and max
// compare in S itself.
#define BP_INT_KERNELS(T, S, U, LOAD_U, STORE_U)                               \
  BP_REDUCE_KERNELS(T, sum, S, U, LOAD_U, STORE_U, BP_SUM, BP_KEEP)            \
  BP_REDUCE_KERNELS(T, prod, S, U, LOAD_U, STORE_U, BP_PROD, BP_KEEP)          \
  BP_REDUCE_KERNELS(T, min, S, S, BP_LOAD, BP_STORE, BP_MIN, BP_KEEP)          \
  BP_REDUCE_KERNELS(T, max, S, S, BP_LOAD, BP_STORE, BP_MAX, BP_KEEP)

BP_FLOAT_KERNELS(f16, half, float, BP_LOAD_F16, BP_STORE_F16)
BP_FLOAT_KERNELS(bf16, ushort, float, BP_LOAD_BF16, BP_STORE_BF16)
BP_FLOAT_KERNELS(f32, float, float, BP_LOAD, BP_STORE)
#if BP_HAVE_FP64
BP_FLOAT_KERNELS(f64, double, double, BP_LOAD, BP_STORE)
#endif
BP_INT_KERNELS(i8, char, uchar, BP_LOAD_AS_U8, BP_STORE_AS_I8)
BP_INT_KERNELS(u8, uchar, uchar, BP_LOAD, BP_STORE_U8)
BP_INT_KERNELS(i32, int, uint, BP_LOAD_AS_U32, BP_STORE_AS_I32)
BP_INT_KERNELS(u32, uint, uint, BP_LOAD, BP_STORE)
#if BP_HAVE_INT64
BP_INT_KERNELS(i64, long, ulong, BP_LOAD_AS_U64, BP_STORE_AS_I64)
BP_INT_KERNELS(u64, ulong, ulong, BP_LOAD, BP_STORE)
#endif

// ---- the copy kernel --------------------------------------------------------

// copy_<width>: out_k[o_k + e] = in_k[i_k + e] for k < pairs, in units of
// 1, 4 or 16 bytes (the host picks the widest unit that divides every
// offset and the length). The host never lets one pair's output overlap
// another pair's input, so the pairs' order does not matter.
#define BP_COPY_KERNEL(NAME, T)                                                                     \
  kernel void NAME(global const T *in0, global const T *in1, global const T *in2,                   \
                   global const T *in3, global const T *in4, global const T *in5,                   \
                   global const T *in6, global const T *in7, ulong i0, ulong i1, ulong i2,          \
                   ulong i3, ulong i4, ulong i5, ulong i6, ulong i7, global T *out0,                \
                   global T *out1, global T *out2, global T *out3, global T *out4, global T *out5,  \
                   global T *out6, global T *out7, ulong o0, ulong o1, ulong o2, ulong o3,          \
                   ulong o4, ulong o5, ulong o6, ulong o7, uint pairs) {                            \
    const ulong e = get_global_id(0);                                                               \
    switch (pairs) {                                                                                \
      case 8: out7[o7 + e] = in7[i7 + e];                                                           \
      case 7: out6[o6 + e] = in6[i6 + e];                                                           \
      case 6: out5[o5 + e] = in5[i5 + e];                                                           \
      case 5: out4[o4 + e] = in4[i4 + e];                                                           \
      case 4: out3[o3 + e] = in3[i3 + e];                                                           \
      case 3: out2[o2 + e] = in2[i2 + e];                                                           \
      case 2: out1[o1 + e] = in1[i1 + e];                                                           \
      default: out0[o0 + e] = in0[i0 + e];                                                          \
    }                                                                                               \
  }

BP_COPY_KERNEL(copy_u8, uchar)
BP_COPY_KERNEL(copy_u32, uint)
BP_COPY_KERNEL(copy_u128, uint4)
