// The 16-bit float formats the mpi plugin reduces through user-defined MPI
// ops, with the conversions every plugin shares (plugin_support).
#pragma once

#include "plugin_support/half_float.hpp"

namespace backplane::mpi {

using plugin_support::bfloat_to_float;
using plugin_support::float_to_bfloat;
using plugin_support::float_to_half;
using plugin_support::half_to_float;

}  // namespace backplane::mpi
