// Buffers of the opencl devices: cl_mem objects in the device's platform
// context, placed on the device at creation, written and read with blocking
// transfers on the device's queue. Host memory is never wrapped: a device in
// general does not address it (buffer_wrap_host is NULL in the table).
// plugin_support::function_table() checks, counts and frees them.
#include "plugin_state.hpp"

namespace backplane::opencl {

std::int32_t Backend::buffer_allocate(bp_plugin_state &state, bp_plugin_buffer &buffer, bp_error_sink *sink) {
  // The device and its context stay as they are while the buffer is
  // counted (configure is refused meanwhile).
  const Device &device = *state.devices[buffer.device];
  const Platform &platform = state.platforms[device.platform];
  const std::size_t bytes = buffer.bytes;

  // Refused before the driver sees it: some drivers accept any size and
  // fail at first use, far from the cause.
  if (bytes > device.max_allocation_bytes) {
    return fail(state.services, sink, BP_OUT_OF_MEMORY,
                "opencl buffer_create: %zu bytes on '%s' exceed its largest allocation, "
                "CL_DEVICE_MAX_MEM_ALLOC_SIZE = %llu bytes",
                bytes, device.name.c_str(), static_cast<unsigned long long>(device.max_allocation_bytes));
  }
  if (bytes == 0) return BP_OK;  // OpenCL has no empty buffers

  cl_int status = CL_SUCCESS;
  buffer.mem = MemHandle(clCreateBuffer(platform.context.get(), CL_MEM_READ_WRITE, bytes, nullptr, &status));
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clCreateBuffer", std::to_string(bytes).append(" bytes").c_str(),
                   device.name.c_str());
  }
  // Zeros, written by the device now: the memory is allocated on the
  // device (and an allocation failure reported) here rather than in the
  // first collective, and the buffer starts as zeros as the cpu plugin's do.
  const cl_uchar zero = 0;
  status = clEnqueueFillBuffer(device.queue.get(), buffer.mem.get(), &zero, sizeof zero, 0, bytes, 0, nullptr,
                               nullptr);
  if (status == CL_SUCCESS) status = clFinish(device.queue.get());
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clEnqueueFillBuffer", std::to_string(bytes).append(" bytes").c_str(),
                   device.name.c_str());
  }
  return BP_OK;
}

std::int32_t Backend::buffer_write(bp_plugin_state &state, bp_plugin_buffer &buffer, std::size_t offset,
                                   const void *source, std::size_t bytes, bp_error_sink *sink) {
  // The buffer keeps its device alive (configure is refused meanwhile).
  const Device &device = *state.devices[buffer.device];
  const cl_int status =
      clEnqueueWriteBuffer(device.queue.get(), buffer.mem.get(), CL_TRUE, offset, bytes, source, 0, nullptr, nullptr);
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clEnqueueWriteBuffer", std::to_string(bytes).append(" bytes").c_str(),
                   device.name.c_str());
  }
  return BP_OK;
}

std::int32_t Backend::buffer_read(bp_plugin_state &state, const bp_plugin_buffer &buffer, std::size_t offset,
                                  void *destination, std::size_t bytes, bp_error_sink *sink) {
  const Device &device = *state.devices[buffer.device];
  const cl_int status = clEnqueueReadBuffer(device.queue.get(), buffer.mem.get(), CL_TRUE, offset, bytes,
                                            destination, 0, nullptr, nullptr);
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clEnqueueReadBuffer", std::to_string(bytes).append(" bytes").c_str(),
                   device.name.c_str());
  }
  return BP_OK;
}

}  // namespace backplane::opencl
