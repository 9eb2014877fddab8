// The device's VkPipelineCache, kept on disk between processes
// (plugin_support/disk_cache.hpp: where, how files are read and written),
// so that a later process skips the driver's shader compiler.
//
// One file per physical device and plugin build: the key names the
// device's pipeline-cache identity (vendor, device, pipelineCacheUUID,
// driver version), the features the VkDevice enables (they change what the
// compiler emits) and every embedded shader module (a rebuilt plugin starts
// a new file instead of growing the old one with pipelines nothing asks
// for). A file's header is checked against the device before the driver
// sees it: a file from another device or driver, or a truncated one, is
// ignored and replaced. Beyond the header the bytes are the driver's to
// check (the Vulkan spec requires it to accept any data whose header
// matches, or to reject it).
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "plugin_state.hpp"
#include "plugin_support/disk_cache.hpp"

namespace backplane::vulkan {
namespace {

// VkPipelineCacheHeaderVersionOne, laid out as the spec fixes it (4 words,
// then the UUID): read field by field, since the file's bytes need not be
// aligned for the struct.
constexpr std::size_t kHeaderBytes = 16 + VK_UUID_SIZE;

std::uint32_t word_at(const unsigned char *bytes, std::size_t offset) {
  std::uint32_t word = 0;
  std::memcpy(&word, bytes + offset, sizeof word);
  return word;
}

// Why `data` is not a pipeline cache `gpu` wrote, or empty when it is.
std::string header_mismatch(const Gpu &gpu, const std::vector<unsigned char> &data) {
  if (data.size() < kHeaderBytes) return "shorter than a header";
  const std::uint32_t header_size = word_at(data.data(), 0);
  if (header_size < kHeaderBytes || header_size > data.size()) return "its header size is wrong";
  if (word_at(data.data(), 4) != VK_PIPELINE_CACHE_HEADER_VERSION_ONE) return "an unknown header version";
  if (word_at(data.data(), 8) != gpu.vendor_id || word_at(data.data(), 12) != gpu.device_id) {
    return "another vendor's or device's";
  }
  if (std::memcmp(data.data() + 16, gpu.pipeline_cache_uuid.data(), VK_UUID_SIZE) != 0) {
    return "another driver's (pipelineCacheUUID differs)";
  }
  return {};
}

std::string cache_file(const bp_host_services *services, const Gpu &gpu) {
  const std::string directory = plugin_support::cache_directory(services, kKindName, "pipeline cache",
                                                                "shaders are compiled in every process");
  if (directory.empty()) return {};
  std::string uuid;
  for (const std::uint8_t byte : gpu.pipeline_cache_uuid) uuid += std::to_string(byte) + ".";
  std::vector<std::string> parts = {"vulkan pipeline cache 1",
                                    std::to_string(gpu.vendor_id),
                                    std::to_string(gpu.device_id),
                                    uuid,
                                    std::to_string(gpu.driver_version),
                                    std::to_string(gpu.features),
                                    gpu.texel_buffers ? "push descriptors" : ""};
  for (const auto *shaders : {&kReduceShaders, &kTexelReduceShaders}) {
    for (const EmbeddedShader &shader : *shaders) {
      if (shader.words == nullptr) continue;
      parts.emplace_back(reinterpret_cast<const char *>(shader.words), shader.word_count * sizeof(std::uint32_t));
    }
  }
  const std::string key = plugin_support::cache_key(parts);
  return (std::filesystem::path(directory) / ("vulkan-" + key + ".bin")).string();
}

}  // namespace

void open_pipeline_cache(const bp_host_services *services, Gpu &gpu) {
  gpu.pipeline_cache_opened = true;
  gpu.pipeline_cache_file = cache_file(services, gpu);
  std::optional<std::vector<unsigned char>> data;
  if (!gpu.pipeline_cache_file.empty()) {
    data = plugin_support::read_cache_file(services, kKindName, gpu.pipeline_cache_file);
    if (data) {
      if (const std::string mismatch = header_mismatch(gpu, *data); !mismatch.empty()) {
        log(services, BP_LOG_DEBUG, "pipeline cache %s is not usable on '%s' (%s); starting empty",
            gpu.pipeline_cache_file.c_str(), gpu.name.c_str(), mismatch.c_str());
        data.reset();
      }
    }
  }
  VkPipelineCacheCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
  if (data) {
    info.initialDataSize = data->size();
    info.pInitialData = data->data();
    const VkResult result = gpu.vk.vkCreatePipelineCache(gpu.device, &info, nullptr, &gpu.pipeline_cache);
    if (result == VK_SUCCESS) {
      log(services, BP_LOG_DEBUG, "pipeline cache for '%s' loaded from %s (%zu bytes)", gpu.name.c_str(),
          gpu.pipeline_cache_file.c_str(), data->size());
      gpu.pipeline_cache_loaded_bytes = data->size();
      return;
    }
    log(services, BP_LOG_DEBUG, "the driver refuses pipeline cache %s (%s); starting empty",
        gpu.pipeline_cache_file.c_str(), result_name(result).c_str());
    info.initialDataSize = 0;
    info.pInitialData = nullptr;
  }
  if (const VkResult result = gpu.vk.vkCreatePipelineCache(gpu.device, &info, nullptr, &gpu.pipeline_cache);
      result != VK_SUCCESS) {
    // Pipelines compile without one; nothing is saved.
    gpu.pipeline_cache = VK_NULL_HANDLE;
    log(services, BP_LOG_DEBUG, "no pipeline cache on '%s' (vkCreatePipelineCache: %s)", gpu.name.c_str(),
        result_name(result).c_str());
  }
}

void save_pipeline_cache(const bp_host_services *services, Gpu &gpu) {
  std::lock_guard<std::mutex> lock(gpu.pipeline_mutex);
  if (!gpu.pipeline_created || gpu.pipeline_cache == VK_NULL_HANDLE || gpu.pipeline_cache_file.empty()) return;
  gpu.pipeline_created = false;
  std::size_t size = 0;
  VkResult result = gpu.vk.vkGetPipelineCacheData(gpu.device, gpu.pipeline_cache, &size, nullptr);
  if (result == VK_SUCCESS && size == gpu.pipeline_cache_loaded_bytes) return;  // every pipeline came from the file
  std::vector<unsigned char> data;
  if (result == VK_SUCCESS && size != 0 && size <= plugin_support::kMaxCacheFileBytes) {
    data.resize(size);
    result = gpu.vk.vkGetPipelineCacheData(gpu.device, gpu.pipeline_cache, &size, data.data());
    data.resize(size);
  }
  // VK_INCOMPLETE (the cache grew between the calls) is not worth a retry:
  // the next process writes it.
  if (result != VK_SUCCESS || data.empty()) {
    log(services, BP_LOG_DEBUG, "pipeline cache of '%s' not saved (vkGetPipelineCacheData: %s, %zu bytes)",
        gpu.name.c_str(), result_name(result).c_str(), size);
    return;
  }
  if (!plugin_support::write_cache_file(services, kKindName, gpu.pipeline_cache_file, data.data(), data.size())) {
    return;
  }
  log(services, BP_LOG_DEBUG, "pipeline cache of '%s' saved to %s (%zu bytes)", gpu.name.c_str(),
      gpu.pipeline_cache_file.c_str(), data.size());
  gpu.pipeline_cache_loaded_bytes = data.size();
}

}  // namespace backplane::vulkan
