// One reduction, generated per element type and op by the build: defines
// DTYPE_<F16|BF16|F32|F64|I8|U8|I32|U32|I64|U64> and OP_<SUM|PROD|MIN|MAX|AVG>,
// and TEXEL_BUFFERS for the second way of reaching the buffers.
//
// output[k][i] = op over inputs j of input[j][i], for i < count: every input
// read once, every output written once, any number of each. Two ways:
// - by address (GL_EXT_buffer_reference), through a table in memory (the
//   inputs, then the outputs): one pipeline serves any rank count, and no
//   descriptor or range limit bounds a dispatch. The way of GPUs, where such
//   accesses are plain global loads and stores.
// - TEXEL_BUFFERS: inputs as uniform texel buffers, outputs as storage texel
//   buffers, each viewed four elements to a texel; arrays of INPUTS and
//   OUTPUTS descriptors (specialization constants: one pipeline per shape,
//   combined in straight-line code). llvmpipe (lavapipe) loads and stores
//   through an address lane by lane, element by element, and fetches and
//   stores texels as vectors: a 64 MiB all_reduce on 2 ranks took 183 ms by
//   address and 32 ms this way (plugins/vulkan/README.md). The count % 4
//   elements after the last whole texel go by address, through the same
//   table.
// Outputs may be inputs (in place): an invocation reads all of its elements
// before it writes them. Elements are visited grid-stride, so a dispatch of
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

#if defined(TEXEL_BUFFERS)
// Per element type: the sampler type the inputs are fetched with and the
// image type the outputs are stored with, both viewed four elements to a
// texel (kTexelFormats in discovery.cpp, whose formats match these
// qualifiers); the vector the four are combined in; FETCHED widens what a
// fetch returns to it, TO_TEXEL narrows a result to what the image takes,
// wrapping integers as the scalar path's conversions do (a store of a value
// the format cannot hold is not defined).
#if defined(DTYPE_F16) || defined(DTYPE_F32)
#define TEXELS samplerBuffer
#define IMAGE imageBuffer
#if defined(DTYPE_F16)
#define IMAGE_FORMAT rgba16f
#else
#define IMAGE_FORMAT rgba32f
#endif
#define VEC vec4
#define TEXEL_OUT vec4
#define FETCHED(x) (x)
#define TO_TEXEL(x) (x)
#elif defined(DTYPE_BF16)
#define TEXELS usamplerBuffer
#define IMAGE uimageBuffer
#define IMAGE_FORMAT rgba16ui
#define VEC vec4
#define TEXEL_OUT uvec4
#define FETCHED(x) uintBitsToFloat((x) << 16)
uvec4 TO_TEXEL(vec4 x) {
  const uvec4 bits = floatBitsToUint(x);
  const uvec4 rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return mix(rounded, (bits >> 16) | 0x40u, isnan(x));
}
#elif defined(DTYPE_I8) || defined(DTYPE_I32)
#define TEXELS isamplerBuffer
#define IMAGE iimageBuffer
#define VEC ivec4
#define TEXEL_OUT ivec4
#define FETCHED(x) (x)
#if defined(DTYPE_I8)
#define IMAGE_FORMAT rgba8i
#define TO_TEXEL(x) (((x) << 24) >> 24)
#else
#define IMAGE_FORMAT rgba32i
#define TO_TEXEL(x) (x)
#endif
#elif defined(DTYPE_U8) || defined(DTYPE_U32)
#define TEXELS usamplerBuffer
#define IMAGE uimageBuffer
#define VEC uvec4
#define TEXEL_OUT uvec4
#define FETCHED(x) (x)
#if defined(DTYPE_U8)
#define IMAGE_FORMAT rgba8ui
#define TO_TEXEL(x) ((x) & 0xFFu)
#else
#define IMAGE_FORMAT rgba32ui
#define TO_TEXEL(x) (x)
#endif
#else
#error "no texel format for this element type: the plugin reads it by address"
#endif
#define MAX_TEXEL_VIEWS 32  // kMaxTexelViews in plugin_state.hpp, for inputs and for outputs
// The plugin specialises INPUTS and OUTPUTS to the call's; the defaults
// are the most, so that the compiler's bounds checks pass every index below.
layout(constant_id = 0) const uint INPUTS = MAX_TEXEL_VIEWS;
layout(constant_id = 1) const uint OUTPUTS = MAX_TEXEL_VIEWS;
layout(set = 0, binding = 0) uniform TEXELS input_texels[INPUTS];
layout(set = 0, binding = 1, IMAGE_FORMAT) uniform writeonly IMAGE output_texels[OUTPUTS];
// Indexed by constants only (drivers need not have dynamic indexing of
// texel buffer arrays; lavapipe has not): view j is used where INPUTS > j
// (OUTPUTS > k), which specialization decides.
#define COMBINE_TEXEL(j) if (INPUTS > j) result = COMBINE(result, VEC(FETCHED(texelFetch(input_texels[j], int(t)))))
#define STORE_TEXEL(k) if (OUTPUTS > k) imageStore(output_texels[k], int(t), stored)
#define FOR_VIEWS_AFTER_0(X)                                                                       \
  X(1); X(2); X(3); X(4); X(5); X(6); X(7); X(8); X(9); X(10); X(11); X(12); X(13); X(14); X(15);  \
  X(16); X(17); X(18); X(19); X(20); X(21); X(22); X(23); X(24); X(25); X(26); X(27); X(28);       \
  X(29); X(30); X(31)
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

// Element i by address: the table holds the inputs' addresses, then the
// outputs'.
void reduce_element(AddressTable table, uint i) {
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

void main() {
  AddressTable table = AddressTable(arguments.table);
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
#if defined(TEXEL_BUFFERS)
  // Whole texels of four elements through the views, then the count % 4
  // elements after them by address.
  const uint texels = arguments.count / 4;
  for (uint t = gl_GlobalInvocationID.x; t < texels; t += stride) {
    VEC result = VEC(FETCHED(texelFetch(input_texels[0], int(t))));
    FOR_VIEWS_AFTER_0(COMBINE_TEXEL);
#if defined(OP_AVG)
    result /= VEC(arguments.ranks);
#endif
    const TEXEL_OUT stored = TO_TEXEL(result);
    STORE_TEXEL(0);
    FOR_VIEWS_AFTER_0(STORE_TEXEL);
  }
  if (gl_GlobalInvocationID.x < arguments.count % 4) reduce_element(table, texels * 4 + gl_GlobalInvocationID.x);
#else
  for (uint i = gl_GlobalInvocationID.x; i < arguments.count; i += stride) reduce_element(table, i);
#endif
}
