// The copy-kernel reference of `backplane bench` (see opencl_copy.hpp).
#include "opencl_copy.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#if BACKPLANE_CLI_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

namespace backplane::cli {

#if BACKPLANE_CLI_OPENCL
namespace {

// 16-byte elements: one load and one store per work-item, as a real kernel
// of the device would use its widest natural vector.
constexpr const char *kCopySource =
    "__kernel void copy(__global const uint4 *in, __global uint4 *out) {\n"
    "  size_t i = get_global_id(0);\n"
    "  out[i] = in[i];\n"
    "}\n";

void check(cl_int status, const char *call) {
  if (status != CL_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed with OpenCL error " + std::to_string(status));
}

std::string platform_text(cl_platform_id platform, cl_platform_info what) {
  size_t size = 0;
  check(clGetPlatformInfo(platform, what, 0, nullptr, &size), "clGetPlatformInfo");
  std::string text(size, '\0');
  check(clGetPlatformInfo(platform, what, size, text.data(), nullptr), "clGetPlatformInfo");
  text.resize(text.find('\0') == std::string::npos ? text.size() : text.find('\0'));
  return text;
}

std::string device_text(cl_device_id device, cl_device_info what) {
  size_t size = 0;
  check(clGetDeviceInfo(device, what, 0, nullptr, &size), "clGetDeviceInfo");
  std::string text(size, '\0');
  check(clGetDeviceInfo(device, what, size, text.data(), nullptr), "clGetDeviceInfo");
  text.resize(text.find('\0') == std::string::npos ? text.size() : text.find('\0'));
  return text;
}

}  // namespace

struct OpenclCopyKernel::State {
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  cl_program program = nullptr;
  cl_kernel kernel = nullptr;
  cl_mem in = nullptr, out = nullptr;
  size_t buffer_bytes = 0;
  size_t copy_elements = 0;  // of the prepared copy
  cl_ulong max_allocation = 0;

  ~State() {
    if (in) clReleaseMemObject(in);
    if (out) clReleaseMemObject(out);
    if (kernel) clReleaseKernel(kernel);
    if (program) clReleaseProgram(program);
    if (queue) clReleaseCommandQueue(queue);
    if (context) clReleaseContext(context);
  }

  // Buffers grow to the largest size asked for; made once per size step.
  void reserve(size_t bytes) {
    if (bytes <= buffer_bytes) return;
    if (bytes > max_allocation)
      throw std::runtime_error("a copy of " + std::to_string(bytes) + " bytes is over the device's " +
                               std::to_string(max_allocation) + "-byte allocation limit");
    if (in) clReleaseMemObject(in);
    if (out) clReleaseMemObject(out);
    in = out = nullptr;
    buffer_bytes = 0;
    cl_int status = CL_SUCCESS;
    in = clCreateBuffer(context, CL_MEM_READ_ONLY, bytes, nullptr, &status);
    check(status, "clCreateBuffer");
    out = clCreateBuffer(context, CL_MEM_WRITE_ONLY, bytes, nullptr, &status);
    check(status, "clCreateBuffer");
    // Touch both once so that no timed launch pays for first use.
    const cl_uchar zero = 0;
    check(clEnqueueFillBuffer(queue, in, &zero, 1, 0, bytes, 0, nullptr, nullptr), "clEnqueueFillBuffer");
    check(clEnqueueFillBuffer(queue, out, &zero, 1, 0, bytes, 0, nullptr, nullptr), "clEnqueueFillBuffer");
    check(clFinish(queue), "clFinish");
    check(clSetKernelArg(kernel, 0, sizeof in, &in), "clSetKernelArg");
    check(clSetKernelArg(kernel, 1, sizeof out, &out), "clSetKernelArg");
    buffer_bytes = bytes;
  }
};

OpenclCopyKernel::OpenclCopyKernel(const std::string &platform_name, const std::string &device_name)
    : state_(std::make_unique<State>()) {
  cl_uint platform_count = 0;
  check(clGetPlatformIDs(0, nullptr, &platform_count), "clGetPlatformIDs");
  std::vector<cl_platform_id> platforms(platform_count);
  check(clGetPlatformIDs(platform_count, platforms.data(), nullptr), "clGetPlatformIDs");
  for (cl_platform_id platform : platforms) {
    if (platform_text(platform, CL_PLATFORM_NAME) != platform_name) continue;
    cl_uint device_count = 0;
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count) != CL_SUCCESS) continue;
    std::vector<cl_device_id> devices(device_count);
    check(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, device_count, devices.data(), nullptr), "clGetDeviceIDs");
    for (cl_device_id device : devices)
      if (device_text(device, CL_DEVICE_NAME) == device_name) {
        state_->device = device;
        break;
      }
    if (state_->device) break;
  }
  if (!state_->device)
    throw std::runtime_error("no OpenCL device '" + device_name + "' on a platform '" + platform_name + "'");
  device_label_ = device_name + " (" + platform_name + ")";
  check(clGetDeviceInfo(state_->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof state_->max_allocation,
                        &state_->max_allocation, nullptr),
        "clGetDeviceInfo(CL_DEVICE_MAX_MEM_ALLOC_SIZE)");

  cl_int status = CL_SUCCESS;
  state_->context = clCreateContext(nullptr, 1, &state_->device, nullptr, nullptr, &status);
  check(status, "clCreateContext");
  state_->queue = clCreateCommandQueue(state_->context, state_->device, 0, &status);
  check(status, "clCreateCommandQueue");
  const char *source = kCopySource;
  state_->program = clCreateProgramWithSource(state_->context, 1, &source, nullptr, &status);
  check(status, "clCreateProgramWithSource");
  check(clBuildProgram(state_->program, 1, &state_->device, "-cl-std=CL1.2", nullptr, nullptr), "clBuildProgram");
  state_->kernel = clCreateKernel(state_->program, "copy", &status);
  check(status, "clCreateKernel");
}

OpenclCopyKernel::~OpenclCopyKernel() = default;

void OpenclCopyKernel::prepare_copy(size_t bytes) {
  state_->reserve(bytes);
  state_->copy_elements = bytes / kCopyElement;
}

void OpenclCopyKernel::copy_and_wait() {
  const size_t elements = state_->copy_elements;
  check(clEnqueueNDRangeKernel(state_->queue, state_->kernel, 1, nullptr, &elements, nullptr, 0, nullptr, nullptr),
        "clEnqueueNDRangeKernel(copy)");
  check(clFinish(state_->queue), "clFinish");
}

#else  // built without OpenCL

struct OpenclCopyKernel::State {};

OpenclCopyKernel::OpenclCopyKernel(const std::string &, const std::string &) {
  throw std::runtime_error("this backplane was built without OpenCL");
}
OpenclCopyKernel::~OpenclCopyKernel() = default;
void OpenclCopyKernel::prepare_copy(size_t) {}
void OpenclCopyKernel::copy_and_wait() {}

#endif

}  // namespace backplane::cli
