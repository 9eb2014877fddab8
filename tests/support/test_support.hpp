// Shared test helpers: temporary plugin directories and hosts that see only
// the plugins a test puts in front of them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"
#include "test_paths.h"

namespace backplane::testing {

// A fresh directory under the system temp dir, removed with everything in
// it when the object goes out of scope. Created with mode 0755.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::filesystem::path &path() const { return path_; }
  // Copies `file` in (as `name` when given) and returns the new path.
  std::filesystem::path copy_in(const std::filesystem::path &file, const std::string &name = "") const;
  // Writes `bytes` to a new file called `name`.
  std::filesystem::path write_file(const std::string &name, const std::string &bytes) const;

 private:
  std::filesystem::path path_;
};

// The path of a built plugin of this repository, e.g. plugin_path("cpu").
std::filesystem::path plugin_path(const std::string &name);
// The path of a fixture plugin, e.g. fixture_path("good").
std::filesystem::path fixture_path(const std::string &name);

// A host that searches `dirs` only (no BACKPLANE_PLUGIN_PATH, no install
// directory), with optional per-kind plugin options. Fails the test if the
// host cannot be created.
Host make_host(const std::vector<std::string> &dirs, const std::string &plugin_options_json = "");

// A host over the repository's own built plugins only.
Host make_builtin_host(const std::string &plugin_options_json = "");

}  // namespace backplane::testing
