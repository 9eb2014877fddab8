// Guards both stable ABIs: released struct layouts, enum values, flag bits
// and the stable names, frozen as literal numbers and strings, and the
// library's symbol versions. The headers' stand-alone C99/C++ compiles are
// in tests/abi/ (they fail the build), and so are the abidiff guard and the
// load-time test of the symbol versions (ctest label abi).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "abi/frozen_layout.h"
#include "backplane/backplane.h"
#include "backplane/plugin.h"

namespace {

#if defined(__x86_64__) && defined(__LP64__)
#define BP_ABI_FROZEN_LAYOUT_APPLIES 1
#define CHECK_SIZE_V1_0(macro, bytes) static_assert((macro) == (bytes), #macro " changed");
#define CHECK_SIZEOF(type, bytes) static_assert(sizeof(type) == (bytes), "sizeof(" #type ") changed");
#define CHECK_FIELD(type, field, byte) \
  static_assert(offsetof(type, field) == (byte), "offsetof(" #type ", " #field ") changed");
BP_FROZEN_LAYOUT(CHECK_SIZE_V1_0, CHECK_SIZEOF, CHECK_FIELD)
#undef CHECK_SIZE_V1_0
#undef CHECK_SIZEOF
#undef CHECK_FIELD
#else
#define BP_ABI_FROZEN_LAYOUT_APPLIES 0
#endif

// The same list as the C++ compiler measures it, to compare with C's.
#define ENTRY_SIZE_V1_0(macro, bytes) {#macro, (macro), (bytes)},
#define ENTRY_SIZEOF(type, bytes) {"sizeof(" #type ")", sizeof(type), (bytes)},
#define ENTRY_FIELD(type, field, byte) {"offsetof(" #type ", " #field ")", offsetof(type, field), (byte)},
const bp_frozen_entry kFromCxx[] = {BP_FROZEN_LAYOUT(ENTRY_SIZE_V1_0, ENTRY_SIZEOF, ENTRY_FIELD)};
#undef ENTRY_SIZE_V1_0
#undef ENTRY_SIZEOF
#undef ENTRY_FIELD

TEST(AbiTest, ReleasedLayoutsAreFrozenInC) {
  if (!BP_ABI_FROZEN_LAYOUT_APPLIES) GTEST_SKIP() << "layouts are frozen for x86-64 only";
  ASSERT_EQ(bp_frozen_layout_from_c_count, sizeof kFromCxx / sizeof kFromCxx[0]);
  for (size_t i = 0; i < bp_frozen_layout_from_c_count; ++i) {
    const bp_frozen_entry &entry = bp_frozen_layout_from_c[i];
    EXPECT_EQ(entry.measured, entry.frozen) << entry.what << " as compiled by the C compiler";
  }
}

TEST(AbiTest, CAndCxxCompilersAgreeOnEveryLayout) {
  ASSERT_EQ(bp_frozen_layout_from_c_count, sizeof kFromCxx / sizeof kFromCxx[0]);
  for (size_t i = 0; i < bp_frozen_layout_from_c_count; ++i) {
    EXPECT_STREQ(bp_frozen_layout_from_c[i].what, kFromCxx[i].what);
    EXPECT_EQ(bp_frozen_layout_from_c[i].measured, kFromCxx[i].measured) << kFromCxx[i].what;
  }
}

// First-release sizes are what a reader accepts at minimum: never more than
// the struct itself, and never less than its struct_size and next fields.
TEST(AbiTest, FirstReleaseSizesFitTheirStructs) {
  struct Pair {
    const char *what;
    size_t first_release, current;
  };
  const Pair pairs[] = {
      {"bp_host_services", BP_HOST_SERVICES_SIZE_V1_0, sizeof(bp_host_services)},
      {"bp_capability", BP_CAPABILITY_SIZE_V1_0, sizeof(bp_capability)},
      {"bp_plugin_device_info", BP_PLUGIN_DEVICE_INFO_SIZE_V1_0, sizeof(bp_plugin_device_info)},
      {"bp_collective_args", BP_COLLECTIVE_ARGS_SIZE_V1_0, sizeof(bp_collective_args)},
      {"bp_plugin_functions", BP_PLUGIN_FUNCTIONS_SIZE_V1_0, sizeof(bp_plugin_functions)},
      {"bp_plugin_descriptor", BP_PLUGIN_DESCRIPTOR_SIZE_V1_0, sizeof(bp_plugin_descriptor)},
      {"bp_plugin_entry_args", BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0, sizeof(bp_plugin_entry_args)},
      {"bp_host_options", BP_HOST_OPTIONS_SIZE_V1_0, sizeof(bp_host_options)},
      {"bp_plugin_info", BP_PLUGIN_INFO_SIZE_V1_0, sizeof(bp_plugin_info)},
      {"bp_device_info", BP_DEVICE_INFO_SIZE_V1_0, sizeof(bp_device_info)},
      {"bp_capability_info", BP_CAPABILITY_INFO_SIZE_V1_0, sizeof(bp_capability_info)},
      {"bp_group_options", BP_GROUP_OPTIONS_SIZE_V1_0, sizeof(bp_group_options)},
      {"bp_collective_request", BP_COLLECTIVE_REQUEST_SIZE_V1_0, sizeof(bp_collective_request)},
      {"bp_workload_info", BP_WORKLOAD_INFO_SIZE_V1_0, sizeof(bp_workload_info)},
      {"bp_plugin_kind_info", BP_PLUGIN_KIND_INFO_SIZE_V1_1, sizeof(bp_plugin_kind_info)},
      {"bp_plugin_comm_info", BP_PLUGIN_COMM_INFO_SIZE_V1_1, sizeof(bp_plugin_comm_info)},
      {"bp_extension_header", BP_EXTENSION_HEADER_SIZE_V1_2, sizeof(bp_extension_header)},
  };
  for (const Pair &pair : pairs) {
    EXPECT_LE(pair.first_release, pair.current) << pair.what;
    EXPECT_GE(pair.first_release, 2 * sizeof(void *)) << pair.what;
  }
}

// A struct only grows: each minor's size reaches past the one before, and
// the newest fits the struct.
TEST(AbiTest, EachMinorsSizeGrowsTheStruct) {
  struct Sizes {
    const char *what;
    size_t older, newer, current;
  };
  const Sizes rows[] = {
      {"bp_plugin_device_info 1.0 < 1.1", BP_PLUGIN_DEVICE_INFO_SIZE_V1_0, BP_PLUGIN_DEVICE_INFO_SIZE_V1_1,
       sizeof(bp_plugin_device_info)},
      {"bp_plugin_functions 1.0 < 1.1", BP_PLUGIN_FUNCTIONS_SIZE_V1_0, BP_PLUGIN_FUNCTIONS_SIZE_V1_1,
       sizeof(bp_plugin_functions)},
      {"bp_plugin_info 1.0 < 1.1", BP_PLUGIN_INFO_SIZE_V1_0, BP_PLUGIN_INFO_SIZE_V1_1, sizeof(bp_plugin_info)},
      {"bp_device_info 1.0 < 1.1", BP_DEVICE_INFO_SIZE_V1_0, BP_DEVICE_INFO_SIZE_V1_1, sizeof(bp_device_info)},
      {"bp_capability 1.0 < 1.2", BP_CAPABILITY_SIZE_V1_0, BP_CAPABILITY_SIZE_V1_2, sizeof(bp_capability)},
      {"bp_collective_args 1.0 < 1.2", BP_COLLECTIVE_ARGS_SIZE_V1_0, BP_COLLECTIVE_ARGS_SIZE_V1_2,
       sizeof(bp_collective_args)},
      {"bp_plugin_entry_args 1.0 < 1.2", BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0, BP_PLUGIN_ENTRY_ARGS_SIZE_V1_2,
       sizeof(bp_plugin_entry_args)},
      {"bp_capability_info 1.0 < 1.2", BP_CAPABILITY_INFO_SIZE_V1_0, BP_CAPABILITY_INFO_SIZE_V1_2,
       sizeof(bp_capability_info)},
  };
  for (const Sizes &row : rows) {
    EXPECT_LT(row.older, row.newer) << row.what;
    EXPECT_LE(row.newer, row.current) << row.what;
  }
}

TEST(AbiTest, VersionsAndEntrySymbol) {
  static_assert(BP_PLUGIN_ABI_MAJOR == 1, "plugin ABI major changed: every plugin breaks");
  static_assert(BP_API_VERSION_MAJOR == 1, "application API major changed: every application breaks");
  static_assert(BP_PLUGIN_ABI_MINOR >= 2 && BP_API_VERSION_MINOR >= 2, "a minor never goes back");
  EXPECT_STREQ(BP_PLUGIN_ENTRY_SYMBOL, "bp_plugin_entry");
}

// bp_api_version (1.2) is the library's version in one number: the header's
// own, since this test runs against the library of its own tree.
TEST(AbiTest, ApiVersionIsTheHeadersVersion) {
  static_assert(BP_MAKE_API_VERSION(1, 2) == 0x00010002u, "the version number's encoding is frozen");
  static_assert(BP_API_VERSION_MAJOR_OF(0x00010002u) == 1 && BP_API_VERSION_MINOR_OF(0x00010002u) == 2,
                "the version number's encoding is frozen");
  const uint32_t version = bp_api_version();
  EXPECT_EQ(version, BP_MAKE_API_VERSION(BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR));
  EXPECT_EQ(BP_API_VERSION_MAJOR_OF(version), static_cast<uint32_t>(BP_API_VERSION_MAJOR));
  EXPECT_EQ(BP_API_VERSION_MINOR_OF(version), static_cast<uint32_t>(BP_API_VERSION_MINOR));
}

// Each function carries the symbol version of the minor that added it
// (host/libbackplane.map); tests/abi/symbol_versions_test.sh checks every
// name, and that an application needing a newer minor fails at load.
TEST(AbiTest, FunctionsCarryTheVersionOfTheirMinor) {
  struct Row {
    const char *function, *version, *older_version;  // older_version: must not have it
  };
  const Row rows[] = {{"bp_host_create", "BACKPLANE_1.0", nullptr},
                      {"bp_group_route", "BACKPLANE_1.1", "BACKPLANE_1.0"},
                      {"bp_api_version", "BACKPLANE_1.2", "BACKPLANE_1.1"}};
  for (const Row &row : rows) {
    void *symbol = dlvsym(RTLD_DEFAULT, row.function, row.version);
    ASSERT_NE(symbol, nullptr) << row.function << "@" << row.version << ": " << dlerror();
    Dl_info info{};
    ASSERT_NE(dladdr(symbol, &info), 0) << row.function;
    ASSERT_NE(info.dli_fname, nullptr) << row.function;
    EXPECT_NE(std::strstr(info.dli_fname, "libbackplane.so"), nullptr)
        << row.function << " resolved in " << info.dli_fname;
    if (row.older_version) {
      EXPECT_EQ(dlvsym(RTLD_DEFAULT, row.function, row.older_version), nullptr)
          << row.function << " must not be in " << row.older_version;
    }
  }
  EXPECT_EQ(dlvsym(RTLD_DEFAULT, "bp_host_create", "BACKPLANE_0.9"), nullptr);
}

// The values 1.2 added, frozen like those of 1.0.
TEST(AbiTest, ValuesAddedIn12AreFrozen) {
  static_assert(BP_COLLECTIVE_CALLER_WAITS == 0x1u, "bp_collective_args.flags bits are frozen");
  static_assert(BP_EXTENSION_NONE == 0u, "extension type ids are never reused");
  static_assert(BP_EXTENSION_CHAIN_MAX == 64, "the chain bound is part of the contract");
  static_assert(BP_OUT_STRUCT_SIZE_MAX == 4096u, "the out-struct bound is part of the contract");
  SUCCEED();
}

TEST(AbiTest, EnumValuesAreFrozen) {
  static_assert(BP_OK == 0 && BP_INVALID_ARGUMENT == 1 && BP_UNSUPPORTED_DEVICE == 2 &&
                BP_UNSUPPORTED_COLLECTIVE == 3 && BP_UNSUPPORTED_DTYPE == 4 &&
                BP_UNSUPPORTED_REDUCE_OP == 5 && BP_MIXED_DEVICE_KINDS == 6 && BP_NESTED_LAYER == 7 &&
                BP_PLUGIN_NOT_FOUND == 8 && BP_PLUGIN_LOAD == 9 && BP_PLUGIN_ABI == 10 &&
                BP_PLUGIN_INIT == 11 && BP_PLUGIN_CONFLICT == 12 && BP_CONFIG == 13 &&
                BP_DEVICE_FAILURE == 14 && BP_OUT_OF_MEMORY == 15 && BP_TIMEOUT == 16 &&
                BP_INTERNAL == 17 && BP_CODE_COUNT == 18,
                "bp_code values are frozen");
  static_assert(BP_F16 == 0 && BP_BF16 == 1 && BP_F32 == 2 && BP_F64 == 3 && BP_I8 == 4 &&
                BP_U8 == 5 && BP_I32 == 6 && BP_U32 == 7 && BP_I64 == 8 && BP_U64 == 9 &&
                BP_DTYPE_COUNT == 10,
                "bp_dtype values are frozen");
  static_assert(BP_SUM == 0 && BP_PROD == 1 && BP_MIN == 2 && BP_MAX == 3 && BP_AVG == 4 &&
                BP_REDUCE_OP_COUNT == 5,
                "bp_reduce_op values are frozen");
  static_assert(BP_ALL_REDUCE == 0 && BP_REDUCE == 1 && BP_BROADCAST == 2 && BP_ALL_GATHER == 3 &&
                BP_REDUCE_SCATTER == 4 && BP_GATHER == 5 && BP_SCATTER == 6 && BP_ALL_TO_ALL == 7 &&
                BP_BARRIER == 8 && BP_COLLECTIVE_COUNT == 9,
                "bp_collective values are frozen");
  static_assert(BP_LOG_ERROR == 0 && BP_LOG_WARN == 1 && BP_LOG_INFO == 2 && BP_LOG_DEBUG == 3,
                "bp_log_level values are frozen");
  static_assert(BP_POLICY_STAGE == 0 && BP_POLICY_REJECT == 1, "bp_group_policy values are frozen");
  static_assert(BP_CAPABILITY_IN_PLACE == 0x1u && BP_CAPABILITY_OUT_OF_PLACE == 0x2u,
                "capability flags are frozen");
  static_assert(BP_DEVICE_HOST_ADDRESSABLE == 0x1u, "device flags are frozen");
  static_assert(BP_HOST_IGNORE_ENV_PATH == 0x1u && BP_HOST_IGNORE_INSTALL_PATH == 0x2u,
                "host flags are frozen");
  SUCCEED();
}

// The names are part of the ABI too: JSON errors, the CLI and fleet files use them.
TEST(AbiTest, CodeNamesAreStable) {
  const char *const names[BP_CODE_COUNT] = {
      "OK",                 "INVALID_ARGUMENT", "UNSUPPORTED_DEVICE", "UNSUPPORTED_COLLECTIVE",
      "UNSUPPORTED_DTYPE",  "UNSUPPORTED_REDUCE_OP", "MIXED_DEVICE_KINDS", "NESTED_LAYER",
      "PLUGIN_NOT_FOUND",   "PLUGIN_LOAD",      "PLUGIN_ABI",         "PLUGIN_INIT",
      "PLUGIN_CONFLICT",    "CONFIG",           "DEVICE_FAILURE",     "OUT_OF_MEMORY",
      "TIMEOUT",            "INTERNAL"};
  for (int code = 0; code < BP_CODE_COUNT; ++code) {
    const char *name = bp_code_name(static_cast<bp_code>(code));
    ASSERT_NE(name, nullptr) << "code " << code;
    EXPECT_STREQ(name, names[code]) << "code " << code;
  }
}

TEST(AbiTest, DtypeNamesAndSizesAreStable) {
  struct Row {
    bp_dtype dtype;
    const char *name;
    size_t size;
  };
  const Row rows[] = {{BP_F16, "f16", 2}, {BP_BF16, "bf16", 2}, {BP_F32, "f32", 4}, {BP_F64, "f64", 8},
                      {BP_I8, "i8", 1},   {BP_U8, "u8", 1},     {BP_I32, "i32", 4}, {BP_U32, "u32", 4},
                      {BP_I64, "i64", 8}, {BP_U64, "u64", 8}};
  for (const Row &row : rows) {
    ASSERT_NE(bp_dtype_name(row.dtype), nullptr) << row.name;
    EXPECT_STREQ(bp_dtype_name(row.dtype), row.name);
    EXPECT_EQ(bp_dtype_size(row.dtype), row.size) << row.name;
    bp_dtype parsed = BP_U64;
    EXPECT_TRUE(bp_dtype_from_name(row.name, &parsed)) << row.name;
    EXPECT_EQ(parsed, row.dtype) << row.name;
  }
  EXPECT_EQ(bp_dtype_size(static_cast<bp_dtype>(BP_DTYPE_COUNT)), 0u);
  EXPECT_EQ(bp_dtype_size(static_cast<bp_dtype>(99)), 0u);
  bp_dtype untouched = BP_I8;
  EXPECT_FALSE(bp_dtype_from_name("f33", &untouched));
  EXPECT_FALSE(bp_dtype_from_name("", &untouched));
  EXPECT_EQ(untouched, BP_I8);
}

TEST(AbiTest, ReduceOpNamesAreStable) {
  const char *const names[BP_REDUCE_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};
  for (int op = 0; op < BP_REDUCE_OP_COUNT; ++op) {
    ASSERT_NE(bp_reduce_op_name(static_cast<bp_reduce_op>(op)), nullptr) << op;
    EXPECT_STREQ(bp_reduce_op_name(static_cast<bp_reduce_op>(op)), names[op]);
    bp_reduce_op parsed = BP_AVG;
    EXPECT_TRUE(bp_reduce_op_from_name(names[op], &parsed)) << names[op];
    EXPECT_EQ(parsed, static_cast<bp_reduce_op>(op));
  }
  bp_reduce_op untouched = BP_MIN;
  EXPECT_FALSE(bp_reduce_op_from_name("mean", &untouched));
  EXPECT_EQ(untouched, BP_MIN);
}

TEST(AbiTest, CollectiveNamesAreStable) {
  const char *const names[BP_COLLECTIVE_COUNT] = {"all_reduce", "reduce",  "broadcast",
                                                  "all_gather", "reduce_scatter", "gather",
                                                  "scatter",    "all_to_all", "barrier"};
  for (int collective = 0; collective < BP_COLLECTIVE_COUNT; ++collective) {
    const char *name = bp_collective_name(static_cast<bp_collective>(collective));
    ASSERT_NE(name, nullptr) << collective;
    EXPECT_STREQ(name, names[collective]);
    bp_collective parsed = BP_BARRIER;
    EXPECT_TRUE(bp_collective_from_name(names[collective], &parsed)) << names[collective];
    EXPECT_EQ(parsed, static_cast<bp_collective>(collective));
  }
  bp_collective untouched = BP_GATHER;
  EXPECT_FALSE(bp_collective_from_name("allreduce", &untouched));
  EXPECT_EQ(untouched, BP_GATHER);
}

// An application built against 1.0 sends its structs at their 1.0 size.
TEST(AbiTest, HostAcceptsFirstReleaseOptionsSize) {
  bp_host_options options;
  std::memset(&options, 0, sizeof options);
  options.struct_size = BP_HOST_OPTIONS_SIZE_V1_0;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  bp_host *host = nullptr;
  bp_error *error = bp_host_create(&options, &host);
  EXPECT_EQ(error, nullptr) << (error ? bp_error_json(error) : "");
  if (error) bp_error_destroy(error);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(bp_host_plugin_count(host), 0u);
  EXPECT_EQ(bp_host_refused_count(host), 0u);
  bp_host_destroy(host);
}

}  // namespace
