// What `backplane bench` measures OpenCL groups against: a plain copy
// kernel (out[i] = in[i]) on the same device, moving the same bytes as the
// collective reads and writes. On PoCL clEnqueueCopyBuffer runs on one
// thread at 2.5x the time of such a kernel, so it is not the reference.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "copy_reference.hpp"

namespace backplane::cli {

class OpenclCopyKernel final : public CopyReference {
 public:
  // The device whose CL_PLATFORM_NAME and CL_DEVICE_NAME are these (as the
  // opencl plugin reports them in its "platform" and "device" properties).
  // Throws std::runtime_error naming the OpenCL call and error when the
  // device is not found or the kernel does not build; always throws in a
  // build without OpenCL.
  OpenclCopyKernel(const std::string &platform_name, const std::string &device_name);
  ~OpenclCopyKernel() override;
  OpenclCopyKernel(const OpenclCopyKernel &) = delete;
  OpenclCopyKernel &operator=(const OpenclCopyKernel &) = delete;

  std::string label() const override { return "copy kernel out[i] = in[i] on " + device_label_; }

 private:
  // One launch per copy, one uint4 per work-item.
  void prepare_copy(size_t bytes) override;
  void copy_and_wait() override;

  struct State;
  std::unique_ptr<State> state_;
  std::string device_label_;  // "<device> (<platform>)"
};

}  // namespace backplane::cli
