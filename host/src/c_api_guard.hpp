// The guard every C API function runs its body in: nothing thrown crosses
// the C boundary, and running out of memory while reporting still reports.
#pragma once

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "backplane/backplane.h"
#include "error.hpp"

namespace backplane {

// "f: argument is NULL", the one message for every NULL handle or pointer.
inline Status null_argument(const char *function, const char *argument) {
  return Error(BP_INVALID_ARGUMENT, std::string(function) + ": " + argument + " is NULL");
}

// Out-structs (backplane.h's conventions): the caller set struct_size; the
// fields we have are written as far as it reaches, the rest of its struct
// zeroed, and its struct_size and `next` chain kept.
template <typename T>
Status write_out(const char *function, T *out, const T &full, size_t first_release_size) {
  if (!out) return null_argument(function, "out");
  const size_t size = out->struct_size;
  if (size < first_release_size || size > BP_OUT_STRUCT_SIZE_MAX) {
    return Error(BP_INVALID_ARGUMENT, std::string(function) + ": out->struct_size is " + std::to_string(size) +
                                          (size < first_release_size
                                               ? ", less than its 1.0 size " + std::to_string(first_release_size)
                                               : ", more than BP_OUT_STRUCT_SIZE_MAX (" +
                                                     std::to_string(BP_OUT_STRUCT_SIZE_MAX) + ")"))
        .hint("set struct_size = sizeof the struct before the call");
  }
  void *const next = out->next;
  std::memcpy(out, &full, std::min(size, sizeof(T)));
  if (size > sizeof(T)) std::memset(reinterpret_cast<unsigned char *>(out) + sizeof(T), 0, size - sizeof(T));
  out->struct_size = size;
  out->next = next;
  return {};
}

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
