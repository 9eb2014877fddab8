// The vulkan plugin's handles (state, buffer, comm, request), the devices
// behind them, and the bodies of its table (Backend). Everything here may
// throw; the trampolines of plugin_support::function_table() are the ABI
// boundary that stops it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backplane/plugin.h"
#include "options.hpp"
#include "plugin_support/buffer_base.hpp"
#include "plugin_support/host_link.hpp"
#include "plugin_support/state_base.hpp"
#include "vulkan_api.hpp"

namespace backplane::vulkan {

inline constexpr const char *kPluginName = "vulkan";
inline constexpr const char *kPluginVersion = "0.1.0";
inline constexpr const char *kKindName = "vulkan";

// The reduction shaders: one per (element type, reduce op), generated from
// shaders/reduce.comp by the build (embedded_shaders.cpp).
inline constexpr std::size_t kShaderVariants = BP_DTYPE_COUNT * BP_REDUCE_OP_COUNT;
constexpr std::size_t shader_variant(std::uint32_t dtype, std::uint32_t op) { return dtype * BP_REDUCE_OP_COUNT + op; }
struct EmbeddedShader {
  const std::uint32_t *words = nullptr;  // SPIR-V; NULL where no variant exists (avg of an integer type)
  std::size_t word_count = 0;
};
extern const std::array<EmbeddedShader, kShaderVariants> kReduceShaders;
// The same reductions reaching their buffers as texel buffers
// (TEXEL_BUFFERS): only the element types with a texel format.
extern const std::array<EmbeddedShader, kShaderVariants> kTexelReduceShaders;

// The push constants of reduce.comp, as its Arguments block lays them out.
struct ReduceArguments {
  VkDeviceAddress table;     // inputs then outputs: one address (uvec2) each
  std::uint32_t count;       // elements
  std::uint32_t inputs;
  std::uint32_t outputs;
  std::uint32_t ranks;       // avg's divisor
};
static_assert(sizeof(ReduceArguments) == 24);

// A buffer with memory of its own, bound, and its address; the building
// block of rank buffers, address tables and staging memory.
struct MemoryBlock {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceAddress address = 0;  // when created with device addresses
  void *mapped = nullptr;       // when host-visible and mapped
  std::size_t bytes = 0;
};

// The most views of one texel-buffer reduction, inputs and outputs
// together (and of each: reduce.comp's MAX_TEXEL_VIEWS, written out by
// constant index).
inline constexpr std::uint32_t kMaxTexelViews = 32;

// One physical device with a compute queue, and the VkDevice every logical
// device (rank) on it shares: data moves between its ranks device to device.
struct Gpu {
  std::size_t index = 0;  // in vkEnumeratePhysicalDevices order
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  VkPhysicalDeviceLimits limits{};
  VkDeviceSize max_allocation_bytes = 0;  // maxMemoryAllocationSize
  // What a pipeline cache's header names (VkPipelineCacheHeaderVersionOne).
  std::uint32_t vendor_id = 0;
  std::uint32_t device_id = 0;
  std::uint32_t driver_version = 0;
  std::array<std::uint8_t, VK_UUID_SIZE> pipeline_cache_uuid{};
  VkPhysicalDeviceMemoryProperties memory_properties{};
  FeatureSet features = 0;  // supported and not disabled: what the VkDevice enables
  std::uint32_t queue_family = 0;
  // Buffers of ranks are mapped and written by memcpy (CPU and integrated
  // devices, unless "transfers": "staged"), else moved through `staging`.
  bool mapped_buffers = false;
  // buffer_wrap_host imports the caller's memory (VK_EXT_external_memory_host,
  // enabled, and importable for rank buffers' usage) in whole pieces of
  // minImportedHostPointerAlignment bytes; 0: it does not.
  VkDeviceSize host_pointer_alignment = 0;
  // This device's capability rows: the kind's, narrowed to its features,
  // with max_bytes = max_allocation_bytes.
  std::vector<bp_capability> capabilities;

  VkDevice device = VK_NULL_HANDLE;
  DeviceFunctions vk;
  VkQueue queue = VK_NULL_HANDLE;
  // Every submission to the queue signals the next value of `timeline` and
  // waits for the one before: work on the device runs in submission order,
  // and a request is complete once the counter reaches its value.
  VkSemaphore timeline = VK_NULL_HANDLE;
  std::mutex queue_mutex;     // guards the queue and `submitted`
  std::uint64_t submitted = 0;
  // Set by the first VK_ERROR_DEVICE_LOST: every later call on the device fails.
  std::atomic<bool> lost{false};
  std::string lost_in;  // the call that saw it; written once, before `lost`

