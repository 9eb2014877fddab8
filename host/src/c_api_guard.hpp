// The guard every C API function runs its body in: nothing thrown crosses
// the C boundary, and running out of memory while reporting still reports.
#pragma once

#include <new>

#include "error.hpp"

namespace backplane {

// Runs `body` (returning Status) and converts the outcome to bp_error*.
template <typename Body>
bp_error *guarded(Body &&body) noexcept {
  try {
    return to_c_error(body());
  } catch (const std::bad_alloc &) {
    return out_of_memory_error();
  } catch (const std::exception &exception) {
    try {
      return to_c_error(Error(BP_INTERNAL, std::string("internal error: ") + exception.what()));
    } catch (...) {
      return out_of_memory_error();
    }
  } catch (...) {
    return out_of_memory_error();
  }
}

}  // namespace backplane
