#include "elf_header_check.hpp"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
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

const char *byte_order_name(unsigned char data) {
  switch (data) {
    case ELFDATA2LSB: return "little-endian";
    case ELFDATA2MSB: return "big-endian";
    default: return "unknown-byte-order";
  }
}

// Reads up to `size` bytes at `offset`; fewer only where the file ends.
// nullopt when the read itself fails.
std::optional<size_t> read_at(int fd, void *out, size_t size, off_t offset) {
  auto *bytes = static_cast<unsigned char *>(out);
  size_t total = 0;
  while (total < size) {
    const ssize_t got = ::pread(fd, bytes + total, size - total, offset + static_cast<off_t>(total));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::nullopt;
    if (got == 0) break;
    total += static_cast<size_t>(got);
  }
  return total;
}

// `what_needs`: "segment 3 needs", "the program headers need".
std::string truncated(const std::string &what_needs, uint64_t needed_end, uint64_t file_size) {
  return "truncated: " + what_needs + " bytes up to " + std::to_string(needed_end) + ", the file has " +
         std::to_string(file_size);
}

}  // namespace

std::optional<std::string> elf_problem(int fd) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) return std::string("cannot read the file: ") + std::strerror(errno);
  const auto file_size = static_cast<uint64_t>(status.st_size);
  // The identification bytes come first so that a cut header of a real ELF
  // file is reported as cut, and a foreign one as foreign, whatever its size.
  Elf64_Ehdr header{};
  const std::optional<size_t> header_bytes = read_at(fd, &header, sizeof header, 0);
  if (!header_bytes) return std::string("cannot read the file: ") + std::strerror(errno);
  if (*header_bytes == 0) return std::string("not an ELF file (the file is empty)");
  if (*header_bytes < SELFMAG || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
    return std::string("not an ELF file (no ELF magic at its start)");
  if (*header_bytes > EI_CLASS && header.e_ident[EI_CLASS] != ELFCLASS64) {
    if (header.e_ident[EI_CLASS] == ELFCLASS32) return std::string("32-bit ELF, this host is 64-bit");
    return "an ELF file of unknown class " + std::to_string(header.e_ident[EI_CLASS]) + ", this host is 64-bit";
  }
  if (*header_bytes > EI_DATA && header.e_ident[EI_DATA] != kHostData) {
    return std::string(byte_order_name(header.e_ident[EI_DATA])) + " ELF, this host is " +
           byte_order_name(kHostData);
  }
  if (*header_bytes < sizeof header) return truncated("the ELF header needs", sizeof header, file_size);
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
  const uint64_t table_size = uint64_t{header.e_phnum} * sizeof(Elf64_Phdr);
  if (header.e_phoff > file_size || table_size > file_size - header.e_phoff) {
    const uint64_t table_end = header.e_phoff + table_size;
    if (table_end < header.e_phoff) return std::string("the program header table's offset wraps around");
    return truncated("the program headers need", table_end, file_size);
  }
  std::vector<Elf64_Phdr> segments(header.e_phnum);
  const size_t table_bytes = segments.size() * sizeof(Elf64_Phdr);
  if (read_at(fd, segments.data(), table_bytes, static_cast<off_t>(header.e_phoff)) != table_bytes)
    return std::string("cannot read the program headers");
  bool dynamic = false;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Elf64_Phdr &segment = segments[i];
    if (segment.p_type == PT_DYNAMIC) dynamic = true;
    if (segment.p_type != PT_LOAD && segment.p_type != PT_DYNAMIC) continue;
    const uint64_t end = segment.p_offset + segment.p_filesz;
    if (end < segment.p_offset)
      return "segment " + std::to_string(i) + " has a file range that wraps around";
    if (end > file_size) return truncated("segment " + std::to_string(i) + " needs", end, file_size);
  }
  if (!dynamic) return std::string("no dynamic section: not a shared object a loader can link");
  // The system loader never reads the section headers, but linkers put them
  // last: a copy cut anywhere after the segments still ends before them.
  // With more than 0xff00 sections e_shnum is 0 and the table holds at least one entry.
  if (header.e_shoff != 0) {
    const uint64_t sections = header.e_shnum != 0 ? header.e_shnum : 1;
    const uint64_t sections_size = sections * header.e_shentsize;
    if (header.e_shoff > file_size || sections_size > file_size - header.e_shoff) {
      const uint64_t sections_end = header.e_shoff + sections_size;
      if (sections_end < header.e_shoff) return std::string("the section header table's offset wraps around");
      return truncated("the section headers need", sections_end, file_size);
    }
  }
  return std::nullopt;
}

}  // namespace backplane