  // One pipeline layout (push constants only) and the reduction pipelines,
  // created at first use; guarded by pipeline_mutex.
  std::mutex pipeline_mutex;
  VkPipelineLayout pipeline_layout = VK_NULL_HANDLE;
  // Seeded from and saved to pipeline_cache_file (pipeline_cache.cpp; empty:
  // no cache directory). Written back only when a pipeline was created
  // since and the driver's data is not the size it was read at: a process
  // whose pipelines all came from the file leaves the file alone.
  VkPipelineCache pipeline_cache = VK_NULL_HANDLE;
  std::string pipeline_cache_file;
  std::size_t pipeline_cache_loaded_bytes = 0;
  bool pipeline_cache_opened = false;
  bool pipeline_created = false;
  std::array<VkPipeline, kShaderVariants> pipelines{};

  // Reductions whose inputs are uniform texel buffers and outputs storage
  // texel buffers (reduce.comp, TEXEL_BUFFERS), bound by push descriptors:
  // chosen at discovery (Options::reduce_inputs). Per element type the
  // four-element format its buffers are viewed with, VK_FORMAT_UNDEFINED
  // where the device has none (those go by address). One layout per shape,
  // one pipeline per (variant, shape), made at first use under
  // pipeline_mutex.
  bool texel_buffers = false;
  std::uint32_t max_texel_views = 0;  // descriptors one dispatch may push, at most kMaxTexelViews
  std::array<VkFormat, BP_DTYPE_COUNT> texel_formats{};
  struct TexelShape {
    std::uint32_t inputs = 0, outputs = 0;
    auto operator<=>(const TexelShape &) const = default;
  };
  struct TexelLayout {
    VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
    VkPipelineLayout pipeline_layout = VK_NULL_HANDLE;
  };
  std::map<TexelShape, TexelLayout> texel_layouts;
  std::map<std::pair<std::size_t, TexelShape>, VkPipeline> texel_pipelines;

  // Host transfers and fills that go through the queue: one at a time.
  std::mutex transfer_mutex;
  VkCommandPool transfer_pool = VK_NULL_HANDLE;
  VkCommandBuffer transfer_commands = VK_NULL_HANDLE;
  MemoryBlock staging;  // host-visible, created at the first staged transfer

  Gpu() = default;
  Gpu(const Gpu &) = delete;
  Gpu &operator=(const Gpu &) = delete;
  ~Gpu();

  // A memory type among `allowed_types` with every flag of `required`
  // (preferring one that also has `preferred`); UINT32_MAX when none.
  std::uint32_t memory_type(std::uint32_t allowed_types, VkMemoryPropertyFlags required,
                            VkMemoryPropertyFlags preferred = 0) const;
};

// One device the plugin exposes: a rank's place on a physical device.
struct Device {
  Gpu *gpu = nullptr;
  std::uint32_t rank_on_gpu = 0;  // 0 .. ranks_per_device - 1
  std::string name;               // the physical device's, with the rank when there are several
  std::string description;        // one line for device_info
  std::vector<std::string> property_keys, property_values;
  std::vector<const char *> property_key_pointers, property_value_pointers;
};

}  // namespace backplane::vulkan

// One per bp_plugin_entry call, so two hosts in one process never share one.
// StateBase's mutex guards the fields below; collectives never take it.
struct bp_plugin_state : backplane::plugin_support::StateBase {
  backplane::vulkan::Options options;
  backplane::vulkan::VulkanLoader loader;
  VkInstance instance = VK_NULL_HANDLE;
  backplane::vulkan::InstanceFunctions vk;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  // What discovery found under the current options. Replaced only by
  // configure, while no buffer or comm exists.
  std::vector<std::unique_ptr<backplane::vulkan::Gpu>> gpus;
  std::vector<std::unique_ptr<backplane::vulkan::Device>> devices;
  // Devices of an earlier configure, kept (without their GPU) because the
  // strings device_info handed out stay valid until destroy.
  std::vector<std::unique_ptr<backplane::vulkan::Device>> retired_devices;
  // kind_info's line: why there is no device, or what was left out.
  std::string kind_status;
  // What the validation messenger reports through (it may run on any thread).
  struct ValidationSink {
    const bp_host_services *services = nullptr;
    std::atomic<std::uint64_t> messages{0};
  } validation;

  ~bp_plugin_state();
};

// Memory on one rank's device, zeroed at creation, or the caller's memory
// imported by buffer_wrap_host (then `block.mapped` is the caller's
// pointer); `block.buffer` is VK_NULL_HANDLE only when `bytes` is 0 (Vulkan
// has no empty buffers).
struct bp_plugin_buffer : backplane::plugin_support::BufferBase {
  backplane::vulkan::Gpu *gpu = nullptr;
  backplane::vulkan::MemoryBlock block;
  // Unique in the process, never reused: what a recorded collective names
  // its buffers by (collectives.cpp, CallShape).
  std::uint64_t serial = 0;
  ~bp_plugin_buffer();
};

struct bp_plugin_comm;  // collectives.cpp
struct bp_plugin_request;

