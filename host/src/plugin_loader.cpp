// Finding plugin files, loading them with Boost.DLL, negotiating the ABI,
// validating what they declare and registering their kinds, devices and
// capability rows. Every way this can fail becomes a refusal that is both
// returned and kept in the host's list; the host goes on with the others.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <system_error>
#include <utility>

#include "elf_header_check.hpp"
#include "extensions.hpp"
#include "file_digest.hpp"
#include "host.hpp"
#include "layers.hpp"
#include "log.hpp"
#include "names.hpp"
#include "text.hpp"

namespace backplane {
namespace fs = std::filesystem;

namespace {

void report_error(bp_error_sink *sink, int32_t code, const char *message) {
  if (!sink) return;
  try {
    sink->code = code;
    sink->message = message ? message : "";
  } catch (...) {
    // Out of memory while keeping the message: the code alone still travels.
  }
}

void plugin_log(void *, int32_t level, const char *category, const char *message) {
  try {
    log(static_cast<bp_log_level>(std::clamp<int32_t>(level, BP_LOG_ERROR, BP_LOG_DEBUG)),
        category ? category : "plugin", message ? message : "");
  } catch (...) {
  }
}

std::string abi_text(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

bool is_identifier(const char *text) {
  if (!text || !*text) return false;
  for (const char *c = text; *c; ++c) {
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) return false;
  }
  return true;
}

// glibc serialises dlopen and dlclose with a lock ThreadSanitizer cannot
// see; taking our own around both makes the order visible to it (loading
// is rare, so this costs nothing that matters).
std::mutex &dynamic_loader_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Boost.DLL wraps dlerror()'s text as "boost::dll::shared_library::load()
// failed (dlerror system message: TEXT): <errno text>"; users need TEXT
// ("invalid ELF header", "undefined symbol: ..."), and the trailing errno
// text is stale and misleading.
std::string system_loader_message(const std::string &what) {
  static constexpr std::string_view marker = "dlerror system message: ";
  const size_t start = what.find(marker);
  const size_t end = what.rfind("): ");
  if (start == std::string::npos || end == std::string::npos || end < start) return what;
  return what.substr(start + marker.size(), end - start - marker.size());
}

// Plugins run with the host's privileges, so a file or directory that
// someone else owns or can write is someone else's code: accepted only
// when owned by the effective user or root and writable by no one else.
Status check_trusted(const struct stat &status, const fs::path &path, const char *what) {
  const uid_t self = ::geteuid();
  if (status.st_uid != self && status.st_uid != 0) {
    return Error(BP_PLUGIN_LOAD, std::string("refusing ") + what + " '" + path.string() + "': it is owned by uid " +
                                     std::to_string(status.st_uid) + ", neither this process's user (uid " +
                                     std::to_string(self) + ") nor root")
        .with("owner_uid", std::to_string(status.st_uid))
        .hint("install plugins owned by root or by the user that runs the host");
  }
  if (status.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(status.st_mode & 07777));
    return Error(BP_PLUGIN_LOAD, std::string("refusing ") + what + " '" + path.string() +
                                     "': it is writable by users other than its owner (mode " +
                                     mode + ")")
        .with("mode", mode)
        .hint("remove group and other write permission: chmod go-w '" + path.string() + "'");
  }
  return {};
}

Status check_not_writable_by_others(const fs::path &path, const char *what) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) {
    return Error(BP_PLUGIN_LOAD, std::string("cannot read ") + what + " '" + path.string() +
                                     "': " + std::strerror(errno));
  }
  return check_trusted(status, path, what);
}

// Copies a struct the other side sent with `size` bytes into a zeroed one
// of ours: fields it did not send read as zero, fields we do not know are
// dropped.
template <typename T>
T read_struct(const void *source, size_t size) {
  T copy{};
  std::memcpy(&copy, source, std::min(size, sizeof(T)));
  copy.struct_size = sizeof(T);
  return copy;
}

Status plugin_init_error(const std::string &file, const std::string &reason) {
  return Error(BP_PLUGIN_INIT, "plugin '" + file + "' has a malformed descriptor: " + reason)
      .hint("fix the plugin's bp_plugin_descriptor; see plugin_api/include/backplane/plugin.h");
}

// Bounds on what a descriptor may declare, so that a corrupt or hostile
// plugin cannot make the loader read far outside its arrays or allocate
// without limit. Generous: the in-tree plugins use a tenth of each.
constexpr size_t kMaxCapabilityStride = 1024;  // bytes per row; 1.2's row is 48
constexpr size_t kMaxCapabilityRows = 4096;
constexpr size_t kMaxDeviceKinds = 64;
constexpr uint32_t kMaxDevicesPerKind = 4096;
constexpr size_t kMaxDeviceProperties = 256;
constexpr size_t kMaxNameBytes = 64;     // plugin and kind names
constexpr size_t kMaxTextBytes = kMaxPluginTextBytes;  // versions, descriptions, properties, statuses
// What one plugin's devices may add up to, all kinds together: the bounds
// per kind and per device alone would let 64 kinds of 4096 devices with 256
// properties each ask the host for a quarter of a terabyte.
constexpr size_t kMaxDevicesPerPlugin = 16384;
constexpr size_t kMaxDeviceTextBytesPerPlugin = size_t{16} << 20;  // names, descriptions, properties

// A string of the descriptor or of device information, bounded (a string
// without a NUL within the bound refuses the plugin instead of being read
// on) and made valid UTF-8 on one line for listings.
Status read_plugin_string(const std::string &file, const std::string &what, const char *text, size_t max_bytes,
                          std::string &out) {
  BoundedString bounded = read_bounded_string(text, max_bytes);
  if (bounded.too_long)
    return plugin_init_error(file, what + " is longer than the " + std::to_string(max_bytes) +
                                       " bytes a host accepts (or not NUL-terminated)");
  out = std::move(bounded.text);
  return {};
}

// What a host must ignore of rows written for a later minor (plugin.h,
// "Extending this ABI"): the rows whose collective it does not know, and
// the dtype, op and flag bits it does not know. Logged once per table.
struct IgnoredValues {
  std::vector<std::string> rows;  // "row 3 (collective 42)"
  uint32_t dtype_bits = 0, op_bits = 0, flag_bits = 0;

  bool empty() const { return rows.empty() && !dtype_bits && !op_bits && !flag_bits; }
  std::string describe() const {
    std::string text;
    auto add = [&](const std::string &part) { text += (text.empty() ? "" : "; ") + part; };
    auto hex = [](uint32_t bits) {
      char buffer[16];
      std::snprintf(buffer, sizeof buffer, "0x%x", bits);
      return std::string(buffer);
    };
    if (!rows.empty()) {
      std::string list;
      for (const std::string &row : rows) list += (list.empty() ? "" : ", ") + row;
      add("rows of unknown collectives: " + list);
    }
    if (dtype_bits) add("element type bits " + hex(dtype_bits));
    if (op_bits) add("reduce op bits " + hex(op_bits));
    if (flag_bits) add("flag bits " + hex(flag_bits));
    return text;
  }
};

