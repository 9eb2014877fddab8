// What `backplane bench` measures a device group's collectives against: a
// plain copy on rank 0's device, moving the bytes a row reads and writes.
// One implementation per device kind (opencl_copy.hpp, vulkan_copy.hpp);
// make_copy_reference() picks it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace backplane::cli {

class CopyReference {
 public:
  virtual ~CopyReference() = default;

  // Median microseconds of `iterations` copies, each waited for, reading
  // `bytes_read_and_written / 2` bytes and writing as many (rounded up to
  // kCopyElement, at least one), after `warmup` untimed ones; 0 when
  // `iterations` is 0. Throws std::runtime_error when the device refuses the
  // buffers or a copy fails.
  double time_copy(std::size_t bytes_read_and_written, unsigned iterations, unsigned warmup);

  // What is timed, for the bench's header: "vkCmdCopyBuffer on <device>".
  virtual std::string label() const = 0;

 protected:
  // Every implementation copies 16-byte elements (a uint4, or a
  // vkCmdCopyBuffer region of whole ones).
  static constexpr std::size_t kCopyElement = 16;

  // Makes ready the copy of `bytes` (a multiple of kCopyElement): buffers
  // big enough, commands recorded. Nothing is in flight.
  virtual void prepare_copy(std::size_t bytes) = 0;
  // Runs the prepared copy once and waits for it to end.
  virtual void copy_and_wait() = 0;
};

// The copy reference of a group whose ranks are all of `kind`, on the device
// rank 0's `properties` name; nullptr for a kind without one (cpu groups use
// the memory bandwidth probe). Throws std::runtime_error when the device is
// not found or the copy cannot be built.
std::unique_ptr<CopyReference> make_copy_reference(
    const std::string &kind, const std::vector<std::pair<std::string, std::string>> &properties);

}  // namespace backplane::cli
