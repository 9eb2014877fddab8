// One reduction, generated per element type and op by the build: defines
// DTYPE_<F16|BF16|F32|F64|I8|U8|I32|U32|I64|U64> and OP_<SUM|PROD|MIN|MAX|AVG>.
//
// output[k][i] = op over inputs j of input[j][i], for i < count: every input
// read once, every output written once, any number of each. The buffers are
// reached by address (GL_EXT_buffer_reference) through a table in memory
// (inputs, then outputs), so one pipeline serves any rank count and no
// descriptor set or storage-buffer range limits what a dispatch reaches.
// Outputs may be inputs (in place): an invocation reads all of element i
// before it writes it. Elements are visited grid-stride, so a dispatch of
// any size covers any count (the plugin keeps count below 2^31, so the index
// never wraps).
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

#if defined(DTYPE_F16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define STORED float16_t
#define ACC float
#define ELEMENT_BYTES 2
ACC load_element(STORED x) { return ACC(x); }
STORED store_element(ACC x) { return STORED(x); }
#elif defined(DTYPE_BF16)
// bfloat16 is the upper half of a binary32: moved as 16-bit integers,
// widened by a shift, narrowed rounding to nearest even (NaN stays NaN).
// Only loads and stores touch 16 bits (16-bit storage, no shaderInt16).
#extension GL_EXT_shader_16bit_storage : require
#define STORED uint16_t
#define WORK uint
#define ACC float
#define ELEMENT_BYTES 2
#define load_element(x) uintBitsToFloat(uint(x) << 16)
WORK store_element(ACC x) {
  const uint bits = floatBitsToUint(x);
  if (isnan(x)) return (bits >> 16) | 0x40u;
  return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}
#elif defined(DTYPE_F32)
#define STORED float
#define ACC float
#define ELEMENT_BYTES 4
ACC load_element(STORED x) { return x; }
STORED store_element(ACC x) { return x; }
#elif defined(DTYPE_F64)
#define STORED double
#define ACC double
#define ELEMENT_BYTES 8
ACC load_element(STORED x) { return x; }
STORED store_element(ACC x) { return x; }
#elif defined(DTYPE_I8) || defined(DTYPE_U8)
// Reduced in 32 bits and narrowed: the same as wrapping 8-bit arithmetic.
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#if defined(DTYPE_I8)
#define STORED int8_t
#define ACC int
#else
#define STORED uint8_t
#define ACC uint
#endif
#define ELEMENT_BYTES 1
ACC load_element(STORED x) { return ACC(x); }
STORED store_element(ACC x) { return STORED(x); }
#elif defined(DTYPE_I32) || defined(DTYPE_U32)
#if defined(DTYPE_I32)
#define STORED int
#else
#define STORED uint
#endif
#define ACC STORED
#define ELEMENT_BYTES 4
ACC load_element(STORED x) { return x; }
STORED store_element(ACC x) { return x; }
#elif defined(DTYPE_I64) || defined(DTYPE_U64)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#if defined(DTYPE_I64)
#define STORED int64_t
#else
#define STORED uint64_t
#endif
#define ACC STORED
#define ELEMENT_BYTES 8
ACC load_element(STORED x) { return x; }
STORED store_element(ACC x) { return x; }
#else
#error "the build defines one DTYPE_*"
#endif
#if !defined(WORK)
#define WORK STORED  // the type the result is held in before it is stored
#endif

#if defined(OP_SUM) || defined(OP_AVG)
#define COMBINE(a, b) ((a) + (b))
#elif defined(OP_PROD)
#define COMBINE(a, b) ((a) * (b))
#elif defined(OP_MIN)
#define COMBINE(a, b) min(a, b)
#elif defined(OP_MAX)
#define COMBINE(a, b) max(a, b)
#else
#error "the build defines one OP_*"
#endif

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = ELEMENT_BYTES) buffer Elements {
  STORED value[];
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer AddressTable {
  uvec2 address[];
};

// ReduceArguments in plugin_state.hpp.
layout(push_constant) uniform Arguments {
  uvec2 table;  // AddressTable: `inputs` addresses, then `outputs`
  uint count;
  uint inputs;
  uint outputs;
  uint ranks;  // avg's divisor
} arguments;

void main() {
  AddressTable table = AddressTable(arguments.table);
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < arguments.count; i += stride) {
    ACC result = load_element(Elements(table.address[0]).value[i]);
    for (uint j = 1; j < arguments.inputs; ++j) {
      result = COMBINE(result, load_element(Elements(table.address[j]).value[i]));
    }
#if defined(OP_AVG)
    result /= ACC(arguments.ranks);
#endif
    const WORK stored = store_element(result);
    for (uint k = 0; k < arguments.outputs; ++k) {
      Elements(table.address[arguments.inputs + k]).value[i] = STORED(stored);
    }
  }
}
