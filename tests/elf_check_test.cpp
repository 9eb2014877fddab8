// The ELF check before dlopen (issue 11): a real plugin cut at many lengths,
// and copies with its class, machine and type patched, are each refused
// with BP_PLUGIN_LOAD and a reason naming what is wrong, never loaded into
// a crash (a cut file used to end the host with SIGBUS); a good plugin
// beside each still loads and computes.
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "backplane/backplane.hpp"
#include "fixtures/fixture_checks.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace backplane;
using namespace backplane::testing;
using namespace backplane::fixtures;

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

// Where the last PT_LOAD segment's bytes end in the file.
uint64_t end_of_last_load(const std::string &bytes) {
  const Elf64_Ehdr header = header_of(bytes);
  uint64_t end = 0;
  for (size_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    std::memcpy(&segment, bytes.data() + header.e_phoff + i * sizeof segment, sizeof segment);
    if (segment.p_type == PT_LOAD) end = std::max<uint64_t>(end, segment.p_offset + segment.p_filesz);
  }
  return end;
}

// `bytes` as libbackplane_broken.so beside the good mock fixture: refused
// with BP_PLUGIN_LOAD and a reason that starts with `reason_start`, the
// mock still works. Returns the reason.
std::string expect_refused(const std::string &bytes, const std::string &reason_start) {
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  const fs::path broken = dir.write_file("libbackplane_broken.so", bytes);
  Host host = make_host({dir.path().string()});
  EXPECT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = refusal_of(host, broken);
  if (!refusal) {
    ADD_FAILURE() << "not refused" << describe_refused(host);
    return "";
  }
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
  const std::string reason = text_field(refusal, "reason");
  EXPECT_EQ(reason.rfind(reason_start, 0), 0u) << "reason '" << reason << "' does not start with '" << reason_start
                                               << "'";
  EXPECT_NE(std::string(bp_error_message(refusal)).find(reason), std::string::npos);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"mock"}));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
  return reason;
}

TEST(ElfCheck, APluginCutAtAnyLengthIsRefusedNotMapped) {
  const std::string &whole = real_plugin();
  const Elf64_Ehdr header = header_of(whole);
  const uint64_t headers_end = header.e_phoff + header.e_phnum * sizeof(Elf64_Phdr);
  const uint64_t last = end_of_last_load(whole);
  ASSERT_GT(last, 8192u);
  struct Cut {
    uint64_t length;
    std::string reason_start;
  };
  const Cut cuts[] = {
      {0, "not an ELF file"},
      {10, "not an ELF file"},
      {40, "truncated: the ELF header needs 64 bytes, the file has 40"},
      {headers_end - 1, "truncated: the program headers need bytes up to " + std::to_string(headers_end) +
                            ", the file has " + std::to_string(headers_end - 1)},
      {4096, "truncated: segment "},
      {last - 100, "truncated: segment "},
      {last - 1, "truncated: segment "},
  };
  for (const Cut &cut : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(cut.length));
    const std::string reason = expect_refused(whole.substr(0, cut.length), cut.reason_start);
    if (cut.reason_start == "truncated: segment ") {
      EXPECT_NE(reason.find("needs bytes up to "), std::string::npos) << reason;
      EXPECT_NE(reason.find(", the file has " + std::to_string(cut.length)), std::string::npos) << reason;
    }
  }
}

TEST(ElfCheck, TheWholePluginPassesAndLoads) {
  TempDir dir;
  dir.write_file("libbackplane_cpu.so", real_plugin());
  Host host = make_host({dir.path().string()}, R"({"cpu": {"devices": 2}})");
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  EXPECT_TRUE(all_reduce_works(host, "cpu", 2));
}

std::string patched(size_t offset, const void *value, size_t size) {
  std::string bytes = real_plugin();
  std::memcpy(bytes.data() + offset, value, size);
  return bytes;
}

TEST(ElfCheck, AnotherClassMachineOrTypeIsRefusedNamingIt) {
  const unsigned char class32 = ELFCLASS32;
  expect_refused(patched(EI_CLASS, &class32, 1), "a 32-bit ELF file, this host is 64-bit");
  const unsigned char big_endian = ELFDATA2MSB;
  expect_refused(patched(EI_DATA, &big_endian, 1), "an ELF file of the other byte order");
  const uint16_t aarch64 = EM_AARCH64;
  expect_refused(patched(offsetof(Elf64_Ehdr, e_machine), &aarch64, 2), "built for aarch64, this host is x86_64");
  const uint16_t riscv = EM_RISCV;
  expect_refused(patched(offsetof(Elf64_Ehdr, e_machine), &riscv, 2), "built for riscv, this host is x86_64");
  const uint16_t executable = ET_EXEC;
  expect_refused(patched(offsetof(Elf64_Ehdr, e_type), &executable, 2), "not a shared object: it is an executable");
  const uint16_t object = ET_REL;
  expect_refused(patched(offsetof(Elf64_Ehdr, e_type), &object, 2),
                 "not a shared object: it is a relocatable object file");
  const uint16_t entry_size = 32;
  expect_refused(patched(offsetof(Elf64_Ehdr, e_phentsize), &entry_size, 2), "program header entries are 32 bytes");
  const uint16_t many = 60000;
  expect_refused(patched(offsetof(Elf64_Ehdr, e_phnum), &many, 2), "60000 program headers, more than the 1024");
  const uint64_t far = uint64_t{1} << 62;
  expect_refused(patched(offsetof(Elf64_Ehdr, e_phoff), &far, 8), "truncated: the program headers need bytes");
}

TEST(ElfCheck, NoDynamicSegmentIsRefused) {
  std::string bytes = real_plugin();
  const Elf64_Ehdr header = header_of(bytes);
  for (size_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    const size_t at = header.e_phoff + i * sizeof segment;
    std::memcpy(&segment, bytes.data() + at, sizeof segment);
    if (segment.p_type == PT_DYNAMIC) segment.p_type = PT_NOTE;
    std::memcpy(bytes.data() + at, &segment, sizeof segment);
  }
  expect_refused(bytes, "no dynamic section");
}

TEST(ElfCheck, ATextFileNamedLikeAPluginIsNotAnElfFile) {
  expect_refused("this is not a plugin\n", "not an ELF file");
}

}  // namespace
