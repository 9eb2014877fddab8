// The in-tree plugins' configure() called through the plugin ABI itself
// (dlopen, bp_plugin_entry, the function table), as any host may call it:
// text that is not JSON, a key named twice, a value of the wrong type or
// out of range, and an unknown key are each BP_CONFIG with a message
// saying what was wrong, and the plugin keeps the configuration it had.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "backplane/plugin.h"
#include "test_support.hpp"

namespace backplane::testing {
namespace {

// What the plugin reported through the host's error service.
struct Reported {
  int32_t code = BP_OK;
  std::string message;
};

void report_error(bp_error_sink *sink, int32_t code, const char *message) {
  auto *reported = reinterpret_cast<Reported *>(sink);
  reported->code = code;
  reported->message = message;
}

void ignore_log(void *, int32_t, const char *, const char *) {}

const bp_host_services kServices = {sizeof(bp_host_services), nullptr, report_error, ignore_log, nullptr, nullptr, nullptr, nullptr};

// One plugin file, loaded and entered as a host would, and destroyed after.
class LoadedPlugin {
 public:
  explicit LoadedPlugin(const std::filesystem::path &file) {
    handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      ADD_FAILURE() << "dlopen " << file << ": " << dlerror();
      return;
    }
    const auto entry = reinterpret_cast<bp_plugin_entry_fn>(dlsym(handle_, BP_PLUGIN_ENTRY_SYMBOL));
    if (entry == nullptr) {
      ADD_FAILURE() << file << " exports no " << BP_PLUGIN_ENTRY_SYMBOL;
      return;
    }
    Reported refusal;
    args_.struct_size = sizeof args_;
    args_.host_abi_major = BP_PLUGIN_ABI_MAJOR;
    args_.host_abi_minor = BP_PLUGIN_ABI_MINOR;
    args_.services = &kServices;
    args_.sink = reinterpret_cast<bp_error_sink *>(&refusal);
    if (entry(&args_) != BP_OK) ADD_FAILURE() << file << " refused to load: " << refusal.message;
  }
  ~LoadedPlugin() {
    if (args_.state != nullptr) functions().destroy(args_.state);
    if (handle_ != nullptr) dlclose(handle_);
  }
  LoadedPlugin(const LoadedPlugin &) = delete;
  LoadedPlugin &operator=(const LoadedPlugin &) = delete;

  bool loaded() const { return args_.state != nullptr; }
  const bp_plugin_functions &functions() const { return *args_.descriptor->functions; }

  Reported configure(const std::string &options) {
    Reported reported;
    reported.code =
        functions().configure(args_.state, 0, options.c_str(), reinterpret_cast<bp_error_sink *>(&reported));
    return reported;
  }
  uint32_t device_count() {
    uint32_t count = 0;
    Reported reported;
    EXPECT_EQ(functions().device_count(args_.state, 0, &count, reinterpret_cast<bp_error_sink *>(&reported)), BP_OK)
        << reported.message;
    return count;
  }

 private:
  void *handle_ = nullptr;
  bp_plugin_entry_args args_{};
};

struct BadOptions {
  const char *text;
  const char *says;  // part of the message, after "<plugin> options: "
};

// Each of `cases` is refused with BP_CONFIG and its message; the device
// count stays what `good` gave.
void expect_refused(const char *plugin, const std::string &good, const std::vector<BadOptions> &cases) {
  const std::filesystem::path file = plugin_path(plugin);
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "the " << plugin << " plugin is not built here";
  LoadedPlugin loaded(file);
  ASSERT_TRUE(loaded.loaded());
  const Reported configured = loaded.configure(good);
  ASSERT_EQ(configured.code, BP_OK) << configured.message;
  const uint32_t devices = loaded.device_count();
  for (const BadOptions &bad : cases) {
    SCOPED_TRACE(bad.text);
    const Reported refused = loaded.configure(bad.text);
    EXPECT_EQ(refused.code, BP_CONFIG) << refused.message;
    EXPECT_NE(refused.message.find(std::string(plugin) + " options: " + bad.says), std::string::npos)
        << refused.message;
    EXPECT_EQ(loaded.device_count(), devices);
  }
}

TEST(PluginOptions, CpuRefusesEachKindOfBadOptionsAndKeepsItsConfiguration) {
  expect_refused("cpu", R"({"devices": 3, "threads": 1})",
                 {
                     {R"({"devices": 4)", "parse error at line 1, column 14"},
                     {"not json", "parse error at line 1, column 2"},
                     {"[4]", "expected a JSON object, got an array"},
                     {R"({"devices": 2, "devices": 3})", "key \"devices\" appears twice"},
                     {R"({"device": 4})",
                      "unknown key \"device\" (known keys: devices, threads, parallel_threshold_bytes, "
                      "streaming_threshold_bytes, async_threshold_bytes)"},
                     {R"({"devices": "4"})", "\"devices\" must be an integer, got a string"},
                     {R"({"threads": 2.5})", "\"threads\" must be an integer, got 2.5"},
                     {R"({"threads": null})", "\"threads\" must be an integer, got null"},
                     {R"({"devices": 0})", "\"devices\" is 0, outside 1..1024"},
                     {R"({"devices": -1})", "\"devices\" is -1, outside 1..1024"},
                     {R"({"devices": 1025})", "\"devices\" is 1025, outside 1..1024"},
                     {R"({"parallel_threshold_bytes": [1]})",
                      "\"parallel_threshold_bytes\" must be an integer, got an array"},
                 });
}

TEST(PluginOptions, OpenclRefusesEachKindOfBadOptionsAndKeepsItsConfiguration) {
  expect_refused("opencl", R"({"platform": "No Such Platform"})",
                 {
                     {R"({"platform": "x")", "parse error at line 1, column 17"},
                     {R"("cpu")", "expected a JSON object, got a string"},
                     {R"({"platform": "a", "platform": "b"})", "key \"platform\" appears twice"},
                     {R"({"platfrom": "PoCL"})", "unknown key \"platfrom\" (known keys: platform, device_type, "
                                                 "build_options)"},
                     {R"({"platform": 3})", "\"platform\" must be a string, got a number"},
                     {R"({"build_options": {"x": 1}})", "\"build_options\" must be a string, got an object"},
                     {R"({"device_type": "fpga"})",
                      "\"device_type\" is \"fpga\", not one of \"all\", \"cpu\", \"gpu\", \"accelerator\""},
                     {R"({"device_type": "g\npu"})", "\"device_type\" is \"g\\npu\", not one of"},
                     {R"({"build_options": "-DX\u0000-DY"})",
                      "\"build_options\" must be at most 1024 bytes without NUL characters"},
                 });
}

}  // namespace
}  // namespace backplane::testing
