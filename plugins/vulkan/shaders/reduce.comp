// One reduction, generated per element type and op by the build: defines
// DTYPE_<F16|BF16|F32|F64|I8|U8|I32|U32|I64|U64> and OP_<SUM|PROD|MIN|MAX|AVG>,
// and TEXEL_INPUTS for the second way of reading the inputs.
//
// output[k][i] = op over inputs j of input[j][i], for i < count: every input
// read once, every output written once, any number of each. The outputs are
// reached by address (GL_EXT_buffer_reference) through a table in memory.
// The inputs are read one of two ways:
// - by address too, through the same table (inputs, then outputs): one
//   pipeline serves any rank count, and no descriptor or range limit bounds
//   a dispatch. The way of GPUs, where such loads are plain global loads.
// - TEXEL_INPUTS: as uniform texel buffers, an array of INPUTS descriptors
//   (a specialization constant: one pipeline per rank count, the inputs
//   combined in straight-line code). llvmpipe (lavapipe) turns every load through an
//   address into a gather it cannot vectorise, and fetches from texel
//   buffers as vectors: 2-3x the bandwidth there (plugins/vulkan/README.md).
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

#if defined(TEXEL_INPUTS)
// The sampler type of the format the plugin views the inputs with
// (kTexelFormats in collectives.cpp), and an element of what it fetches.
#if defined(DTYPE_F16) || defined(DTYPE_F32)
#define TEXELS samplerBuffer
#define FETCHED(x) (x)
#elif defined(DTYPE_BF16)
#define TEXELS usamplerBuffer
#define FETCHED(x) uintBitsToFloat((x) << 16)
#elif defined(DTYPE_I8) || defined(DTYPE_I32)
#define TEXELS isamplerBuffer
#define FETCHED(x) ACC(x)
#elif defined(DTYPE_U8) || defined(DTYPE_U32)
#define TEXELS usamplerBuffer
#define FETCHED(x) ACC(x)
#else
#error "no texel format for this element type: the plugin reads it by address"
#endif
#define MAX_TEXEL_INPUTS 32  // kMaxTexelInputs in plugin_state.hpp
// The plugin specialises INPUTS to the rank count; the default is the most,
// so that the compiler's bounds check passes every index below.
layout(constant_id = 0) const uint INPUTS = MAX_TEXEL_INPUTS;
layout(set = 0, binding = 0) uniform TEXELS input_texels[INPUTS];
#define LOAD_INPUT(j, i) FETCHED(texelFetch(input_texels[j], int(i)).x)
// Indexed by constants only (drivers need not have
// shaderUniformTexelBufferArrayDynamicIndexing; lavapipe has not): input j
// is combined where INPUTS > j, which specialization decides.
#define COMBINE_INPUT(j) if (INPUTS > j) result = COMBINE(result, LOAD_INPUT(j, i))
#define COMBINE_INPUTS_AFTER_0                                                                      \
  COMBINE_INPUT(1); COMBINE_INPUT(2); COMBINE_INPUT(3); COMBINE_INPUT(4); COMBINE_INPUT(5);         \
  COMBINE_INPUT(6); COMBINE_INPUT(7); COMBINE_INPUT(8); COMBINE_INPUT(9); COMBINE_INPUT(10);        \
  COMBINE_INPUT(11); COMBINE_INPUT(12); COMBINE_INPUT(13); COMBINE_INPUT(14); COMBINE_INPUT(15);    \
  COMBINE_INPUT(16); COMBINE_INPUT(17); COMBINE_INPUT(18); COMBINE_INPUT(19); COMBINE_INPUT(20);    \
  COMBINE_INPUT(21); COMBINE_INPUT(22); COMBINE_INPUT(23); COMBINE_INPUT(24); COMBINE_INPUT(25);    \
  COMBINE_INPUT(26); COMBINE_INPUT(27); COMBINE_INPUT(28); COMBINE_INPUT(29); COMBINE_INPUT(30);    \
  COMBINE_INPUT(31)
#define OUTPUT_ENTRY(k) (k)
#else
#define LOAD_INPUT(j, i) load_element(Elements(table.address[j]).value[i])
#define COMBINE_INPUTS_AFTER_0 \
  for (uint j = 1; j < arguments.inputs; ++j) result = COMBINE(result, LOAD_INPUT(j, i))
#define OUTPUT_ENTRY(k) (arguments.inputs + (k))
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
  uvec2 table;  // AddressTable: `inputs` addresses (unless TEXEL_INPUTS), then `outputs`
  uint count;
  uint inputs;
  uint outputs;
  uint ranks;  // avg's divisor
} arguments;

void main() {
  AddressTable table = AddressTable(arguments.table);
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < arguments.count; i += stride) {
    ACC result = LOAD_INPUT(0, i);
    COMBINE_INPUTS_AFTER_0;
#if defined(OP_AVG)
    result /= ACC(arguments.ranks);
#endif
    const WORK stored = store_element(result);
    for (uint k = 0; k < arguments.outputs; ++k) {
      Elements(table.address[OUTPUT_ENTRY(k)]).value[i] = STORED(stored);
    }
  }
}
