// Shared test helpers; see test_support.hpp.
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <system_error>

namespace backplane::testing {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "backplane-test-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
  path_ = pattern;
  ::chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::filesystem::path TempDir::copy_in(const std::filesystem::path &file, const std::string &name) const {
  std::filesystem::path target = path_ / (name.empty() ? file.filename().string() : name);
  std::filesystem::copy_file(file, target, std::filesystem::copy_options::overwrite_existing);
  ::chmod(target.c_str(), 0755);
  return target;
}

std::filesystem::path TempDir::write_file(const std::string &name, const std::string &bytes) const {
  std::filesystem::path target = path_ / name;
  std::ofstream(target, std::ios::binary) << bytes;
  ::chmod(target.c_str(), 0644);
  return target;
}

std::filesystem::path plugin_path(const std::string &name) {
  return std::filesystem::path(BACKPLANE_TEST_PLUGIN_DIR) / ("libbackplane_" + name + ".so");
}

std::filesystem::path fixture_path(const std::string &name) {
  return std::filesystem::path(BACKPLANE_TEST_FIXTURE_DIR) / ("libbackplane_" + name + ".so");
}

Host make_host(const std::vector<std::string> &dirs, const std::string &plugin_options_json) {
  HostOptions options;
  options.plugin_dirs = dirs;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  options.plugin_options_json = plugin_options_json;
  Result<Host> host = Host::create(options);
  if (!host) {
    ADD_FAILURE() << "bp_host_create failed: " << host.error().json();
    throw Exception(host.error());
  }
  return std::move(host).value();
}

Host make_builtin_host(const std::string &plugin_options_json) {
  return make_host({BACKPLANE_TEST_PLUGIN_DIR}, plugin_options_json);
}

}  // namespace backplane::testing
