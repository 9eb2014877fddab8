// The kernels' program for one device: built from the embedded OpenCL C
// source once per device and state, and cached on disk as a program binary
// so that later processes skip the compiler.
#pragma once

#include <cstdint>
#include <string>

#include "plugin_state.hpp"

namespace backplane::opencl {

// kernels/*.cl, embedded at build time (cmake/embed_kernels.cmake).
extern const char *const kKernelSource;

// The build options for a device with `features` and comms of `ranks`
// ranks (1..kMaxSpecializedRanks, or 0 for more): -cl-std=CL1.2 and the
// BP_* macros the kernels test, then the user's own (the options' build_options).
std::string build_options(const DeviceFeatures &features, std::size_t ranks, const std::string &users);

// Makes sure device.programs[ranks] holds the built kernels: loaded from
// the cache when a binary for this (source, options, platform, device,
// driver) is there and the driver accepts it, else built from source and
// then cached. A build failure is BP_DEVICE_FAILURE with the build log. The
// caller holds state.mutex.
std::int32_t ensure_program(bp_plugin_state &state, Device &device, std::size_t ranks, bp_error_sink *sink);

}  // namespace backplane::opencl