// Reads capability rows (strided by the first row's struct_size) into one
// set per kind. Malformed tables (NULL, a stride below 1.0's or past the
// bound, a kind out of range) refuse the plugin; values from a later minor
// are ignored, as plugin.h promises, and logged at info.
Status read_capability_rows(const std::string &file, const std::string &table, const bp_capability *rows,
                            size_t count, size_t kind_count, std::vector<CapabilitySet> &sets,
                            std::optional<uint32_t> only_kind) {
  if (count == 0) return {};
  if (!rows) return plugin_init_error(file, table + " are NULL with a count of " + std::to_string(count));
  if (count > kMaxCapabilityRows)
    return plugin_init_error(file, table + " has " + std::to_string(count) + " rows, more than the " +
                                       std::to_string(kMaxCapabilityRows) + " a host accepts");
  const size_t stride = rows[0].struct_size;
  if (stride < BP_CAPABILITY_SIZE_V1_0) {
    return plugin_init_error(file, table + " have struct_size " + std::to_string(stride) +
                                       ", less than the ABI 1.0 size " +
                                       std::to_string(BP_CAPABILITY_SIZE_V1_0));
  }
  if (stride > kMaxCapabilityStride) {
    return plugin_init_error(file, table + " have struct_size " + std::to_string(stride) + ", more than the " +
                                       std::to_string(kMaxCapabilityStride) + " bytes a host accepts per row");
  }
  IgnoredValues ignored;
  const auto *bytes = reinterpret_cast<const unsigned char *>(rows);
  for (size_t i = 0; i < count; ++i) {
    bp_capability row = read_struct<bp_capability>(bytes + i * stride, stride);
    if (only_kind) row.device_kind = *only_kind;
    if (row.device_kind >= kind_count)
      return plugin_init_error(file, table + ": row " + std::to_string(i) + " names device kind " +
                                         std::to_string(row.device_kind) + " of " + std::to_string(kind_count));
    if (row.collective >= BP_COLLECTIVE_COUNT) {
      ignored.rows.push_back("row " + std::to_string(i) + " (collective " + std::to_string(row.collective) + ")");
      continue;
    }
    ignored.dtype_bits |= row.dtypes & ~all_dtypes_mask;
    ignored.flag_bits |= row.flags & ~all_capability_flags;
    row.dtypes &= all_dtypes_mask;
    row.flags &= all_capability_flags;
    if (collective_reduces(row.collective)) {
      ignored.op_bits |= row.reduce_ops & ~all_reduce_ops_mask;
      row.reduce_ops &= all_reduce_ops_mask;
    }
    sets[row.device_kind].add(row);
  }
  if (!ignored.empty()) {
    log(BP_LOG_INFO, "loader",
        "'" + file + "' " + table + " declare values this host (plugin ABI " +
            std::to_string(BP_PLUGIN_ABI_MAJOR) + "." + std::to_string(BP_PLUGIN_ABI_MINOR) +
            ") does not know, ignored: " + ignored.describe());
  }
  return {};
}

struct Candidate {
  std::unique_ptr<LoadedPlugin> plugin;
  std::vector<std::unique_ptr<LayerKind>> layer_kinds;
  std::vector<CapabilitySet> kind_capabilities;
  std::vector<std::unique_ptr<bp_device>> devices;  // kind pointer filled in at registration
  std::vector<uint32_t> device_kind_indices;
};

constexpr size_t kMaxLayerKinds = 64;
constexpr size_t kMaxLayerOptions = 64;
constexpr size_t kMaxLayerStride = 1024;

// The strings of one table entry: a name of [a-z0-9_]+ and a one-line text.
Status read_identifier(const std::string &file, const std::string &what, const char *text, std::string &out) {
  if (Status status = read_plugin_string(file, what, text, kMaxNameBytes, out); !status) return status;
  if (!is_identifier(out.c_str())) return plugin_init_error(file, what + " '" + out + "' is missing or not of [a-z0-9_]");
  return {};
}

// The layer table of ABI 1.3 (plugin.h, "layers"), when the descriptor's
// chain holds one: its kinds with their rules and options, its functions.
Status read_layer_table(const std::string &file, const bp_layer_table &table, Candidate &candidate) {
  LoadedPlugin &plugin = *candidate.plugin;
  if (table.struct_size < BP_LAYER_TABLE_SIZE_V1_3)
    return plugin_init_error(file, "the layer table's struct_size is below its 1.3 size");
  if (!table.functions || table.functions->struct_size < BP_LAYER_FUNCTIONS_SIZE_V1_3)
    return plugin_init_error(file, "the layer table's functions are missing or smaller than their 1.3 size");
  plugin.layer_functions = read_struct<bp_layer_functions>(table.functions, table.functions->struct_size);
  if (!plugin.layer_functions.instance_create || !plugin.layer_functions.instance_destroy)
    return plugin_init_error(file, "the layer table's instance_create or instance_destroy is NULL");
  if (table.kind_count == 0) return plugin_init_error(file, "the layer table declares no layer kind");
  if (!table.kinds) return plugin_init_error(file, "the layer table's kinds are NULL");
  if (table.kind_count > kMaxLayerKinds)
    return plugin_init_error(file, "declares " + std::to_string(table.kind_count) + " layer kinds, more than the " +
                                       std::to_string(kMaxLayerKinds) + " a host accepts");
  const size_t stride = table.kinds[0].struct_size;
  if (stride < BP_LAYER_KIND_SIZE_V1_3 || stride > kMaxLayerStride)
    return plugin_init_error(file, "layer kinds have struct_size " + std::to_string(stride) + ", outside [" +
                                       std::to_string(BP_LAYER_KIND_SIZE_V1_3) + ", " + std::to_string(kMaxLayerStride) + "]");
  const auto *bytes = reinterpret_cast<const unsigned char *>(table.kinds);
  for (size_t k = 0; k < table.kind_count; ++k) {
    const bp_layer_kind declared = read_struct<bp_layer_kind>(bytes + k * stride, stride);
    auto kind = std::make_unique<LayerKind>();
    const std::string what = "layer kind " + std::to_string(k);
    if (Status status = read_identifier(file, what + "'s name", declared.name, kind->name); !status) return status;
    for (const auto &earlier : candidate.layer_kinds)
      if (earlier->name == kind->name) return plugin_init_error(file, "layer kind '" + kind->name + "' is declared twice");
    if (Status status = read_plugin_string(file, what + "'s description", declared.description, kMaxTextBytes,
                                           kind->description);
        !status)
      return status;
    kind->plugin = &plugin;
    kind->index_in_plugin = static_cast<uint32_t>(k);
    kind->stackable = declared.flags & BP_LAYER_STACKABLE;
    kind->timed = declared.flags & BP_LAYER_TIMED;
    if (declared.device_kind_count > kMaxDeviceKinds || (declared.device_kind_count && !declared.device_kinds))
      return plugin_init_error(file, "layer kind '" + kind->name + "' wraps a bad list of device kinds");
    for (size_t d = 0; d < declared.device_kind_count; ++d) {
      std::string wrapped;
      if (Status status = read_identifier(file, "layer kind '" + kind->name + "' device kind " + std::to_string(d),
                                          declared.device_kinds[d], wrapped);
          !status)
        return status;
      kind->wraps.push_back(std::move(wrapped));
    }
    if (declared.option_count > kMaxLayerOptions || (declared.option_count && !declared.options))
      return plugin_init_error(file, "layer kind '" + kind->name + "' declares a bad list of options");
    const size_t option_stride = declared.option_count ? declared.options[0].struct_size : 0;
    if (declared.option_count && (option_stride < BP_LAYER_OPTION_SIZE_V1_3 || option_stride > kMaxLayerStride))
      return plugin_init_error(file, "layer kind '" + kind->name + "' options have struct_size " +
                                         std::to_string(option_stride));
    const auto *option_bytes = reinterpret_cast<const unsigned char *>(declared.options);
    for (size_t o = 0; o < declared.option_count; ++o) {
      const bp_layer_option option = read_struct<bp_layer_option>(option_bytes + o * option_stride, option_stride);
      LayerKind::Option read;
      const std::string option_what = "layer kind '" + kind->name + "' option " + std::to_string(o);
      if (Status status = read_identifier(file, option_what + "'s name", option.name, read.name); !status) return status;
      if (Status status = read_plugin_string(file, option_what + "'s description", option.description, kMaxTextBytes,
                                             read.description);
          !status)
        return status;
      read.path = option.flags & BP_LAYER_OPTION_PATH;
      kind->options.push_back(std::move(read));
    }
    for (const std::string &wrapped : kind->wraps) kind->wrap_pointers.push_back(wrapped.c_str());
    for (const LayerKind::Option &option : kind->options) {
      kind->option_name_pointers.push_back(option.name.c_str());
      kind->option_description_pointers.push_back(option.description.c_str());
    }
    candidate.layer_kinds.push_back(std::move(kind));
  }
  return {};
}

