// The Vulkan copy reference of `backplane bench`: vkCmdCopyBuffer between
// two device-local buffers on the physical device the vulkan plugin names by
// its "uuid" property, one submission per copy, waited on a fence, as the
// plugin submits one command buffer per collective.
#pragma once

#include <memory>
#include <string>

#include "copy_reference.hpp"

namespace backplane::cli {

class VulkanCopyBuffer final : public CopyReference {
 public:
  // Throws std::runtime_error naming the Vulkan call and VkResult when the
  // device is not found or cannot be opened; always throws in a build
  // without Vulkan.
  explicit VulkanCopyBuffer(const std::string &device_uuid);
  ~VulkanCopyBuffer() override;
  VulkanCopyBuffer(const VulkanCopyBuffer &) = delete;
  VulkanCopyBuffer &operator=(const VulkanCopyBuffer &) = delete;

  std::string label() const override { return "vkCmdCopyBuffer on " + device_name_; }

 private:
  void prepare_copy(std::size_t bytes) override;
  void copy_and_wait() override;

  struct State;
  std::unique_ptr<State> state_;
  std::string device_name_;
};

}  // namespace backplane::cli
