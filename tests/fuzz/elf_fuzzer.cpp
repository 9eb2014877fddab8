// libFuzzer target: the ELF check of plugin files (host/src/elf_header_check.cpp,
// compiled in here), on the input as the content of a file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "elf_header_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const int fd = memfd_create("elf_fuzzer", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0) std::abort();
  for (size_t written = 0; written < size;) {
    const ssize_t n = pwrite(fd, data + written, size - written, static_cast<off_t>(written));
    if (n <= 0) std::abort();
    written += static_cast<size_t>(n);
  }
  (void)backplane::elf_problem(fd);
  return 0;
}
