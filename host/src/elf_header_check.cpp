#include "elf_header_check.hpp"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace backplane {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#elif defined(__i386__)
constexpr uint16_t kHostMachine = EM_386;
#elif defined(__arm__)
constexpr uint16_t kHostMachine = EM_ARM;
#elif defined(__riscv)
constexpr uint16_t kHostMachine = EM_RISCV;
#elif defined(__powerpc64__)
constexpr uint16_t kHostMachine = EM_PPC64;
#elif defined(__s390x__)
constexpr uint16_t kHostMachine = EM_S390;
#elif defined(__loongarch__)
constexpr uint16_t kHostMachine = 258;  // EM_LOONGARCH
#else
#error "elf_header_check: name this architecture's e_machine"
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr unsigned char kHostData = ELFDATA2LSB;
#else
constexpr unsigned char kHostData = ELFDATA2MSB;
#endif

constexpr size_t kMaxProgramHeaders = 1024;  // 56 KiB of 64-bit headers

std::string machine_name(uint16_t machine) {
  switch (machine) {
    case EM_X86_64: return "x86_64";
    case EM_386: return "i386";
    case EM_AARCH64: return "aarch64";
    case EM_ARM: return "arm";
    case EM_RISCV: return "riscv";
    case EM_PPC64: return "ppc64";
    case EM_PPC: return "ppc";
    case EM_S390: return "s390x";
    case 258: return "loongarch";
    default: return "machine " + std::to_string(machine);
  }
}

std::string type_name(uint16_t type) {
  switch (type) {
    case ET_EXEC: return "an executable";
    case ET_REL: return "a relocatable object file (.o)";
    case ET_CORE: return "a core dump";
    case ET_NONE: return "an ELF file of no type";
    default: return "an ELF file of type " + std::to_string(type);
  }
}

// Reads exactly `size` bytes at `offset`; false when the file is shorter.
bool read_at(int fd, void *out, size_t size, off_t offset) {
  auto *bytes = static_cast<unsigned char *>(out);
  while (size > 0) {
    const ssize_t got = ::pread(fd, bytes, size, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

}  // namespace

std::optional<std::string> elf_problem(int fd) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) return std::string("cannot read the file: ") + std::strerror(errno);
  const auto file_size = static_cast<uint64_t>(status.st_size);
  unsigned char ident[EI_NIDENT] = {};
  if (file_size < EI_NIDENT || !read_at(fd, ident, EI_NIDENT, 0) || std::memcmp(ident, ELFMAG, SELFMAG) != 0)
    return std::string("not an ELF file (no ELF magic at its start)");
  if (ident[EI_CLASS] != ELFCLASS64) {
    return std::string(ident[EI_CLASS] == ELFCLASS32 ? "a 32-bit ELF file" : "an ELF file of unknown class") +
           ", this host is 64-bit";
  }
  if (ident[EI_DATA] != kHostData)
    return std::string("an ELF file of the other byte order than this host's");
  Elf64_Ehdr header{};
  if (file_size < sizeof header || !read_at(fd, &header, sizeof header, 0))
    return "truncated: the ELF header needs " + std::to_string(sizeof header) + " bytes, the file has " +
           std::to_string(file_size);
  if (header.e_machine != kHostMachine)
    return "built for " + machine_name(header.e_machine) + ", this host is " + machine_name(kHostMachine);
  if (header.e_type != ET_DYN) return "not a shared object: it is " + type_name(header.e_type);
  if (header.e_phentsize != sizeof(Elf64_Phdr))
    return "program header entries are " + std::to_string(header.e_phentsize) + " bytes, not " +
           std::to_string(sizeof(Elf64_Phdr));
  if (header.e_phnum == 0) return std::string("no program headers");
  if (header.e_phnum > kMaxProgramHeaders)
    return std::to_string(header.e_phnum) + " program headers, more than the " +
           std::to_string(kMaxProgramHeaders) + " a host reads";
  const uint64_t table_end = header.e_phoff + uint64_t{header.e_phnum} * sizeof(Elf64_Phdr);
  if (header.e_phoff > file_size || table_end > file_size || table_end < header.e_phoff)
    return "truncated: the program headers need bytes up to " + std::to_string(table_end) + ", the file has " +
           std::to_string(file_size);
  std::vector<Elf64_Phdr> segments(header.e_phnum);
  if (!read_at(fd, segments.data(), segments.size() * sizeof(Elf64_Phdr), static_cast<off_t>(header.e_phoff)))
    return std::string("cannot read the program headers");
  bool dynamic = false;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Elf64_Phdr &segment = segments[i];
    if (segment.p_type == PT_DYNAMIC) dynamic = true;
    if (segment.p_type != PT_LOAD && segment.p_type != PT_DYNAMIC) continue;
    const uint64_t end = segment.p_offset + segment.p_filesz;
    if (end < segment.p_offset)
      return "segment " + std::to_string(i) + " has a file range that wraps around";
    if (end > file_size)
      return "truncated: segment " + std::to_string(i) + " needs bytes up to " + std::to_string(end) +
             ", the file has " + std::to_string(file_size);
  }
  if (!dynamic) return std::string("no dynamic section: not a shared object a loader can link");
  return std::nullopt;
}

}  // namespace backplane
