// The ELF check before dlopen (issue 11). elf_problem (host/src/
// elf_header_check.cpp, compiled in here) is asked directly about a real
// plugin cut at every length and patched field by field, with the exact
// reason; then hosts and the CLI are given such files: each is refused with
// BP_PLUGIN_LOAD and that reason, never mapped into a crash (a cut file used
// to end the host with SIGBUS), and a good plugin beside it still loads.
#include <elf.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "backplane/backplane.hpp"
#include "elf_header_check.hpp"
#include "fixtures/fixture_checks.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace backplane;
using namespace backplane::testing;
using namespace backplane::fixtures;

// This build's machine, and another one to patch in, as the check names them.
#if defined(__x86_64__)
constexpr const char *kHostMachineName = "x86_64";
constexpr uint16_t kForeignMachine = EM_AARCH64;
constexpr const char *kForeignMachineName = "aarch64";
#elif defined(__aarch64__)
constexpr const char *kHostMachineName = "aarch64";
constexpr uint16_t kForeignMachine = EM_X86_64;
constexpr const char *kForeignMachineName = "x86_64";
#else
#error "elf_check_test: name this architecture and a foreign one"
#endif

std::string read_bytes(const fs::path &file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The cpu plugin as built: a real shared object with several segments.
const std::string &real_plugin() {
  static const std::string bytes = read_bytes(plugin_path("cpu"));
  return bytes;
}

Elf64_Ehdr header_of(const std::string &bytes) {
  Elf64_Ehdr header{};
  std::memcpy(&header, bytes.data(), sizeof header);
  return header;
}

Elf64_Phdr segment_of(const std::string &bytes, size_t index) {
  Elf64_Phdr segment{};
  std::memcpy(&segment, bytes.data() + header_of(bytes).e_phoff + index * sizeof segment, sizeof segment);
  return segment;
}

uint64_t program_headers_end(const std::string &bytes) {
  const Elf64_Ehdr header = header_of(bytes);
  return header.e_phoff + uint64_t{header.e_phnum} * sizeof(Elf64_Phdr);
}

// Where the last PT_LOAD segment's bytes end in the file.
uint64_t end_of_last_load(const std::string &bytes) {
  uint64_t end = 0;
  for (size_t i = 0; i < header_of(bytes).e_phnum; ++i) {
    const Elf64_Phdr segment = segment_of(bytes, i);
    if (segment.p_type == PT_LOAD) end = std::max<uint64_t>(end, segment.p_offset + segment.p_filesz);
  }
  return end;
}

// What the check must say about `whole` cut to `length` bytes, where the
// headers are whole: the first mapped segment, in table order, that the cut
// reaches into, else the section header table.
std::string expected_cut_reason(const std::string &whole, uint64_t length) {
  for (size_t i = 0; i < header_of(whole).e_phnum; ++i) {
    const Elf64_Phdr segment = segment_of(whole, i);
    const uint64_t end = segment.p_offset + segment.p_filesz;
    if ((segment.p_type == PT_LOAD || segment.p_type == PT_DYNAMIC) && end > length)
      return "truncated: segment " + std::to_string(i) + " needs bytes up to " + std::to_string(end) +
             ", the file has " + std::to_string(length);
  }
  return "truncated: the section headers need bytes up to " + std::to_string(whole.size()) + ", the file has " +
         std::to_string(length);
}

// A file in memory (memfd) for elf_problem to read.
class MemoryFile {
 public:
  explicit MemoryFile(const std::string &bytes) : fd_(::memfd_create("elf_check_test", MFD_CLOEXEC)) {
    if (fd_ < 0) ADD_FAILURE() << "memfd_create: " << std::strerror(errno);
    for (size_t written = 0; fd_ >= 0 && written < bytes.size();) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + written, bytes.size() - written, static_cast<off_t>(written));
      if (n <= 0) {
        ADD_FAILURE() << "pwrite: " << std::strerror(errno);
        break;
      }
      written += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemoryFile(const MemoryFile &) = delete;
  MemoryFile &operator=(const MemoryFile &) = delete;
  // Cuts the file to its first `length` bytes, as an interrupted copy would.
  void cut_to(uint64_t length) {
    if (::ftruncate(fd_, static_cast<off_t>(length)) != 0) ADD_FAILURE() << "ftruncate: " << std::strerror(errno);
  }
  std::optional<std::string> problem() const { return backplane::elf_problem(fd_); }

 private:
  int fd_;
};

std::optional<std::string> problem_of(const std::string &bytes) { return MemoryFile(bytes).problem(); }

std::string patched(size_t offset, const void *value, size_t size) {
  std::string bytes = real_plugin();
  std::memcpy(bytes.data() + offset, value, size);
  return bytes;
}

template <typename T>
std::string with_header_field(size_t offset, T value) {
  return patched(offset, &value, sizeof value);
}

// The plugin with every PT_DYNAMIC entry turned into a PT_NOTE.
std::string without_dynamic_segment() {
  std::string bytes = real_plugin();
  for (size_t i = 0; i < header_of(bytes).e_phnum; ++i) {
    Elf64_Phdr segment = segment_of(bytes, i);
    if (segment.p_type != PT_DYNAMIC) continue;
    segment.p_type = PT_NOTE;
    std::memcpy(bytes.data() + header_of(bytes).e_phoff + i * sizeof segment, &segment, sizeof segment);
  }
  return bytes;
}

// ---- elf_problem itself --------------------------------------------------------

TEST(ElfProblem, TheWholePluginHasNone) { EXPECT_EQ(problem_of(real_plugin()), std::nullopt); }

TEST(ElfProblem, ACutInsideTheHeadersNamesWhatIsMissing) {
  const std::string &whole = real_plugin();
  const uint64_t headers_end = program_headers_end(whole);
  const auto cut = [&](uint64_t length) { return problem_of(whole.substr(0, length)); };
  EXPECT_EQ(cut(0), "not an ELF file (the file is empty)");
  EXPECT_EQ(cut(3), "not an ELF file (no ELF magic at its start)");
  for (uint64_t length : {4, 10, 40, 63})
    EXPECT_EQ(cut(length), "truncated: the ELF header needs bytes up to 64, the file has " + std::to_string(length));
  for (uint64_t length : {uint64_t{64}, uint64_t{100}, headers_end - 1})
    EXPECT_EQ(cut(length), "truncated: the program headers need bytes up to " + std::to_string(headers_end) +
                               ", the file has " + std::to_string(length));
}

TEST(ElfProblem, ACutPastTheHeadersNamesTheSegmentAndBothSizes) {
  const std::string &whole = real_plugin();
  const uint64_t last_load_end = end_of_last_load(whole);
  ASSERT_GT(last_load_end, 8192u);
  ASSERT_LT(last_load_end, whole.size()) << "the section headers follow the segments";
  for (uint64_t length : {program_headers_end(whole), uint64_t{4096}, last_load_end - 100, last_load_end - 1,
                          last_load_end, uint64_t{whole.size()} - 1}) {
    EXPECT_EQ(problem_of(whole.substr(0, length)), expected_cut_reason(whole, length));
  }
  EXPECT_EQ(problem_of(whole.substr(0, whole.size() - 1)),
            "truncated: the section headers need bytes up to " + std::to_string(whole.size()) + ", the file has " +
                std::to_string(whole.size() - 1));
}

// An interrupted copy can stop anywhere: no length short of the whole passes.
TEST(ElfProblem, NoCutAtAnyLengthPasses) {
  const std::string &whole = real_plugin();
  MemoryFile file(whole);
  // Longest first: a memfd cut shorter cannot grow its bytes back.
  for (uint64_t length = whole.size() - 1;; length = length > 61 ? length - 61 : 0) {
    file.cut_to(length);
    const std::optional<std::string> problem = file.problem();
    ASSERT_TRUE(problem.has_value()) << "a cut at " << length << " passed";
    ASSERT_TRUE(problem->rfind("truncated: ", 0) == 0 || problem->rfind("not an ELF file", 0) == 0)
        << length << ": " << *problem;
    if (length == 0) break;
  }
}

TEST(ElfProblem, AForeignOrNonSharedFileIsNamed) {
  EXPECT_EQ(problem_of(patched(EI_CLASS, "\x01", 1)), "32-bit ELF, this host is 64-bit");
  EXPECT_EQ(problem_of(patched(EI_CLASS, "\x07", 1)), "an ELF file of unknown class 7, this host is 64-bit");
  EXPECT_EQ(problem_of(std::string("\x7f" "ELF\x01", 5)), "32-bit ELF, this host is 64-bit")
      << "the class is named even when the file ends right after it";
  const std::string other_byte_order(1, __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2MSB : ELFDATA2LSB);
  EXPECT_EQ(problem_of(patched(EI_DATA, other_byte_order.data(), 1)),
            __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? "big-endian ELF, this host is little-endian"
                                                      : "little-endian ELF, this host is big-endian");
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_machine), kForeignMachine)),
            std::string("built for ") + kForeignMachineName + ", this host is " + kHostMachineName);
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_machine), uint16_t{EM_RISCV})),
            std::string("built for riscv, this host is ") + kHostMachineName);
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_machine), uint16_t{4242})),
            std::string("built for machine 4242, this host is ") + kHostMachineName);
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_type), uint16_t{ET_EXEC})),
            "not a shared object: it is an executable");
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_type), uint16_t{ET_REL})),
            "not a shared object: it is a relocatable object file (.o)");
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_type), uint16_t{ET_CORE})),
            "not a shared object: it is a core dump");
  EXPECT_EQ(problem_of("this is not a plugin\n"), "not an ELF file (no ELF magic at its start)");
}

