// Shared test helpers; see test_support.hpp.
#include "test_support.hpp"

#include <cctype>
#include <cstdlib>

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

extern char **environ;  // what the tool inherits, as it would from a shell

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

Host make_cpu_host(const std::string &plugin_options_json) {
  Host host = make_host({}, plugin_options_json);
  if (Status loaded = host.load_plugin(plugin_path("cpu").string()); !loaded) {
    ADD_FAILURE() << "loading the cpu plugin failed: " << loaded.error().json();
    throw Exception(loaded.error());
  }
  return host;
}

std::string system_loader_reason(const std::filesystem::path &file) {
  void *handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle) {
    dlclose(handle);
    return "";
  }
  std::string message = dlerror();
  const std::string prefix = file.string() + ": ";
  if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  return message;
}

CommandResult run_cli(const std::vector<std::string> &args, StderrTo stderr_to) {
  CommandResult result;
  std::vector<std::string> words = {BACKPLANE_TEST_CLI};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &word : words) argv.push_back(word.data());
  argv.push_back(nullptr);

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return result;
  }
  // In order: stdout into the pipe, then stderr where asked.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  if (stderr_to == StderrTo::out) posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  if (stderr_to == StderrTo::discard)
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);  // the child holds its own copy; EOF comes when it exits
  if (spawned != 0) {
    ::close(out[0]);
    ADD_FAILURE() << "cannot run " << argv[0] << ": " << std::strerror(spawned);
    return result;
  }

  char chunk[4096];
  for (;;) {
    const ssize_t got = ::read(out[0], chunk, sizeof chunk);
    if (got > 0) {
      result.out.append(chunk, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      if (got < 0) ADD_FAILURE() << "reading the output of " << argv[0] << ": " << std::strerror(errno);
      break;
    }
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      ADD_FAILURE() << "waitpid: " << std::strerror(errno);
      return result;
    }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

nlohmann::json parse_output(const CommandResult &ran) {
  nlohmann::json parsed = nlohmann::json::parse(ran.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(parsed.is_discarded()) << "not JSON:\n" << ran.out;
  return parsed;
}

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::filesystem::path> regular_files_in(const std::filesystem::path &directory) {
  std::vector<std::filesystem::path> files;
  for (const auto &entry : std::filesystem::directory_iterator(directory)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> words_of(const std::string &line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

ScopedEnvironment::ScopedEnvironment(const char *name, std::optional<std::string> value) : name_(name) {
  if (const char *old = std::getenv(name)) old_ = old;
  if (value)
    ::setenv(name, value->c_str(), 1);
  else
    ::unsetenv(name);
}

ScopedEnvironment::~ScopedEnvironment() {
  if (old_)
    ::setenv(name_, old_->c_str(), 1);
  else
    ::unsetenv(name_);
}

CapturedLog::CapturedLog(const char *spec) {
  bp_log_set_sink(&CapturedLog::sink, this);
  if (spec) {
    EXPECT_TRUE(bp_log_configure(spec)) << spec;
  }
}

CapturedLog::~CapturedLog() {
  bp_log_set_sink(nullptr, nullptr);
  bp_log_configure("warn");
}

std::vector<LogLine> CapturedLog::lines() const {
  std::lock_guard lock(mutex_);
  return lines_;
}

void CapturedLog::clear() {
  std::lock_guard lock(mutex_);
  lines_.clear();
}

std::vector<LogLine> CapturedLog::mentioning(const std::string &part) const {
  std::vector<LogLine> found;
  for (const LogLine &line : lines())
    if (line.message.find(part) != std::string::npos) found.push_back(line);
  return found;
}

std::string CapturedLog::all() const {
  std::string text;
  for (const LogLine &line : lines())
    text += "\n  [" + std::to_string(line.level) + " " + line.category + "] " + line.message;
  return text.empty() ? " (nothing logged)" : text;
}

void CapturedLog::sink(void *context, int32_t level, const char *category, const char *message) {
  auto *self = static_cast<CapturedLog *>(context);
  std::lock_guard lock(self->mutex_);
  self->lines_.push_back({level, category ? category : "(null)", message ? message : "(null)"});
}

void run_in_child(const std::string &test, const std::vector<std::string> &extra) {
  std::vector<std::string> environment;
  for (char **entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  environment.insert(environment.end(), extra.begin(), extra.end());
  std::vector<char *> envp;
  for (std::string &entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=" + test;
  char *argv[] = {self.data(), filter.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << test << " failed in the child; its failures are in its output above";
}

bool kind_required(const std::string &kind) {
  std::string variable = "BACKPLANE_REQUIRE_" + kind;
  for (char &c : variable) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const char *value = std::getenv(variable.c_str());
  return value && std::string(value) == "1";
}

std::vector<Device> devices_of_kind(const Host &host, const std::string &kind) {
  std::vector<Device> devices;
  for (const Device &device : host.devices()) {
    Result<DeviceInfo> info = device.info();
    if (info && info->kind == kind) devices.push_back(device);
  }
  return devices;
}

const PluginInfo *find_plugin(const std::vector<PluginInfo> &plugins, const std::string &name) {
  for (const PluginInfo &plugin : plugins)
    if (plugin.name == name) return &plugin;
  return nullptr;
}

std::string plugin_kind_status(const Host &host, const std::string &name) {
  const std::vector<PluginInfo> plugins = host.plugins();
  const PluginInfo *plugin = find_plugin(plugins, name);
  if (plugin == nullptr) return "the " + name + " plugin is not loaded";
  return plugin->kind_status.empty() ? "" : plugin->kind_status[0];
}

std::string property(const DeviceInfo &info, const std::string &key) {
  for (const auto &[name, value] : info.properties)
    if (name == key) return value;
  return "<missing>";
}

}  // namespace backplane::testing
