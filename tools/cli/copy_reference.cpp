// make_copy_reference (copy_reference.hpp): the one place that knows which
// device kind has which copy reference and which property names its device.
#include "copy_reference.hpp"

#include <algorithm>
#include <chrono>

#include "cli.hpp"
#include "opencl_copy.hpp"
#include "vulkan_copy.hpp"

namespace backplane::cli {

double CopyReference::time_copy(std::size_t bytes_read_and_written, unsigned iterations, unsigned warmup) {
  const std::size_t elements = std::max<std::size_t>(1, (bytes_read_and_written / 2 + kCopyElement - 1) / kCopyElement);
  prepare_copy(elements * kCopyElement);
  using Clock = std::chrono::steady_clock;
  std::vector<double> micros;
  micros.reserve(iterations);
  for (unsigned i = 0; i < warmup + iterations; ++i) {
    const Clock::time_point start = Clock::now();
    copy_and_wait();
    if (i >= warmup) micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return median(std::move(micros));
}

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
