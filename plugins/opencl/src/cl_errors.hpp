// OpenCL status codes by name, and which Backplane error each one becomes.
#pragma once

#include <CL/cl.h>

#include <cstdint>

namespace backplane::opencl {

// "CL_OUT_OF_RESOURCES" for -5; "an unknown OpenCL status" for a code no
// standard or Khronos extension header defines.
const char *cl_error_name(cl_int status) noexcept;

// The bp_code a failed OpenCL call becomes: running out of device or host
// memory is BP_OUT_OF_MEMORY; everything else (a lost device, resources
// exhausted by a kernel, a driver refusing a valid call) is
// BP_DEVICE_FAILURE, per docs/errors.md.
std::int32_t cl_status_code(cl_int status) noexcept;

}  // namespace backplane::opencl