// The transport table of ABI 1.6 (plugin.h, "transports"), when the
// descriptor's chain holds one: its name, what it carries, its functions.
Status read_transport_table(const std::string &file, const bp_transport_table &table, LoadedPlugin &plugin) {
  if (table.struct_size < BP_TRANSPORT_TABLE_SIZE_V1_6)
    return plugin_init_error(file, "the transport table's struct_size is below its 1.6 size");
  if (!table.functions || table.functions->struct_size < BP_TRANSPORT_FUNCTIONS_SIZE_V1_6)
    return plugin_init_error(file, "the transport table's functions are missing or smaller than their 1.6 size");
  plugin.transport_functions = read_struct<bp_transport_functions>(table.functions, table.functions->struct_size);
  const bp_transport_functions &functions = plugin.transport_functions;
  if (!functions.open || !functions.close || !functions.transport_info || !functions.comm_create ||
      !functions.comm_destroy || !functions.exchange_start || !functions.exchange_wait || !functions.exchange_release)
    return plugin_init_error(file, "a required function of the transport table is NULL");
  if (Status status = read_identifier(file, "the transport's name", table.name, plugin.transport); !status)
    return status;
  std::vector<CapabilitySet> carried(1);
  if (Status status = read_capability_rows(file, "transport rows", table.capabilities, table.capability_count, 1,
                                           carried, 0u);
      !status)
    return status;
  plugin.transport_capabilities = carried[0];
  return {};
}

// The plugin file, opened once: what the trust checks looked at is what
// the system loader maps (through /proc/self/fd), so nothing can swap the
// file in between. O_NONBLOCK keeps a FIFO from blocking the open; only a
// regular file goes on.
class OpenedPluginFile {
 public:
  ~OpenedPluginFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status open(const fs::path &file) {
    fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd_ < 0)
      return Error(BP_PLUGIN_LOAD, "cannot open plugin '" + file.string() + "': " + std::strerror(errno));
    struct stat status {};
    if (::fstat(fd_, &status) != 0)
      return Error(BP_PLUGIN_LOAD, "cannot read plugin '" + file.string() + "': " + std::strerror(errno));
    if (!S_ISREG(status.st_mode)) {
      return Error(BP_PLUGIN_LOAD, "refusing plugin '" + file.string() + "': it is not a regular file")
          .hint("a plugin must be a shared object file; remove '" + file.string() + "'");
    }
    if (Status trusted = check_trusted(status, file, "plugin file"); !trusted) return trusted;
    if (std::optional<std::string> problem = elf_problem(fd_)) {
      return Error(BP_PLUGIN_LOAD, "cannot load plugin '" + file.string() + "': " + *problem)
          .with("reason", *problem)
          .hint("check that the file is a complete shared object built for this machine (reinstall it)");
    }
    return {};
  }
  int fd() const { return fd_; }
  // The descriptor goes with the plugin (its SHA-256 is read through it);
  // the system loader opens the file through a loader name of its own.
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// The system loader names the file it was given (/proc/self/fd/N); users
// need the plugin's own path.
std::string with_real_path(std::string message, const std::string &loader_path, const std::string &path) {
  for (size_t at = message.find(loader_path); at != std::string::npos; at = message.find(loader_path, at + path.size()))
    message.replace(at, loader_path.size(), path);
  return message;
}

// The names the system loader knows plugin libraries by. It takes
// "/proc/self/fd/N" as a name of the library it maps, and also of one it had
// mapped already from the same file (another host's, found by its inode):
// once N closed, the next file opened at N would be taken for that library,
// by name. So each file mapped has one descriptor of its own, the name every
// host loads it through, closed when the last host that holds the library
// lets it go (while the library is mapped, that name is never reused).
struct LoaderName {
  int fd = -1;
  size_t holders = 0;
};
std::map<LoaderKey, LoaderName> &loader_names() {  // under dynamic_loader_mutex()
  static auto *names = new std::map<LoaderKey, LoaderName>();  // never freed: hosts may outlive static destruction
  return *names;
}

// The loader name of the file open at `fd`, one more holder counted.
Expected<std::string> hold_loader_name(int fd, LoaderKey &key) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) return Error(BP_PLUGIN_LOAD, std::string("cannot stat: ") + std::strerror(errno));
  key = {status.st_dev, status.st_ino};
  auto [name, fresh] = loader_names().try_emplace(key);
  if (fresh) {
    name->second.fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (name->second.fd < 0) {
      const int error = errno;
      loader_names().erase(name);
      return Error(BP_PLUGIN_LOAD, std::string("cannot keep a descriptor of it: ") + std::strerror(error));
    }
  }
  ++name->second.holders;
  return "/proc/self/fd/" + std::to_string(name->second.fd);
}

}  // namespace

