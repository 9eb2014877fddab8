// The checks a plugin file passes before the system loader maps it: a file
// cut short (an interrupted copy, a full disk) makes dlopen map segments
// the file does not hold, and the first touch of them kills the process
// with SIGBUS. Reading the ELF and program headers with pread first turns
// that, and files built for another machine, into a refusal with a reason.
#pragma once

#include <optional>
#include <string>

namespace backplane {

// Why the open file `fd` cannot be a shared object for this host, in one
// line ("truncated: segment 3 needs bytes up to 431616, the file has
// 4096"), or nullopt when its headers are sound. Reads at most 64 KiB.
std::optional<std::string> elf_problem(int fd);

}  // namespace backplane
