// A process-wide count of heap allocations, so a benchmark can show that a
// call allocates nothing (counting_allocator.cpp replaces operator new and
// interposes malloc for the whole process, plugins included).
#pragma once

#include <cstdint>

namespace backplane::bench {

struct AllocationCounts {
  uint64_t operator_new = 0;  // every form of global operator new / new[]
  uint64_t malloc = 0;        // malloc, calloc, realloc and the aligned forms, called directly
  uint64_t total() const { return operator_new + malloc; }
};

AllocationCounts allocation_counts();

}  // namespace backplane::bench
