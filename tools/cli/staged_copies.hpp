// What `backplane bench` measures a group across device kinds against: the
// bare copies staging needs (host/src/staging.hpp), through the public API,
// with no collective. Each rank that is not a cpu device has its buffers'
// bytes read to host memory (bp_buffer_read) and written back
// (bp_buffer_write): every byte of the send side once up, of the recv side
// once down, an in-place buffer once each way. A cpu rank takes part in
// place and copies nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"

namespace backplane::cli {

class StagedCopies {
 public:
  // The group's ranks, and each one's kind.
  StagedCopies(std::vector<Device> ranks, std::vector<std::string> kinds);

  // Median microseconds of `iterations` rounds of every copy of one call of
  // `collective` with `count` elements of `element_size` bytes per block at
  // `root`, after `warmup` untimed rounds; 0 when `iterations` is 0. Throws
  // std::runtime_error when a buffer cannot be had or a copy fails.
  double time_copies(bp_collective collective, size_t count, size_t element_size, uint32_t root, bool in_place,
                     unsigned iterations, unsigned warmup);

  // For the bench's header: "bp_buffer_read + bp_buffer_write of ranks 1 (opencl), 2 (vulkan)".
  std::string label() const;

 private:
  struct Copied {
    size_t rank;
    std::string kind;
    std::unique_ptr<Buffer> buffer;  // as large as the largest side asked for yet
    std::vector<std::byte> host;
  };
  void ensure_bytes(Copied &copied, size_t bytes);

  std::vector<Device> ranks_;
  std::vector<Copied> copied_;
};

}  // namespace backplane::cli
