// make_copy_reference (copy_reference.hpp): the one place that knows which
// device kind has which copy reference and which property names its device.
#include "copy_reference.hpp"

#include "opencl_copy.hpp"
#include "vulkan_copy.hpp"

namespace backplane::cli {

std::unique_ptr<CopyReference> make_copy_reference(
    const std::string &kind, const std::vector<std::pair<std::string, std::string>> &properties) {
  auto property = [&](const char *key) {
    for (const auto &[name, value] : properties)
      if (name == key) return value;
    return std::string();
  };
  if (kind == "opencl") return std::make_unique<OpenclCopyKernel>(property("platform"), property("device"));
  if (kind == "vulkan") return std::make_unique<VulkanCopyBuffer>(property("uuid"));
  return nullptr;
}

}  // namespace backplane::cli
