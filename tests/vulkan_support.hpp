// What the vulkan plugin's test binaries share: finding the Vulkan devices
// (skipping without them, unless BACKPLANE_REQUIRE_VULKAN=1 makes that a
// failure), the options of a group of two ranks, and failing a test for
// what the validation layer said.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace backplane::testing {

inline bool vulkan_required() {
  const char *value = std::getenv("BACKPLANE_REQUIRE_VULKAN");
  return value != nullptr && std::string(value) == "1";
}

inline std::vector<Device> vulkan_devices(const Host &host) { return devices_of_kind(host, "vulkan"); }
inline std::string kind_status(const Host &host) { return plugin_kind_status(host, "vulkan"); }

// The vulkan devices of `host`; skips the test (fails it under
// BACKPLANE_REQUIRE_VULKAN=1) when there are fewer than `needed`.
#define REQUIRE_VULKAN_DEVICES(host, needed, devices)                                                      \
  std::vector<Device> devices = vulkan_devices(host);                                                      \
  if (devices.size() < (needed)) {                                                                         \
    const std::string why = "needs " + std::to_string(needed) + " Vulkan devices, found " +                \
                            std::to_string(devices.size()) + " (" + kind_status(host) + ")";               \
    if (vulkan_required()) FAIL() << why << "; BACKPLANE_REQUIRE_VULKAN=1";                               \
    GTEST_SKIP() << why;                                                                                   \
  }

// Two ranks on the first physical device, with the validation layer on.
constexpr const char *kTwoRanks = R"({"vulkan": {"ranks_per_device": 2, "validation": true}})";


// Fails the test for every line the validation layer logged.
inline void expect_no_validation_messages(const CapturedLog &log) {
  const std::vector<LogLine> messages = log.mentioning("validation:");
  EXPECT_TRUE(messages.empty()) << messages.size() << " validation messages:\n" << log.all();
}

}  // namespace backplane::testing
