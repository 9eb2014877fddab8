// What `backplane bench` measures OpenCL groups against: a plain copy
// kernel (out[i] = in[i]) on the same device, moving the same bytes as the
// collective reads and writes. On PoCL clEnqueueCopyBuffer runs on one
// thread at 2.5x the time of such a kernel, so it is not the reference.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace backplane::cli {

class OpenclCopyKernel {
 public:
  // The device whose CL_PLATFORM_NAME and CL_DEVICE_NAME are these (as the
  // opencl plugin reports them in its "platform" and "device" properties).
  // Throws std::runtime_error naming the OpenCL call and error when the
  // device is not found or the kernel does not build; always throws in a
  // build without OpenCL.
  OpenclCopyKernel(const std::string &platform_name, const std::string &device_name);
  ~OpenclCopyKernel();
  OpenclCopyKernel(const OpenclCopyKernel &) = delete;
  OpenclCopyKernel &operator=(const OpenclCopyKernel &) = delete;

  // Median microseconds of `iterations` launches, each waited for, of a
  // kernel that reads `bytes_read_and_written / 2` bytes and writes as many
  // (rounded up to 16-byte elements), after `warmup` untimed ones. Throws
  // std::runtime_error when the device refuses the buffers.
  double time_copy(size_t bytes_read_and_written, unsigned iterations, unsigned warmup);

  // "<device> (<platform>)".
  const std::string &label() const { return label_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::string label_;
};

}  // namespace backplane::cli
