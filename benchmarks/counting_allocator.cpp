// Counting replacements for the global allocation functions of this
// benchmark executable. Global operator new/delete are replaced (C++
// [replacement.functions]); malloc and friends are interposed: a definition
// in the executable wins over libc's for every library in the process,
// dlopen'ed plugins included, which glibc supports ("Replacing malloc" in
// its manual). Both forward to glibc's own allocator through its exported
// __libc_* entry points, so memory from either side may be freed by the
// other. Counting is one relaxed atomic add; frees are not counted.
#include "counting_allocator.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

extern "C" {
// glibc's allocator under its own names (GLIBC_2.2.5); not in any header.
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *pointer, size_t size);
void *__libc_memalign(size_t alignment, size_t size);
void __libc_free(void *pointer);
}

namespace {

std::atomic<uint64_t> g_operator_new{0};
std::atomic<uint64_t> g_malloc{0};

void *counted_new(std::size_t size) {
  g_operator_new.fetch_add(1, std::memory_order_relaxed);
  if (void *pointer = __libc_malloc(size ? size : 1)) return pointer;
  throw std::bad_alloc();
}

void *counted_new(std::size_t size, std::align_val_t alignment) {
  g_operator_new.fetch_add(1, std::memory_order_relaxed);
  if (void *pointer = __libc_memalign(static_cast<std::size_t>(alignment), size ? size : 1)) return pointer;
  throw std::bad_alloc();
}

bool valid_alignment(std::size_t alignment) {
  return alignment >= sizeof(void *) && (alignment & (alignment - 1)) == 0;
}

}  // namespace

// ---- operator new / delete, every replaceable form -----------------------

void *operator new(std::size_t size) { return counted_new(size); }
void *operator new[](std::size_t size) { return counted_new(size); }
void *operator new(std::size_t size, std::align_val_t alignment) { return counted_new(size, alignment); }
void *operator new[](std::size_t size, std::align_val_t alignment) { return counted_new(size, alignment); }

void *operator new(std::size_t size, const std::nothrow_t &) noexcept {
  try {
    return counted_new(size);
  } catch (...) {
    return nullptr;
  }
}
void *operator new[](std::size_t size, const std::nothrow_t &) noexcept {
  try {
    return counted_new(size);
  } catch (...) {
    return nullptr;
  }
}
void *operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  try {
    return counted_new(size, alignment);
  } catch (...) {
    return nullptr;
  }
}
void *operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t &) noexcept {
  try {
    return counted_new(size, alignment);
  } catch (...) {
    return nullptr;
  }
}

void operator delete(void *pointer) noexcept { __libc_free(pointer); }
void operator delete[](void *pointer) noexcept { __libc_free(pointer); }
void operator delete(void *pointer, std::size_t) noexcept { __libc_free(pointer); }
void operator delete[](void *pointer, std::size_t) noexcept { __libc_free(pointer); }
void operator delete(void *pointer, const std::nothrow_t &) noexcept { __libc_free(pointer); }
void operator delete[](void *pointer, const std::nothrow_t &) noexcept { __libc_free(pointer); }
void operator delete(void *pointer, std::align_val_t) noexcept { __libc_free(pointer); }
void operator delete[](void *pointer, std::align_val_t) noexcept { __libc_free(pointer); }
void operator delete(void *pointer, std::size_t, std::align_val_t) noexcept { __libc_free(pointer); }
void operator delete[](void *pointer, std::size_t, std::align_val_t) noexcept { __libc_free(pointer); }
void operator delete(void *pointer, std::align_val_t, const std::nothrow_t &) noexcept { __libc_free(pointer); }
void operator delete[](void *pointer, std::align_val_t, const std::nothrow_t &) noexcept { __libc_free(pointer); }

// ---- malloc and friends --------------------------------------------------

extern "C" {

void *malloc(size_t size) noexcept {
  g_malloc.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) noexcept {
  g_malloc.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(count, size);
}

void *realloc(void *pointer, size_t size) noexcept {
  g_malloc.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(pointer, size);
}

void free(void *pointer) noexcept { __libc_free(pointer); }

int posix_memalign(void **out, size_t alignment, size_t size) noexcept {
  if (!valid_alignment(alignment)) return EINVAL;
  g_malloc.fetch_add(1, std::memory_order_relaxed);
  void *pointer = __libc_memalign(alignment, size);
  if (!pointer) return ENOMEM;
  *out = pointer;
  return 0;
}

void *aligned_alloc(size_t alignment, size_t size) noexcept {
  g_malloc.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size) noexcept {
  g_malloc.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, size);
}

}  // extern "C"

namespace backplane::bench {

AllocationCounts allocation_counts() {
  return {g_operator_new.load(std::memory_order_relaxed), g_malloc.load(std::memory_order_relaxed)};
}

}  // namespace backplane::bench