// Returns the bp_code of `expression` from the enclosing function unless it is BP_OK.
#define BP_VULKAN_CHECK(expression)                           \
  do {                                                        \
    const std::int32_t bp_vulkan_status_ = (expression);      \
    if (bp_vulkan_status_ != BP_OK) return bp_vulkan_status_; \
  } while (0)

namespace backplane::vulkan {

using plugin_support::fail;
void log(const bp_host_services *services, std::int32_t level, const char *format, ...) noexcept
    __attribute__((format(printf, 3, 4)));

// A Vulkan call on `gpu` that returned `result`: "<call> (<what>) on
// '<device>': VK_ERROR_OUT_OF_DEVICE_MEMORY", as OUT_OF_MEMORY for the two
// out-of-memory results and DEVICE_FAILURE for the rest. DEVICE_LOST marks
// the device lost for every later call.
std::int32_t fail_vk(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu, VkResult result,
                     const char *call, const char *what);
// DEVICE_FAILURE naming the call that lost `gpu`, or BP_OK while it is not lost.
std::int32_t check_not_lost(const bp_host_services *services, bp_error_sink *sink, const Gpu &gpu);

// What a rank's buffer is used for: storage by address, copies, and the
// texel views of reductions where the device reads its inputs so.
inline VkBufferUsageFlags rank_buffer_usage(const Gpu &gpu) {
  return VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
         VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
         (gpu.texel_buffers ? VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT | VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT : 0);
}

// memory.cpp: a buffer of `bytes` (> 0) in memory with `required` flags,
// addressable by shaders when `addressable`, mapped when host-visible and
// `map`. Before the driver is asked, a size above the device's
// maxMemoryAllocationSize is OUT_OF_MEMORY naming the limit.
//
// With `import`, the buffer's memory is instead the caller's host memory
// around it (VK_EXT_external_memory_host): whole pieces from `base`, the
// buffer bound `offset` bytes in; refused with INVALID_ARGUMENT when the
// device cannot bind a buffer at that offset.
struct HostImport {
  void *base = nullptr;          // aligned to gpu.host_pointer_alignment
  VkDeviceSize bytes = 0;        // a multiple of it
  VkDeviceSize offset = 0;       // of the caller's pointer from `base`
  std::uint32_t memory_types = 0;  // vkGetMemoryHostPointerPropertiesEXT's
};
std::int32_t create_block(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu, std::size_t bytes,
                          VkBufferUsageFlags usage, VkMemoryPropertyFlags required, bool map, MemoryBlock &block,
                          const HostImport *import = nullptr);
void destroy_block(Gpu &gpu, MemoryBlock &block) noexcept;
// Records a barrier that makes shader and transfer writes visible to the
// host (mapped reads once the submission completed).
void host_read_barrier(Gpu &gpu, VkCommandBuffer commands);

// Submits `commands` (recorded, ended) to the device's queue after every
// earlier submission, signalling the timeline's next value, stored in *value.
std::int32_t submit(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu, VkCommandBuffer commands,
                    const char *what, std::uint64_t *value);
// Waits until the timeline reaches `value`; timeout_ns < 0: no limit.
// VK_TIMEOUT is returned as is (no report), for the caller to word.
VkResult wait_for(Gpu &gpu, std::uint64_t value, std::int64_t timeout_ns);

// pipeline_cache.cpp: creates gpu.pipeline_cache (at the device's first
// pipeline: a process that runs no collective reads no file), seeded from
// the device's cache file when the file's header is this device's and
// driver's; left VK_NULL_HANDLE if the driver refuses even an empty one.
// The caller holds gpu.pipeline_mutex.
void open_pipeline_cache(const bp_host_services *services, Gpu &gpu);
// Writes the cache file when pipelines went in since it was read; failures
// are logged and change nothing else.
void save_pipeline_cache(const bp_host_services *services, Gpu &gpu);

// discovery.cpp: finds the devices under `options` (the loader, the
// instance, each physical device's VkDevice). Replaces what the state held;
// the caller holds the state's mutex and no buffer or comm exists.
void discover(bp_plugin_state &state, const Options &options);
// Everything discovery made, in reverse.
void forget_devices(bp_plugin_state &state);

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

  // memory.cpp
  static std::int32_t buffer_allocate(bp_plugin_state &state, bp_plugin_buffer &buffer, bp_error_sink *sink);
  static std::int32_t buffer_wrap_host(bp_plugin_state &state, bp_plugin_buffer &buffer, void *memory,
                                      bp_error_sink *sink);
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
  static std::int32_t request_test(bp_plugin_state &state, bp_plugin_request &request, bool &done,
                                   bp_error_sink *sink);
  static std::int32_t request_wait(bp_plugin_state &state, bp_plugin_request &request, std::int64_t timeout_ns,
                                   bp_error_sink *sink);
  static void request_release(bp_plugin_state &state, bp_plugin_request *request);
};

}  // namespace backplane::vulkan
