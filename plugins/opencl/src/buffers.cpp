// Buffers of the opencl devices: cl_mem objects in the device's platform
// context, placed on the device at creation, written and read with blocking
// transfers on the device's queue. Host memory is never wrapped: a device in
// general does not address it (buffer_wrap_host is NULL in the table).
#include "plugin_state.hpp"

namespace backplane::opencl {
namespace {

// Counts a buffer against the device set, after checking the device exists;
// configure is refused while the count is non-zero. Returns the device.
const Device *claim_device(bp_plugin_state &state, std::uint32_t device, bp_error_sink *sink) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (device >= state.devices.size()) {
    fail(state.services, sink, BP_INVALID_ARGUMENT, "opencl buffer_create: device %u does not exist (%zu devices)",
         static_cast<unsigned>(device), state.devices.size());
    return nullptr;
  }
  ++state.live_objects;
  return state.devices[device].get();
}

void release_device(bp_plugin_state &state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  --state.live_objects;
}

}  // namespace

std::int32_t buffer_create(bp_plugin_state &state, std::uint32_t kind, std::uint32_t device_index,
                           std::size_t bytes, bp_plugin_buffer **out, bp_error_sink *sink) {
  if (const std::int32_t status = check_kind(state, kind, sink); status != BP_OK) return status;
  if (out == nullptr) return fail(state.services, sink, BP_INVALID_ARGUMENT, "opencl buffer_create: out is NULL");
  *out = nullptr;
  const Device *device = claim_device(state, device_index, sink);
  if (device == nullptr) return BP_INVALID_ARGUMENT;
  // The device and its context stay as they are while the claim holds.
  const Platform &platform = state.platforms[device->platform];

  // Refused before the driver sees it: some drivers accept any size and
  // fail at first use, far from the cause.
  if (bytes > device->max_allocation_bytes) {
    release_device(state);
    return fail(state.services, sink, BP_OUT_OF_MEMORY,
                "opencl buffer_create: %zu bytes on '%s' exceed its largest allocation, "
                "CL_DEVICE_MAX_MEM_ALLOC_SIZE = %llu bytes",
                bytes, device->name.c_str(), static_cast<unsigned long long>(device->max_allocation_bytes));
  }

  std::unique_ptr<bp_plugin_buffer> buffer;
  try {
    buffer = std::make_unique<bp_plugin_buffer>();
  } catch (...) {
    release_device(state);
    throw;
  }
  buffer->bytes = bytes;
  buffer->device = device_index;
  if (bytes != 0) {
    cl_int status = CL_SUCCESS;
    buffer->mem = MemHandle(clCreateBuffer(platform.context.get(), CL_MEM_READ_WRITE, bytes, nullptr, &status));
    if (status != CL_SUCCESS) {
      release_device(state);
      return fail_cl(state.services, sink, status, "clCreateBuffer", std::to_string(bytes).append(" bytes").c_str(),
                     device->name.c_str());
    }
    // Zeros, written by the device now: the memory is allocated on the
    // device (and an allocation failure reported) here rather than in the
    // first collective, and the buffer starts as zeros as the cpu
    // plugin's do.
    const cl_uchar zero = 0;
    cl_mem mem = buffer->mem.get();
    status = clEnqueueFillBuffer(device->queue.get(), mem, &zero, sizeof zero, 0, bytes, 0, nullptr, nullptr);
    if (status == CL_SUCCESS) status = clFinish(device->queue.get());
    if (status != CL_SUCCESS) {
      buffer->mem.reset();
      release_device(state);
      return fail_cl(state.services, sink, status, "clEnqueueFillBuffer",
                     std::to_string(bytes).append(" bytes").c_str(), device->name.c_str());
    }
  }
  *out = buffer.release();
  return BP_OK;
}

void buffer_destroy(bp_plugin_state &state, bp_plugin_buffer *buffer) {
  if (buffer == nullptr) return;
  delete buffer;
  release_device(state);
}

std::int32_t buffer_write(bp_plugin_state &state, bp_plugin_buffer *buffer, std::size_t offset, const void *source,
                          std::size_t bytes, bp_error_sink *sink) {
  // The host checked the range against the buffer's size (plugin.h).
  if (bytes == 0) return BP_OK;
  // The buffer keeps its device alive (configure is refused meanwhile).
  const Device &device = *state.devices[buffer->device];
  const cl_int status =
      clEnqueueWriteBuffer(device.queue.get(), buffer->mem.get(), CL_TRUE, offset, bytes, source, 0, nullptr, nullptr);
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clEnqueueWriteBuffer", std::to_string(bytes).append(" bytes").c_str(),
                   device.name.c_str());
  }
  return BP_OK;
}

std::int32_t buffer_read(bp_plugin_state &state, const bp_plugin_buffer *buffer, std::size_t offset,
                         void *destination, std::size_t bytes, bp_error_sink *sink) {
  // The host checked the range against the buffer's size (plugin.h).
  if (bytes == 0) return BP_OK;
  const Device &device = *state.devices[buffer->device];
  const cl_int status = clEnqueueReadBuffer(device.queue.get(), buffer->mem.get(), CL_TRUE, offset, bytes,
                                            destination, 0, nullptr, nullptr);
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clEnqueueReadBuffer", std::to_string(bytes).append(" bytes").c_str(),
                   device.name.c_str());
  }
  return BP_OK;
}

}  // namespace backplane::opencl
