// The opencl plugin's handles (state, buffer, comm, request) and the bodies
// of its table (Backend). Everything here may throw; the trampolines of
// plugin_support::function_table() are the ABI boundary that stops it.
#pragma once

#include <CL/cl.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backplane/plugin.h"
#include "cl_errors.hpp"
#include "options.hpp"
#include "plugin_support/buffer_base.hpp"
#include "plugin_support/host_link.hpp"
#include "plugin_support/state_base.hpp"

namespace backplane::opencl {

// A reference to an OpenCL object, released when the holder goes. The
// plugin keeps every context, queue, program and kernel in one of these.
template <typename T, cl_int (*Release)(T)>
class ClHandle {
 public:
  ClHandle() = default;
  explicit ClHandle(T handle) : handle_(handle) {}
  ~ClHandle() { reset(); }
  ClHandle(const ClHandle &) = delete;
  ClHandle &operator=(const ClHandle &) = delete;
  ClHandle(ClHandle &&other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  ClHandle &operator=(ClHandle &&other) noexcept {
    if (this != &other) {
      reset();
      handle_ = other.handle_;
      other.handle_ = nullptr;
    }
    return *this;
  }
  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }
  void reset() {
    if (handle_ != nullptr) Release(handle_);
    handle_ = nullptr;
  }

 private:
  T handle_ = nullptr;
};
using ContextHandle = ClHandle<cl_context, clReleaseContext>;
using QueueHandle = ClHandle<cl_command_queue, clReleaseCommandQueue>;
using ProgramHandle = ClHandle<cl_program, clReleaseProgram>;
using KernelHandle = ClHandle<cl_kernel, clReleaseKernel>;
using MemHandle = ClHandle<cl_mem, clReleaseMemObject>;

// Comms of up to this many ranks get kernels built for their rank count
// (kernels/collectives.cl, BP_RANKS); larger ones share generic kernels.
inline constexpr std::size_t kMaxSpecializedRanks = 8;

// What a device's kernels may use; decides its capability rows and the
// program's build options.
struct DeviceFeatures {
  bool fp64 = false;   // cl_khr_fp64, or a non-zero CL_DEVICE_DOUBLE_FP_CONFIG
  bool fp16 = false;   // cl_khr_fp16
  bool int64 = false;  // full profile, or cles_khr_int64
};

struct Platform;

// One OpenCL device the plugin exposes, device index = position in
// bp_plugin_state::devices.
struct Device {
  cl_device_id id = nullptr;
  std::size_t platform = 0;  // index into bp_plugin_state::platforms
  std::string name;          // CL_DEVICE_NAME
  std::string description;   // one line for device_info
  std::uint64_t global_memory_bytes = 0;
  std::uint64_t max_allocation_bytes = 0;  // CL_DEVICE_MAX_MEM_ALLOC_SIZE
  bool on_host_cores = false;              // CL_DEVICE_TYPE_CPU
  DeviceFeatures features;
  // Named facts (device_info's properties), and the pointers handed out.
  std::vector<std::string> property_keys, property_values;
  std::vector<const char *> property_key_pointers, property_value_pointers;
  // This device's capability rows: the kind's, narrowed to its features,
  // with max_bytes = max_allocation_bytes.
  std::vector<bp_capability> capabilities;
  // Buffer writes and reads, and barriers; created with the device.
  QueueHandle queue;
  // The device's kernels for comms of n ranks (1..8) at index n, and for
  // comms of more at index 0: built on the first such comm that computes
  // on it (program_cache.cpp); guarded by bp_plugin_state::mutex.
  std::array<ProgramHandle, kMaxSpecializedRanks + 1> programs;
};

// One platform with at least one exposed device: a single context holds all
// of them, so any kernel of the platform reads any buffer of it.
struct Platform {
  cl_platform_id id = nullptr;
  std::string name;     // CL_PLATFORM_NAME
  std::string version;  // CL_PLATFORM_VERSION
  std::vector<std::size_t> devices;  // indices into bp_plugin_state::devices
  ContextHandle context;
};

}  // namespace backplane::opencl

// One per bp_plugin_entry call, so two hosts in one process never share one.
// StateBase's mutex guards the fields below; collectives never take it.
// Buffers and comms alive (its live_objects) hold the current contexts, so
// configure is refused while any exists.
struct bp_plugin_state : backplane::plugin_support::StateBase {
  backplane::opencl::Options options;
  // What discovery found under the current options. Replaced only by
  // configure, while no buffer or comm exists. Devices are held by pointer:
  // device_info hands out pointers into them.
  std::vector<backplane::opencl::Platform> platforms;
  std::vector<std::unique_ptr<backplane::opencl::Device>> devices;
  // Devices of an earlier configure, kept (without their OpenCL objects)
  // because the strings device_info handed out stay valid until destroy.
  std::vector<std::unique_ptr<backplane::opencl::Device>> retired_devices;
  // kind_info's line: why there is no device, or what was left out.
  std::string kind_status;
  // Where program binaries are cached; empty: no cache (program_cache.cpp).
  std::string cache_directory;
  bool cache_directory_resolved = false;
};

// Memory on one device, in its platform's context. `mem` is NULL only when
// `bytes` is 0 (OpenCL has no empty buffers).
struct bp_plugin_buffer : backplane::plugin_support::BufferBase {
  backplane::opencl::MemHandle mem;
};