void release_loader_name(const LoaderKey &key) {
  auto name = loader_names().find(key);
  if (name == loader_names().end() || --name->second.holders > 0) return;
  ::close(name->second.fd);
  loader_names().erase(name);
}

namespace {

// Where unloading is not safe, a plugin's library stays mapped until the
// process ends: code a plugin left running (a pool thread of a plugin that
// threw, or whose destroy never ran) must not lose its instructions.
void keep_mapped(boost::dll::shared_library &&library) {
  static auto *kept = new std::vector<boost::dll::shared_library>();  // never freed, on purpose
  std::lock_guard lock(dynamic_loader_mutex());
  kept->push_back(std::move(library));
}

// A pinned file name must have the pinned content, wherever it is found.
Status check_pin(const bp_host &host, const fs::path &file, const std::string &sha256) {
  const std::string name = file.filename().string();
  const auto pin = host.plugin_pins.find(name);
  if (pin == host.plugin_pins.end() || pin->second == sha256) return {};
  return Error(BP_PLUGIN_LOAD, "refusing plugin '" + file.string() + "': its SHA-256 is " + sha256 +
                                   " but " + name + " is pinned to " + pin->second)
      .with("sha256", sha256)
      .with("pinned_sha256", pin->second)
      .hint("install the pinned build of " + name + ", or update its pin (sha256sum '" + file.string() + "')");
}

// What bp_plugin_entry gets as options_json, in process and in a probe.
std::string entry_options_json(const bp_host &host) {
  return host.plugin_options.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status open_and_enter(const bp_host &host, const fs::path &file, Candidate &candidate) {
  const std::string path = file.string();
  OpenedPluginFile opened;
  if (Status status = opened.open(file); !status) return status;
  if (Status status = check_not_writable_by_others(file.parent_path().empty() ? "." : file.parent_path(),
                                                   "plugin directory");
      !status)
    return status;
  // A symlink's target may sit in another directory: that one must be safe too.
  std::error_code canonical_error;
  const fs::path target = fs::canonical(file, canonical_error);
  if (!canonical_error && target.parent_path() != fs::weakly_canonical(file.parent_path(), canonical_error)) {
    if (Status status = check_not_writable_by_others(target.parent_path(), "plugin directory"); !status)
      return status;
  }

  // A pinned file is hashed from the descriptor the system loader then
  // maps, so the pin checks the very bytes that would run.
  std::optional<std::string> pinned_file_sha256;
  if (host.plugin_pins.contains(file.filename().string())) {
    Expected<std::string> sha256 = sha256_of_file(opened.fd(), path);
    if (!sha256) return sha256.take_error();
    if (Status status = check_pin(host, file, *sha256); !status) return status;
    pinned_file_sha256 = std::move(*sha256);
  }
  // A plugin that crashes or hangs does so in the probe's process, not here.
  if (host.probe.enabled) {
    if (Status status = probe_plugin_file(path, opened.fd(), entry_options_json(host), host.probe); !status)
      return status;
  }

  auto plugin = std::make_unique<LoadedPlugin>();
  std::string given_loader_path;
  plugin->file = one_line_utf8(path);  // for listings; `file` itself is what is opened
  if (pinned_file_sha256) plugin->set_sha256(std::move(*pinned_file_sha256));
  try {
    std::lock_guard lock(dynamic_loader_mutex());
    // Immediate binding: an unresolved symbol fails here, with the system
    // loader's message, not at the first call.
    Expected<std::string> loader_path = hold_loader_name(opened.fd(), plugin->loader_key);
    if (!loader_path) return Error(BP_PLUGIN_LOAD, "cannot load plugin '" + path + "': " + loader_path.error().message());
    plugin->holds_loader_name = true;  // released by the plugin's destructor, loaded or not
    given_loader_path = *loader_path;
    plugin->library.load(*loader_path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    plugin->library_fd = opened.release();
  } catch (const std::exception &exception) {
    const std::string reason = with_real_path(system_loader_message(exception.what()), given_loader_path, path);
    return Error(BP_PLUGIN_LOAD, "cannot load plugin '" + path + "': " + reason)
        .with("reason", reason)
        .hint("check that the file is a complete shared object built for this machine and that its "
              "dependencies are installed (ldd '" + path + "')");
  }
  if (!plugin->library.has(BP_PLUGIN_ENTRY_SYMBOL)) {
    return Error(BP_PLUGIN_LOAD, "plugin '" + path + "' does not export " BP_PLUGIN_ENTRY_SYMBOL)
        .hint("build the plugin with backplane_add_plugin(), which exports its entry point");
  }
  auto entry = plugin->library.get<int32_t(bp_plugin_entry_args *)>(BP_PLUGIN_ENTRY_SYMBOL);

  bp_error_sink sink;
  bp_plugin_entry_args args{};
  args.struct_size = sizeof args;
  args.host_abi_major = BP_PLUGIN_ABI_MAJOR;
  args.host_abi_minor = BP_PLUGIN_ABI_MINOR;
  args.services = &host_services();
  args.sink = &sink;
  const std::string options_text = entry_options_json(host);
  args.options_json = options_text.c_str();
  int32_t code;
  // From here on the plugin's code has run: unload it only once its destroy
  // returned (~LoadedPlugin), else keep it mapped.
  plugin->entered = true;
  try {
    code = entry(&args);
  } catch (const std::exception &exception) {
    return Error(BP_PLUGIN_INIT, "plugin '" + path + "' threw a C++ exception from " BP_PLUGIN_ENTRY_SYMBOL
                                 ": " + exception.what())
        .hint("a plugin must catch its exceptions at the ABI boundary");
  } catch (...) {
    return Error(BP_PLUGIN_INIT, "plugin '" + path + "' threw an exception from " BP_PLUGIN_ENTRY_SYMBOL)
        .hint("a plugin must catch its exceptions at the ABI boundary");
  }
  if (code != BP_OK) {
    const bp_code refusal = code == BP_PLUGIN_ABI ? BP_PLUGIN_ABI : BP_PLUGIN_INIT;
    return Error(refusal, "plugin '" + path + "' refused to initialise: " +
                              (sink.message.empty() ? "no reason given (code " + std::to_string(code) + ")"
                                                    : sink.message))
        .with("plugin_code", code_name(static_cast<bp_code>(code)))
        .with("host_abi", abi_text(BP_PLUGIN_ABI_MAJOR, BP_PLUGIN_ABI_MINOR));
  }

  const bp_plugin_descriptor *raw = args.descriptor;
  if (!raw) return plugin_init_error(path, BP_PLUGIN_ENTRY_SYMBOL " returned BP_OK but no descriptor");
  // abi_major and abi_minor sit right after the frozen header, in every
  // version, so they can be read before anything else is trusted.
  constexpr size_t abi_fields_size = BP_STRUCT_SIZE(bp_plugin_descriptor, abi_minor);
  if (raw->struct_size < abi_fields_size) {
    return plugin_init_error(path, "descriptor struct_size is " + std::to_string(raw->struct_size) +
                                       ", less than the ABI 1.0 size " +
                                       std::to_string(BP_PLUGIN_DESCRIPTOR_SIZE_V1_0));
  }
  if (raw->abi_major != BP_PLUGIN_ABI_MAJOR) {
    const std::string plugin_abi = abi_text(raw->abi_major, raw->abi_minor);
    const std::string host_abi = abi_text(BP_PLUGIN_ABI_MAJOR, BP_PLUGIN_ABI_MINOR);
    const bool plugin_newer = raw->abi_major > BP_PLUGIN_ABI_MAJOR;
    return Error(BP_PLUGIN_ABI, "plugin '" + path + "' was built for plugin ABI " + plugin_abi +
                                    " but this host speaks ABI " + host_abi + ": " +
                                    (plugin_newer ? "upgrade the host" : "rebuild the plugin against ABI " +
                                                                             std::to_string(BP_PLUGIN_ABI_MAJOR) + ".x"))
        .with("plugin_abi", plugin_abi)
        .with("host_abi", host_abi)
        .with("upgrade", plugin_newer ? "host" : "plugin")
        .hint(plugin_newer ? "install a Backplane host of ABI major " + std::to_string(raw->abi_major)
                           : "rebuild the plugin against this host's plugin.h");
  }
  if (raw->struct_size < BP_PLUGIN_DESCRIPTOR_SIZE_V1_0) {
    return plugin_init_error(path, "descriptor struct_size is " + std::to_string(raw->struct_size) +
                                       ", less than the ABI 1.0 size " +
                                       std::to_string(BP_PLUGIN_DESCRIPTOR_SIZE_V1_0));
  }
  plugin->descriptor = read_struct<bp_plugin_descriptor>(raw, raw->struct_size);
  const bp_plugin_descriptor &descriptor = plugin->descriptor;
  if (!descriptor.functions || descriptor.functions->struct_size < BP_PLUGIN_FUNCTIONS_SIZE_V1_0)
    return plugin_init_error(path, "function table is missing or smaller than its ABI 1.0 size");
  plugin->functions = read_struct<bp_plugin_functions>(descriptor.functions, descriptor.functions->struct_size);
  plugin->state = args.state;  // from here on, destroy() releases it
  candidate.plugin = std::move(plugin);
  LoadedPlugin &loaded = *candidate.plugin;
  const bp_plugin_functions &functions = loaded.functions;

  // A plugin without device kinds (layers only) needs nothing but destroy.
  const bool has_device_kinds = descriptor.device_kind_count > 0;
  if (!functions.destroy ||
      (has_device_kinds &&
       (!functions.device_count || !functions.device_info || !functions.buffer_create ||
        !functions.buffer_destroy || !functions.buffer_write || !functions.buffer_read || !functions.comm_create ||
        !functions.comm_destroy || !functions.collective_start || !functions.request_test ||
        !functions.request_wait || !functions.request_release)))
    return plugin_init_error(path, "a required function of the table is NULL");
  if (const void *table = find_extension(descriptor.next, BP_EXTENSION_LAYER_TABLE, "bp_plugin_descriptor")) {
    if (Status status = read_layer_table(path, *static_cast<const bp_layer_table *>(table), candidate); !status)
      return status;
  }
  if (const void *table = find_extension(descriptor.next, BP_EXTENSION_TRANSPORT_TABLE, "bp_plugin_descriptor")) {
    if (Status status = read_transport_table(path, *static_cast<const bp_transport_table *>(table), loaded); !status)
      return status;
  }
  if (Status status = read_plugin_string(path, "the plugin name", descriptor.name, kMaxNameBytes, loaded.name);
      !status)
    return status;
  if (!is_identifier(loaded.name.c_str()))
    return plugin_init_error(path, "plugin name '" + loaded.name + "' is missing or not of [a-z0-9_]");
  if (Status status = read_plugin_string(path, "the version", descriptor.version, kMaxTextBytes, loaded.version);
      !status)
    return status;
  if (descriptor.device_kind_count > 0 && !descriptor.device_kinds)
    return plugin_init_error(path, "device_kinds is NULL with a count of " +
                                       std::to_string(descriptor.device_kind_count));
  if (descriptor.device_kind_count > kMaxDeviceKinds)
    return plugin_init_error(path, "declares " + std::to_string(descriptor.device_kind_count) +
                                       " device kinds, more than the " + std::to_string(kMaxDeviceKinds) +
                                       " a host accepts");
  for (size_t k = 0; k < descriptor.device_kind_count; ++k) {
    std::string kind;
    if (Status status = read_plugin_string(path, "device kind " + std::to_string(k), descriptor.device_kinds[k],
                                           kMaxNameBytes, kind);
        !status)
      return status;
    if (kind.empty()) return plugin_init_error(path, "device kind " + std::to_string(k) + " has an empty name");
    if (!is_identifier(kind.c_str()))
      return plugin_init_error(path, "device kind '" + kind + "' is not of [a-z0-9_]");
    if (std::find(loaded.device_kinds.begin(), loaded.device_kinds.end(), kind) != loaded.device_kinds.end())
      return plugin_init_error(path, "device kind '" + std::string(kind) + "' is declared twice");
    loaded.device_kinds.push_back(std::move(kind));
  }
  candidate.kind_capabilities.resize(loaded.device_kinds.size());
  return read_capability_rows(path, "capability rows", descriptor.capabilities, descriptor.capability_count,
                              loaded.device_kinds.size(), candidate.kind_capabilities, std::nullopt);
}

Status check_conflicts(const bp_host &host, const Candidate &candidate) {
  const LoadedPlugin &plugin = *candidate.plugin;
  for (const auto &other : host.plugins) {
    if (other->name == plugin.name) {
      return Error(BP_PLUGIN_CONFLICT, "plugin '" + plugin.name + "' from '" + plugin.file +
                                           "' is already loaded from '" + other->file + "'")
          .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
          .with("loaded_from", other->file)
          .hint("keep one copy of libbackplane_" + plugin.name + ".so in the plugin directories");
    }
  }
  for (const auto &other : host.plugins) {
    if (plugin.transport.empty() || other->transport != plugin.transport) continue;
    return Error(BP_PLUGIN_CONFLICT, "transport '" + plugin.transport + "' of plugin '" + plugin.name + "' ('" +
                                         plugin.file + "') is already provided by plugin '" + other->name + "' ('" +
                                         other->file + "')")
        .with("transport", plugin.transport)
        .hint("remove one of the two plugins from the plugin directories");
  }
  for (const auto &layer : candidate.layer_kinds) {
    for (const auto &registered : host.layer_kinds) {
      if (registered->name != layer->name) continue;
      return Error(BP_PLUGIN_CONFLICT, "layer kind '" + layer->name + "' of plugin '" + plugin.name + "' ('" +
                                           plugin.file + "') is already provided by plugin '" +
                                           registered->plugin->name + "' ('" + registered->plugin->file + "')")
          .with("layer", layer->name)
          .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
          .with("owner", {{"name", registered->plugin->name}, {"file", registered->plugin->file}})
          .hint("remove one of the two plugins from the plugin directories");
    }
  }
  for (const std::string &kind : plugin.device_kinds) {
    for (const auto &registered : host.kinds) {
      if (registered->name != kind) continue;
      return Error(BP_PLUGIN_CONFLICT, "device kind '" + kind + "' of plugin '" + plugin.name + "' ('" +
                                           plugin.file + "') is already provided by plugin '" +
                                           registered->plugin->name + "' ('" + registered->plugin->file + "')")
          .with("device_kind", kind)
          .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
          .with("owner", {{"name", registered->plugin->name}, {"file", registered->plugin->file}})
          .hint("remove one of the two plugins from the plugin directories");
    }
  }
  return {};
}

// Copies what a plugin says about a device beyond ABI 1.0: its named
// properties, which it owns and may free at destroy.
Status read_device_properties(const LoadedPlugin &plugin, const bp_plugin_device_info &info, bp_device &device) {
  if (info.property_count == 0) return {};
  if (info.property_count > kMaxDeviceProperties) {
    return plugin_init_error(plugin.file, "device '" + device.name + "' has " + std::to_string(info.property_count) +
                                              " properties, more than the " + std::to_string(kMaxDeviceProperties) +
                                              " a host accepts");
  }
  if (!info.property_keys || !info.property_values) {
    return plugin_init_error(plugin.file, "device '" + device.name + "' has " + std::to_string(info.property_count) +
                                              " properties but a NULL key or value array");
  }
  for (size_t i = 0; i < info.property_count; ++i) {
    if (!info.property_keys[i] || !info.property_values[i]) {
      return plugin_init_error(plugin.file, "device '" + device.name + "' property " + std::to_string(i) +
                                                " has a NULL key or value");
    }
    const std::string what = "device '" + device.name + "' property " + std::to_string(i);
    std::string key, value;
    if (Status status = read_plugin_string(plugin.file, what + "'s key", info.property_keys[i], kMaxTextBytes, key);
        !status)
      return status;
    if (Status status =
            read_plugin_string(plugin.file, what + "'s value", info.property_values[i], kMaxTextBytes, value);
        !status)
      return status;
    device.property_keys.push_back(std::move(key));
    device.property_values.push_back(std::move(value));
  }
  for (size_t i = 0; i < device.property_keys.size(); ++i) {
    device.property_key_pointers.push_back(device.property_keys[i].c_str());
    device.property_value_pointers.push_back(device.property_values[i].c_str());
  }
  return {};
}

// The plugin's one line on a kind (ABI 1.1 kind_info), "" when it has none.
Status read_kind_status(LoadedPlugin &plugin, uint32_t kind, std::string &status_out) {
  status_out.clear();
  if (!plugin.functions.kind_info) return {};
  bp_plugin_kind_info info{};
  info.struct_size = sizeof info;
  if (Status status = call_plugin(plugin, "kind_info", [&](bp_error_sink *sink) {
        return plugin.functions.kind_info(plugin.state, kind, &info, sink);
      });
      !status)
    return status;
  return read_plugin_string(plugin.file, "the status of device kind '" + plugin.device_kinds[kind] + "'", info.status,
                            kMaxTextBytes, status_out);
}

// The bytes of text the host copied from a device.
size_t device_text_bytes(const bp_device &device) {
  size_t bytes = device.plugin_device_name.size() + device.description.size();
  for (size_t i = 0; i < device.property_keys.size(); ++i)
    bytes += device.property_keys[i].size() + device.property_values[i].size();
  return bytes;
}

Status enumerate_devices(const bp_host &host, Candidate &candidate) {
  LoadedPlugin &plugin = *candidate.plugin;
  size_t device_text = 0;
  for (uint32_t k = 0; k < plugin.device_kinds.size(); ++k) {
    const std::string &kind = plugin.device_kinds[k];
    if (auto options = host.plugin_options.find(kind); options != host.plugin_options.end()) {
      if (!plugin.functions.configure) {
        return Error(BP_CONFIG, "options were given for device kind '" + kind + "' but plugin '" + plugin.name +
                                    "' takes none")
            .with("device_kind", kind)
            .hint("remove the options of '" + kind + "'");
      }
      const std::string text = options->dump();
      if (Status status = call_plugin(plugin, "configure", [&](bp_error_sink *sink) {
            return plugin.functions.configure(plugin.state, k, text.c_str(), sink);
          });
          !status)
        return status;
    }
    uint32_t count = 0;
    if (Status status = call_plugin(plugin, "device_count", [&](bp_error_sink *sink) {
          return plugin.functions.device_count(plugin.state, k, &count, sink);
        });
        !status)
      return status;
    if (count > kMaxDevicesPerKind) {
      return Error(BP_PLUGIN_INIT, "plugin '" + plugin.name + "' reports " + std::to_string(count) + " '" + kind +
                                       "' devices, more than the " + std::to_string(kMaxDevicesPerKind) +
                                       " a host accepts per kind")
          .with("device_kind", kind)
          .with("device_count", count)
          .hint("report the bug to the plugin's authors");
    }
    if (candidate.devices.size() + count > kMaxDevicesPerPlugin) {
      return Error(BP_PLUGIN_INIT, "plugin '" + plugin.name + "' reports " +
                                       std::to_string(candidate.devices.size() + count) +
                                       " devices in all, more than the " + std::to_string(kMaxDevicesPerPlugin) +
                                       " a host accepts from one plugin")
          .with("device_kind", kind)
          .with("device_count", count)
          .hint("report the bug to the plugin's authors");
    }
    plugin.kind_statuses.emplace_back();
    if (Status status = read_kind_status(plugin, k, plugin.kind_statuses.back()); !status) return status;
    if (count == 0) {
      const std::string &why = plugin.kind_statuses.back();
      log(BP_LOG_INFO, "loader",
          "plugin '" + plugin.name + "' reports no '" + kind + "' devices" + (why.empty() ? "" : ": " + why));
    }
    for (uint32_t index = 0; index < count; ++index) {
      bp_plugin_device_info info{};
      info.struct_size = sizeof info;
      if (Status status = call_plugin(plugin, "device_info", [&](bp_error_sink *sink) {
            return plugin.functions.device_info(plugin.state, k, index, &info, sink);
          });
          !status)
        return status;
      auto device = std::make_unique<bp_device>();
      device->host = const_cast<bp_host *>(&host);
      device->index = index;
      device->name = kind + ":" + std::to_string(index);
      if (Status status = read_plugin_string(plugin.file, "device '" + device->name + "''s name", info.name,
                                             kMaxTextBytes, device->plugin_device_name);
          !status)
        return status;
      if (device->plugin_device_name.empty()) device->plugin_device_name = device->name;
      if (Status status = read_plugin_string(plugin.file, "device '" + device->name + "''s description",
                                             info.description, kMaxTextBytes, device->description);
          !status)
        return status;
      device->flags = info.flags;
      device->memory_bytes = info.memory_bytes;
      if (Status status = read_device_properties(plugin, info, *device); !status) return status;
      device_text += device_text_bytes(*device);
      if (device_text > kMaxDeviceTextBytesPerPlugin) {
        return plugin_init_error(plugin.file, "the names, descriptions and properties of its devices pass " +
                                                  std::to_string(kMaxDeviceTextBytesPerPlugin >> 20) +
                                                  " MiB at device '" + device->name + "', the most a host accepts "
                                                  "from one plugin");
      }
      if (info.capabilities) {
        std::vector<CapabilitySet> own(1);
        if (Status status = read_capability_rows(plugin.file, "device '" + device->name + "' capability rows",
                                                 info.capabilities, info.capability_count, 1, own, 0u);
            !status)
          return status;
        own[0].intersect(candidate.kind_capabilities[k]);  // a device never exceeds its kind
        device->own_capabilities = std::make_unique<CapabilitySet>(own[0]);
      }
      candidate.devices.push_back(std::move(device));
      candidate.device_kind_indices.push_back(k);
    }
  }
  return {};
}

void register_candidate(bp_host &host, Candidate &candidate) {
  LoadedPlugin &plugin = *candidate.plugin;
  std::vector<DeviceKind *> kinds;
  for (uint32_t k = 0; k < plugin.device_kinds.size(); ++k) {
    auto kind = std::make_unique<DeviceKind>();
    kind->name = plugin.device_kinds[k];
    kind->plugin = &plugin;
    kind->index_in_plugin = k;
    kind->capabilities = candidate.kind_capabilities[k];
    kinds.push_back(kind.get());
    host.kinds.push_back(std::move(kind));
  }
  for (size_t i = 0; i < candidate.devices.size(); ++i) {
    candidate.devices[i]->kind = kinds[candidate.device_kind_indices[i]];
    host.devices.push_back(std::move(candidate.devices[i]));
  }
  for (auto &layer : candidate.layer_kinds) {
    plugin.layer_kinds.push_back(layer->name);
    host.layer_kinds.push_back(std::move(layer));
  }
  for (const std::string &name : plugin.layer_kinds) plugin.layer_kind_pointers.push_back(name.c_str());
  for (const std::string &kind : plugin.device_kinds) plugin.device_kind_pointers.push_back(kind.c_str());
  for (const std::string &status : plugin.kind_statuses)
    plugin.kind_status_pointers.push_back(status.empty() ? nullptr : status.c_str());
  log(BP_LOG_INFO, "loader", "loaded plugin '" + plugin.name + "' " + plugin.version + " from '" + plugin.file + "'");
  host.plugins.push_back(std::move(candidate.plugin));
  rebuild_capability_listing(host);
}

Status load_locked(bp_host &host, const fs::path &file, Candidate &candidate) {
  if (Status status = open_and_enter(host, file, candidate); !status) return status;
  if (Status status = check_conflicts(host, candidate); !status) return status;
  if (Status status = enumerate_devices(host, candidate); !status) return status;
  register_candidate(host, candidate);
  return {};
}

// Like PATH: a plugin file found earlier in the search order hides one of
// the same name found later (a build's plugin over the installed one).
bool shadowed_by_earlier_directory(bp_host &host, const fs::path &file) {
  std::shared_lock lock(host.mutex);
  for (const auto &plugin : host.plugins) {
    const fs::path earlier(plugin->file);
    if (earlier.filename() == file.filename() && earlier.parent_path() != file.parent_path()) {
      log(BP_LOG_DEBUG, "loader",
          "skipping '" + file.string() + "': shadowed by '" + plugin->file + "' earlier in the search path");
      return true;
    }
  }
  return false;
}

}  // namespace

void load_directory(bp_host &host, const fs::path &given_directory, bool must_exist) {
  const fs::path directory = given_directory.lexically_normal();
  std::error_code error;
  if (!fs::is_directory(directory, error)) {
    if (must_exist) {
      Status refusal = Error(BP_PLUGIN_LOAD, "plugin directory '" + directory.string() + "' does not exist")
                           .with("file", directory.string())
                           .hint("create it or correct the path");
      std::unique_lock lock(host.mutex);
      host.refused.emplace_back().error = to_c_error(std::move(refusal));
    }
    log(BP_LOG_DEBUG, "loader", "skipping '" + directory.string() + "': not a directory");
    return;
  }
  if (Status status = check_not_writable_by_others(directory, "plugin directory"); !status) {
    Error refusal = status.take_error();
    refusal.with("file", directory.string());
    log(BP_LOG_INFO, "loader", refusal.message());
    std::unique_lock lock(host.mutex);
    host.refused.emplace_back().error = to_c_error(std::move(refusal));
    return;
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry &entry : fs::directory_iterator(directory, error)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());  // a stable order: kinds register first come, first served
  for (const fs::path &file : files) {
    if (!is_plugin_file_name(file.filename().string())) {
      log(BP_LOG_DEBUG, "loader", "skipping '" + file.string() + "': not named libbackplane_<name>.so");
      continue;
    }
    if (shadowed_by_earlier_directory(host, file)) continue;
    log(BP_LOG_DEBUG, "loader", "loading '" + file.string() + "'");
    Status ignored = load_plugin_file(host, file);  // a refusal is kept in the host's list
    (void)ignored;
  }
}

namespace {

fs::path install_plugin_directory() {
  const fs::path library_directory = host_library_directory();
  return library_directory.empty() ? fs::path() : library_directory / BACKPLANE_PLUGIN_RELATIVE_DIR;
}

}  // namespace

const bp_host_services &host_services() {
  static const bp_host_services services{sizeof(bp_host_services), nullptr,
                                         report_error,             plugin_log,
                                         nullptr,                  describe_device_service,
                                         describe_buffer_service,  read_buffer_service};
  return services;
}

const std::string &LoadedPlugin::sha256() const {
  std::call_once(sha256_once_, [&] {
    Expected<std::string> digest = sha256_of_file(library_fd, file);
    if (digest) {
      sha256_ = std::move(*digest);
    } else {
      log(BP_LOG_WARN, "loader", digest.take_error().message());
    }
  });
  return sha256_;
}

void LoadedPlugin::set_sha256(std::string digest) const {
  std::call_once(sha256_once_, [&] { sha256_ = std::move(digest); });
}

LoadedPlugin::~LoadedPlugin() {
  bool destroyed = !entered;  // a plugin whose code never ran is safe to unload
  if (state && functions.destroy && !failed.load()) {
    try {
      functions.destroy(state);
      destroyed = true;
    } catch (...) {
      log(BP_LOG_ERROR, "loader", "plugin '" + name + "' threw from destroy");
    }
  }
  if (!destroyed) {
    log(BP_LOG_DEBUG, "loader", "keeping '" + file + "' mapped: its destroy did not run to the end");
    keep_mapped(std::move(library));  // and its descriptor open, which names it
    return;
  }
  std::lock_guard lock(dynamic_loader_mutex());
  library.unload();
  if (holds_loader_name) release_loader_name(loader_key);
  if (library_fd >= 0) ::close(library_fd);
}

namespace {

// The codes a plugin's function may hand on to the application as they
// are. The others say something untrue about the caller's request: codes
// outside bp_code, load-time codes (the plugin loaded long ago) and
// INTERNAL (which means a bug in Backplane, not in a plugin).

}  // namespace

bool plugin_may_return(int32_t code) {
  switch (code) {
    case BP_INVALID_ARGUMENT:
    case BP_UNSUPPORTED_DEVICE:
    case BP_UNSUPPORTED_COLLECTIVE:
    case BP_UNSUPPORTED_DTYPE:
    case BP_UNSUPPORTED_REDUCE_OP:
    case BP_CONFIG:
    case BP_DEVICE_FAILURE:
    case BP_OUT_OF_MEMORY:
    case BP_TIMEOUT:
      return true;
    default:
      return false;
  }
}

Status plugin_failure(LoadedPlugin &plugin, const char *function, bp_error_sink &sink, int32_t code) {
  std::string reason = sink.message.empty() ? "no reason given" : sink.message;
  if (plugin_may_return(code)) {
    return Error(static_cast<bp_code>(code), "plugin '" + plugin.name + "' " + function + " failed: " + reason)
        .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
        .with("function", function);
  }
  const bool known = code > BP_OK && code < BP_CODE_COUNT;
  const std::string returned =
      known ? std::string(code_name(static_cast<bp_code>(code))) + " (" + std::to_string(code) + ")"
            : std::to_string(code);
  return Error(BP_DEVICE_FAILURE, "plugin '" + plugin.name + "' " + function + " failed with code " + returned +
                                      ", which a plugin function may not return: " + reason)
      .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
      .with("function", function)
      .with("plugin_code", code)
      .hint("report the bug to the plugin's authors");
}

bool is_plugin_file_name(const std::string &name) {
  static constexpr std::string_view prefix = "libbackplane_", suffix = ".so";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
    return false;
  std::string_view stem(name.data() + prefix.size(), name.size() - prefix.size() - suffix.size());
  return std::all_of(stem.begin(), stem.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

Status plugin_returned_null(const LoadedPlugin &plugin, const char *function) {
  return Error(BP_DEVICE_FAILURE, "plugin '" + plugin.name + "' " + function +
                                      " returned BP_OK without a handle (NULL)")
      .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
      .with("function", function)
      .hint("report the bug to the plugin's authors");
}

Status plugin_threw(LoadedPlugin &plugin, const char *function, const char *what) {
  plugin.failed.store(true);
  plugin.failure = std::string(function) + " threw " + what;
  log(BP_LOG_ERROR, "dispatch", "plugin '" + plugin.name + "' disabled: " + plugin.failure);
  return Error(BP_DEVICE_FAILURE, "plugin '" + plugin.name + "' threw a C++ exception from " + function + ": " +
                                      what + "; the plugin is disabled")
      .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
      .with("function", function)
      .hint("report the bug to the plugin's authors; other plugins keep working");
}

Status plugin_disabled(const LoadedPlugin &plugin, const char *function) {
  return Error(BP_DEVICE_FAILURE, "plugin '" + plugin.name + "' is disabled (" + plugin.failure +
                                      "), so " + function + " was not called")
      .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
      .hint("create a new host, or use another device kind");
}

Status load_plugin_file(bp_host &host, const fs::path &file) {
  std::unique_lock lock(host.mutex);
  std::error_code error;
  fs::path canonical = fs::weakly_canonical(file, error);
  if (error) canonical = file;
  if (std::find(host.loaded_files.begin(), host.loaded_files.end(), canonical) != host.loaded_files.end()) {
    log(BP_LOG_DEBUG, "loader", "'" + file.string() + "' is already loaded; skipping");
    return {};
  }
  if (std::find(host.refused_files.begin(), host.refused_files.end(), canonical) != host.refused_files.end()) {
    log(BP_LOG_DEBUG, "loader", "'" + file.string() + "' was refused before; skipping");
    return {};
  }
  Candidate candidate;
  Status status = load_locked(host, file, candidate);
  if (status) {
    host.loaded_files.push_back(canonical);
    return {};
  }
  Error refusal = status.take_error();
  refusal.with("file", file.string());
  // Refusals are kept and listed (bp_host_refused, `backplane plugins`), so
  // they do not also go to stderr unless asked for.
  log(BP_LOG_INFO, "loader", refusal.message());
  host.refused_files.push_back(canonical);
  RefusedPlugin &record = host.refused.emplace_back();
  record.error = to_c_error(refusal);
  if (candidate.plugin) {
    for (size_t k = 0; k < candidate.kind_capabilities.size(); ++k)
      record.declared.emplace_back(candidate.plugin->device_kinds[k], candidate.kind_capabilities[k]);
  }
  return refusal;
}

void load_search_path(bp_host &host, const bp_host_options &options) {
  for (size_t i = 0; i < options.plugin_dir_count; ++i) {
    if (options.plugin_dirs[i]) load_directory(host, options.plugin_dirs[i], true);
  }
  if (!(options.flags & BP_HOST_IGNORE_ENV_PATH)) {
    // secure_getenv: a setuid program does not take plugins from its caller.
    const char *path = ::secure_getenv("BACKPLANE_PLUGIN_PATH");
    if (!path && std::getenv("BACKPLANE_PLUGIN_PATH")) {
      log(BP_LOG_INFO, "loader",
          "ignoring BACKPLANE_PLUGIN_PATH: this process runs with elevated privileges (setuid, setgid or "
          "capabilities), so it takes no plugin directory from its environment");
    }
    if (path) {
      std::string_view rest(path);
      while (!rest.empty()) {
        size_t colon = rest.find(':');
        std::string_view directory = rest.substr(0, colon);
        rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
        if (!directory.empty()) load_directory(host, std::string(directory), false);
      }
    }
  }
  if (!(options.flags & BP_HOST_IGNORE_INSTALL_PATH)) {
    fs::path directory = install_plugin_directory();
    if (!directory.empty()) load_directory(host, directory, false);
  }
}

}  // namespace backplane
