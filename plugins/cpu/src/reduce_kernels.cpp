// Instantiates the reduction kernel for every (element type, op) the cpu
// plugin declares, behind one runtime switch.
#include "reduce_kernels.hpp"

namespace backplane::cpu {
namespace {

template <class E>
bool reduce_with_op(std::uint32_t op, const ReduceIo &io, std::size_t begin, std::size_t end) noexcept {
  switch (op) {
    case BP_SUM:
      reduce_range<E, SumOp>(io, begin, end);
      return true;
    case BP_PROD:
      reduce_range<E, ProdOp>(io, begin, end);
      return true;
    case BP_MIN:
      reduce_range<E, MinOp>(io, begin, end);
      return true;
    case BP_MAX:
      reduce_range<E, MaxOp>(io, begin, end);
      return true;
    case BP_AVG:
      if constexpr (std::is_floating_point_v<typename E::acc>) {
        reduce_range<E, AvgOp>(io, begin, end);
        return true;
      } else {
        return false;
      }
    default:
      return false;
  }
}

}  // namespace

bool reduce_elements(std::uint32_t dtype, std::uint32_t op, const ReduceIo &io, std::size_t begin,
                     std::size_t end) noexcept {
  switch (dtype) {
    case BP_F16:
      return reduce_with_op<Float16>(op, io, begin, end);
    case BP_BF16:
      return reduce_with_op<BFloat16>(op, io, begin, end);
    case BP_F32:
      return reduce_with_op<Native<float>>(op, io, begin, end);
    case BP_F64:
      return reduce_with_op<Native<double>>(op, io, begin, end);
    case BP_I8:
      return reduce_with_op<Native<std::int8_t>>(op, io, begin, end);
    case BP_U8:
      return reduce_with_op<Native<std::uint8_t>>(op, io, begin, end);
    case BP_I32:
      return reduce_with_op<Native<std::int32_t>>(op, io, begin, end);
    case BP_U32:
      return reduce_with_op<Native<std::uint32_t>>(op, io, begin, end);
    case BP_I64:
      return reduce_with_op<Native<std::int64_t>>(op, io, begin, end);
    case BP_U64:
      return reduce_with_op<Native<std::uint64_t>>(op, io, begin, end);
    default:
      return false;
  }
}

}  // namespace backplane::cpu