TEST(ElfProblem, MalformedTablesAreNamed) {
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_phentsize), uint16_t{32})),
            "program header entries are 32 bytes, not 56");
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_phnum), uint16_t{0})), "no program headers");
  // The cap keeps the check's reads bounded whatever a file claims.
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_phnum), uint16_t{1025})),
            "1025 program headers, more than the 1024 a host reads");
  const uint64_t far = uint64_t{1} << 62;
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_phoff), far)),
            "truncated: the program headers need bytes up to " +
                std::to_string(far + header_of(real_plugin()).e_phnum * sizeof(Elf64_Phdr)) + ", the file has " +
                std::to_string(real_plugin().size()));
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_phoff), ~uint64_t{0} - 8)),
            "the program header table's offset wraps around");
  EXPECT_EQ(problem_of(with_header_field(offsetof(Elf64_Ehdr, e_shoff), ~uint64_t{0} - 8)),
            "the section header table's offset wraps around");
  EXPECT_EQ(problem_of(without_dynamic_segment()), "no dynamic section: not a shared object a loader can link");
}

TEST(ElfProblem, ASegmentRangeThatWrapsOrOverrunsIsNamed) {
  const std::string &whole = real_plugin();
  size_t first_load = 0;
  while (segment_of(whole, first_load).p_type != PT_LOAD) ++first_load;
  const size_t entry_at = header_of(whole).e_phoff + first_load * sizeof(Elf64_Phdr);
  ASSERT_GT(segment_of(whole, first_load).p_filesz, 8u);
  EXPECT_EQ(problem_of(with_header_field(entry_at + offsetof(Elf64_Phdr, p_offset), ~uint64_t{0} - 8)),
            "segment " + std::to_string(first_load) + " has a file range that wraps around");
  const uint64_t offset = segment_of(whole, first_load).p_offset;
  EXPECT_EQ(problem_of(with_header_field(entry_at + offsetof(Elf64_Phdr, p_filesz), uint64_t{whole.size()} - offset + 1)),
            "truncated: segment " + std::to_string(first_load) + " needs bytes up to " +
                std::to_string(whole.size() + 1) + ", the file has " + std::to_string(whole.size()));
}

