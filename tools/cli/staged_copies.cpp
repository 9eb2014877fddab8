// StagedCopies (staged_copies.hpp).
#include "staged_copies.hpp"

#include <chrono>
#include <stdexcept>

#include "cli.hpp"

namespace backplane::cli {

StagedCopies::StagedCopies(std::vector<Device> ranks, std::vector<std::string> kinds) : ranks_(std::move(ranks)) {
  for (size_t rank = 0; rank < ranks_.size(); ++rank)
    if (kinds.at(rank) != "cpu") copied_.push_back({rank, kinds[rank], nullptr, {}});
}

void StagedCopies::ensure_bytes(Copied &copied, size_t bytes) {
  if (copied.buffer && copied.host.size() >= bytes) return;
  copied.buffer.reset();
  Result<Buffer> buffer = Buffer::create(ranks_[copied.rank], bytes);
  if (!buffer) throw std::runtime_error(std::string(buffer.error().message()));
  copied.buffer = std::make_unique<Buffer>(std::move(*buffer));
  copied.host.assign(bytes, std::byte{0});
}

double StagedCopies::time_copies(bp_collective collective, size_t count, size_t element_size, uint32_t root,
                                 bool in_place, unsigned iterations, unsigned warmup) {
  // Each copied rank's bytes up and down.
  std::vector<std::pair<size_t, size_t>> bytes;
  for (Copied &copied : copied_) {
    const bp_rank_buffers use = bp_rank_buffers_of(collective, ranks_.size(), copied.rank == root);
    const size_t send = use.uses_send ? use.send_blocks * count * element_size : 0;
    const size_t recv = use.uses_recv ? use.recv_blocks * count * element_size : 0;
    const size_t one_buffer = std::max(send, recv);
    bytes.emplace_back(in_place && send && recv ? one_buffer : send, in_place && send && recv ? one_buffer : recv);
    ensure_bytes(copied, std::max<size_t>(1, one_buffer));
  }
  using Clock = std::chrono::steady_clock;
  std::vector<double> micros;
  micros.reserve(iterations);
  for (unsigned i = 0; i < warmup + iterations; ++i) {
    const Clock::time_point start = Clock::now();
    for (size_t c = 0; c < copied_.size(); ++c) {
      Copied &copied = copied_[c];
      if (Status read = copied.buffer->read(0, copied.host.data(), bytes[c].first); !read)
        throw std::runtime_error(std::string(read.error().message()));
      if (Status written = copied.buffer->write(0, copied.host.data(), bytes[c].second); !written)
        throw std::runtime_error(std::string(written.error().message()));
    }
    if (i >= warmup) micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return median(std::move(micros));
}

std::string StagedCopies::label() const {
  std::string text = "bp_buffer_read + bp_buffer_write of the buffers of rank";
  text += copied_.size() == 1 ? " " : "s ";
  for (size_t c = 0; c < copied_.size(); ++c) {
    if (c) text += ", ";
    text += std::to_string(copied_[c].rank) + " (" + copied_[c].kind + ")";
  }
  return text;
}

}  // namespace backplane::cli