struct bp_plugin_comm;  // collectives.cpp

namespace backplane::opencl {
struct CompletionSignal;  // requests.cpp
}

// A collective in flight (requests.cpp): the cl_event of the last command
// it enqueued on its comm's in-order queue, which completes after every
// command before it. It keeps nothing of the call's arguments: the
// kernels' arguments were captured when they were enqueued.
struct bp_plugin_request {
  cl_event event = nullptr;          // owned: released with the request
  const char *collective = nullptr;  // its name (static), for messages
  // The comm's lead, for messages; devices live until the state's destroy,
  // so a request never depends on its comm.
  const backplane::opencl::Device *device = nullptr;
  // Completed without error, and synchronised with (clWaitForEvents).
  std::atomic<bool> complete{false};
  // Set by the first wait with a timeout: what the event's callback
  // signals. Guarded by `mutex`.
  std::mutex mutex;
  std::shared_ptr<backplane::opencl::CompletionSignal> signal;

  bp_plugin_request() = default;
  bp_plugin_request(const bp_plugin_request &) = delete;
  bp_plugin_request &operator=(const bp_plugin_request &) = delete;
  ~bp_plugin_request();
};

// Returns the bp_code of `expression` from the enclosing function unless it is BP_OK.
#define BP_OPENCL_CHECK(expression)                           \
  do {                                                        \
    const std::int32_t bp_opencl_status_ = (expression);      \
    if (bp_opencl_status_ != BP_OK) return bp_opencl_status_; \
  } while (0)

namespace backplane::opencl {

inline constexpr const char *kPluginName = "opencl";
inline constexpr const char *kPluginVersion = "0.1.0";
inline constexpr const char *kKindName = "opencl";

// Talking back to the host (plugin_support/host_link.hpp): fail() reports
// `code` with a printf-formatted one-line message and returns the code, for
// `return fail(...)`; log() writes a line in the plugin's category
// (host_services.cpp). Neither allocates.
using plugin_support::fail;
void log(const bp_host_services *services, std::int32_t level, const char *format, ...) noexcept
    __attribute__((format(printf, 3, 4)));
// An OpenCL call that returned `status`: "<call>(<what>) on '<device>':
// CL_OUT_OF_RESOURCES (-5)", with the bp_code cl_status_code() gives.
std::int32_t fail_cl(const bp_host_services *services, bp_error_sink *sink, cl_int status, const char *call,
                     const char *what, const char *device) noexcept;

// discovery.cpp: finds platforms and devices under `options`, creates a
// context per platform and a queue per device. Replaces what the state
// held; the caller holds the state's mutex.
void discover(bp_plugin_state &state, const Options &options);

// The bodies of the table, for plugin_support::function_table(), which
// says what each may assume.
struct Backend {
  using State = bp_plugin_state;
  using Buffer = bp_plugin_buffer;
  static constexpr const char *kName = kPluginName;
  static constexpr const char *kKind = kKindName;

  static std::size_t devices_now(const bp_plugin_state &state) { return state.devices.size(); }

  // discovery.cpp
  static std::int32_t configure(bp_plugin_state &state, const char *options_json, bp_error_sink *sink);
  static std::int32_t device_info(bp_plugin_state &state, std::uint32_t device, bp_plugin_device_info &info,
                                  bp_error_sink *sink);
  static std::int32_t kind_info(bp_plugin_state &state, bp_plugin_kind_info &info, bp_error_sink *sink);

  // buffers.cpp. No buffer_wrap_host: an OpenCL device does not in general
  // address the caller's memory.
  static std::int32_t buffer_allocate(bp_plugin_state &state, bp_plugin_buffer &buffer, bp_error_sink *sink);
  static std::int32_t buffer_write(bp_plugin_state &state, bp_plugin_buffer &buffer, std::size_t offset,
                                   const void *source, std::size_t bytes, bp_error_sink *sink);
  static std::int32_t buffer_read(bp_plugin_state &state, const bp_plugin_buffer &buffer, std::size_t offset,
                                  void *destination, std::size_t bytes, bp_error_sink *sink);

  // collectives.cpp
  static std::int32_t comm_create(bp_plugin_state &state, std::span<const std::uint32_t> devices,
                                  bp_plugin_comm **out, bp_error_sink *sink);
  static void comm_destroy(bp_plugin_state &state, bp_plugin_comm *comm);
  static std::int32_t comm_info(bp_plugin_state &state, bp_plugin_comm &comm, bp_plugin_comm_info &info,
                                bp_error_sink *sink);
  static std::int32_t collective_start(bp_plugin_state &state, bp_plugin_comm &comm, const bp_collective_args &args,
                                       bp_plugin_request **out, bp_error_sink *sink);

  // requests.cpp
  static std::int32_t request_test(bp_plugin_state &state, bp_plugin_request &request, bool &done,
                                   bp_error_sink *sink);
  static std::int32_t request_wait(bp_plugin_state &state, bp_plugin_request &request, std::int64_t timeout_ns,
                                   bp_error_sink *sink);
  static void request_release(bp_plugin_state &state, bp_plugin_request *request);
};

}  // namespace backplane::opencl