TEST(ElfProblem, ADescriptorThatCannotBeReadIsSaid) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  ASSERT_EQ(::write(ends[1], "\x7f" "ELF", 4), 4);
  EXPECT_EQ(backplane::elf_problem(ends[0]), std::string("cannot read the file: ") + std::strerror(ESPIPE));
  ::close(ends[0]);
  ::close(ends[1]);
}

// ---- a host given such files ---------------------------------------------------

// `bytes` as libbackplane_cut.so beside the good mock fixture: refused with
// BP_PLUGIN_LOAD and exactly `reason`, the mock still loads and computes.
void expect_refused(const std::string &bytes, const std::string &reason) {
  SCOPED_TRACE(reason);
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  const fs::path cut = dir.write_file("libbackplane_cut.so", bytes);
  Host host = make_host({dir.path().string()});
  EXPECT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = refusal_of(host, cut);
  ASSERT_NE(refusal, nullptr) << "not refused" << describe_refused(host);
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
  EXPECT_EQ(text_field(refusal, "reason"), reason) << json_of(refusal);
  EXPECT_EQ(std::string(bp_error_message(refusal)), "cannot load plugin '" + cut.string() + "': " + reason);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"mock"}));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

TEST(ElfCheck, APluginCutAtAnyLengthIsRefusedNotMapped) {
  const std::string &whole = real_plugin();
  const uint64_t headers_end = program_headers_end(whole);
  const uint64_t last_load_end = end_of_last_load(whole);
  expect_refused("", "not an ELF file (the file is empty)");
  expect_refused(whole.substr(0, 10), "truncated: the ELF header needs bytes up to 64, the file has 10");
  expect_refused(whole.substr(0, headers_end - 1), "truncated: the program headers need bytes up to " +
                                                       std::to_string(headers_end) + ", the file has " +
                                                       std::to_string(headers_end - 1));
  for (uint64_t length : {uint64_t{4096}, last_load_end - 100, last_load_end - 1, uint64_t{whole.size()} - 1})
    expect_refused(whole.substr(0, length), expected_cut_reason(whole, length));
}

