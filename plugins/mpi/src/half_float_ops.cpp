// The element types and ops MPI's own cannot reduce (right).
// MPI has no 16-bit float types: f16 and bf16 travel as MPI_UINT16_T and
// reduce through user-defined ops (MPI_Op_create, commutative), which widen
// each pair of elements to binary32, combine them and round the result back
// to nearest even. Each combination rounds, so a sum over P processes
// rounds P - 1 times, in the order MPI's algorithm picks.
#include <array>
#include <cstring>

#include "half_float.hpp"
#include "mpi_plugin.hpp"

namespace backplane::mpi {
namespace {

struct Half {
  static float widen(std::uint16_t v) noexcept { return half_to_float(v); }
  static std::uint16_t narrow(float v) noexcept { return float_to_half(v); }
};

struct BFloat {
  static float widen(std::uint16_t v) noexcept { return bfloat_to_float(v); }
  static std::uint16_t narrow(float v) noexcept { return float_to_bfloat(v); }
};

// min and max propagate NaN from either side (as the cpu plugin does), so
// the result does not depend on the order MPI combines the processes in.
struct Sum {
  static float combine(float a, float b) noexcept { return a + b; }
};
struct Prod {
  static float combine(float a, float b) noexcept { return a * b; }
};
struct Min {
  static float combine(float in, float acc) noexcept { return (in < acc || in != in) ? in : acc; }
};
struct Max {
  static float combine(float in, float acc) noexcept { return (acc < in || in != in) ? in : acc; }
};

// MPI_User_function: inout[i] = in[i] op inout[i]. The buffers are the
// host's memory at any alignment, so every element goes through memcpy.
template <class Format, class Op>
void reduce_16(void *in, void *inout, int *length, MPI_Datatype * /*type*/) {
  const auto *from = static_cast<const unsigned char *>(in);
  auto *to = static_cast<unsigned char *>(inout);
  const std::size_t n = *length > 0 ? static_cast<std::size_t>(*length) : 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t a, b;
    std::memcpy(&a, from + 2 * i, 2);
    std::memcpy(&b, to + 2 * i, 2);
    const std::uint16_t r = Format::narrow(Op::combine(Format::widen(a), Format::widen(b)));
    std::memcpy(to + 2 * i, &r, 2);
  }
}

// Open MPI 4.1.4's MPI_SUM on 8-bit integers saturates (its AVX op
// component uses saturating adds: 100 + 100 is 127 in MPI_INT8_T), where
// C++ and every other plugin wrap. One wrapping byte sum serves i8 and u8:
// two's complement adds both alike.
void wrapping_byte_sum(void *in, void *inout, int *length, MPI_Datatype * /*type*/) {
  const auto *from = static_cast<const unsigned char *>(in);
  auto *to = static_cast<unsigned char *>(inout);
  const std::size_t n = *length > 0 ? static_cast<std::size_t>(*length) : 0;
  for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<unsigned char>(to[i] + from[i]);
}
MPI_Op byte_sum = MPI_OP_NULL;

constexpr std::size_t kOps = 4;  // sum, prod, min, max: bp_reduce_op's first four
constexpr std::array<MPI_User_function *, kOps> kHalfFunctions = {
    reduce_16<Half, Sum>, reduce_16<Half, Prod>, reduce_16<Half, Min>, reduce_16<Half, Max>};
constexpr std::array<MPI_User_function *, kOps> kBFloatFunctions = {
    reduce_16<BFloat, Sum>, reduce_16<BFloat, Prod>, reduce_16<BFloat, Min>, reduce_16<BFloat, Max>};

// Written under the library's lock while no transport is open, read by
// exchanges of open transports only.
std::array<MPI_Op, kOps> half_ops = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
std::array<MPI_Op, kOps> bfloat_ops = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

}  // namespace

int create_half_float_ops() {
  if (const int error = MPI_Op_create(wrapping_byte_sum, 1, &byte_sum); error != MPI_SUCCESS) return error;
  for (std::size_t i = 0; i < kOps; ++i) {
    for (auto [functions, ops] : {std::pair{&kHalfFunctions, &half_ops}, std::pair{&kBFloatFunctions, &bfloat_ops}}) {
      if (const int error = MPI_Op_create((*functions)[i], 1, &(*ops)[i]); error != MPI_SUCCESS) {
        free_half_float_ops();
        return error;
      }
    }
  }
  return MPI_SUCCESS;
}

void free_half_float_ops() {
  if (byte_sum != MPI_OP_NULL) MPI_Op_free(&byte_sum);
  for (std::array<MPI_Op, kOps> *ops : {&half_ops, &bfloat_ops})
    for (MPI_Op &op : *ops)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);  // sets it to MPI_OP_NULL
}

MPI_Op half_float_op(std::uint32_t dtype, std::uint32_t reduce_op) {
  if ((dtype == BP_I8 || dtype == BP_U8) && reduce_op == BP_SUM) return byte_sum;
  if (reduce_op > BP_MAX) return MPI_OP_NULL;  // avg is sum, divided once the exchange completed
  if (dtype == BP_F16) return half_ops[reduce_op];
  if (dtype == BP_BF16) return bfloat_ops[reduce_op];
  return MPI_OP_NULL;
}

}  // namespace backplane::mpi