TEST(ElfCheck, AForeignOrNonSharedFileIsRefusedNamingIt) {
  expect_refused(patched(EI_CLASS, "\x01", 1), "32-bit ELF, this host is 64-bit");
  expect_refused(with_header_field(offsetof(Elf64_Ehdr, e_machine), kForeignMachine),
                 std::string("built for ") + kForeignMachineName + ", this host is " + kHostMachineName);
  expect_refused(with_header_field(offsetof(Elf64_Ehdr, e_type), uint16_t{ET_EXEC}),
                 "not a shared object: it is an executable");
  expect_refused(without_dynamic_segment(), "no dynamic section: not a shared object a loader can link");
  expect_refused("this is not a plugin\n", "not an ELF file (no ELF magic at its start)");
}

TEST(ElfCheck, TheWholePluginPassesAndLoads) {
  TempDir dir;
  dir.write_file("libbackplane_cpu.so", real_plugin());
  Host host = make_host({dir.path().string()}, R"({"cpu": {"devices": 2}})");
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  EXPECT_TRUE(all_reduce_works(host, "cpu", 2));
}

// `backplane plugins` lists a cut file among the refused, with the reason,
// and still succeeds: listing refusals is what it is for.
TEST(ElfCheck, ThePluginsCommandListsACutFileWithItsReason) {
  const std::string &whole = real_plugin();
  const uint64_t length = end_of_last_load(whole) - 1;
  TempDir dir;
  dir.copy_in(plugin_path("cpu"));
  const fs::path cut = dir.write_file("libbackplane_cut.so", whole.substr(0, length));
  CommandResult ran = run_cli({"--only-plugin-dirs", "--plugin-dir", dir.path().string(), "plugins", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  const nlohmann::json out = nlohmann::json::parse(ran.out, nullptr, false);
  ASSERT_FALSE(out.is_discarded()) << ran.out;
  ASSERT_EQ(out["loaded"].size(), 1u) << out.dump(2);
  EXPECT_EQ(out["loaded"][0]["name"], "cpu");
  ASSERT_EQ(out["refused"].size(), 1u) << out.dump(2);
  const nlohmann::json &refused = out["refused"][0];
  EXPECT_EQ(refused["code"], "PLUGIN_LOAD") << refused.dump();
  EXPECT_TRUE(same_file(refused["file"].get<std::string>(), cut)) << refused.dump();
  EXPECT_NE(refused["message"].get<std::string>().find("': " + expected_cut_reason(whole, length)), std::string::npos)
      << refused.dump();

  CommandResult table = run_cli({"--only-plugin-dirs", "--plugin-dir", dir.path().string(), "plugins"});
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find(expected_cut_reason(whole, length)), std::string::npos) << table.out;
}

}  // namespace
