// Cases staged on devices and checked from them. See staged_case.hpp.
#include "backplane_reference/staged_case.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace backplane::reference {

Result<StagedCase> stage_case(const CollectiveCase &c, std::span<const Device> ranks, std::byte fill, uint64_t seed) {
  const size_t es = element_size(c.dtype), n = c.ranks;
  if (ranks.size() != n)
    throw std::invalid_argument("stage_case: " + std::to_string(ranks.size()) + " devices for " + std::to_string(n) +
                                " ranks");
  StagedCase staged;
  staged.c = c;
  staged.send.assign(n, nullptr);
  staged.recv.assign(n, nullptr);
  staged.result_buffer.assign(n, 0);
  for (size_t r = 0; r < n; ++r) {
    staged.layouts.push_back(rank_layout(c, r));
    staged.contributions.push_back(make_contribution(c, r, seed));
  }
  for (size_t r = 0; r < n; ++r) {
    const RankLayout &l = staged.layouts[r];
    // One buffer of `elements` on rank r's device, passed as the sides given.
    auto make = [&](size_t elements, bool send, bool recv) -> std::optional<Error> {
      const size_t bytes = std::max<size_t>(elements, 1) * es;
      Result<Buffer> created = Buffer::create(ranks[r], bytes);
      if (!created) return created.error();
      StagedBuffer b{std::move(*created), std::vector<std::byte>(bytes, fill), r, send, recv};
      if (send) {
        const std::vector<std::byte> &mine = staged.contributions[r];
        std::copy(mine.begin(), mine.end(), b.image.begin() + static_cast<std::ptrdiff_t>(l.input_offset * es));
        staged.send[r] = b.buffer.get();
      }
      if (recv) {
        staged.recv[r] = b.buffer.get();
        staged.result_buffer[r] = staged.buffers.size();
      }
      staged.buffers.push_back(std::move(b));
      return std::nullopt;
    };
    std::optional<Error> failed;
    if (l.in_place) {
      failed = make(l.send, true, true);
    } else {
      if (l.has_send) failed = make(l.send, true, false);
      if (!failed && l.has_recv) failed = make(l.recv, false, true);
    }
    if (failed) return *failed;
  }
  return staged;
}

bp_collective_request make_request(const CollectiveCase &c, bp_buffer *const *send, bp_buffer *const *recv) {
  bp_collective_request request{};
  request.struct_size = sizeof request;
  request.collective = c.collective;
  request.dtype = c.dtype;
  request.reduce_op = c.op;
  request.root = c.root;
  request.count = c.count;
  request.send = send;
  request.recv = recv;
  return request;
}

bp_collective_request make_request(const StagedCase &staged) {
  return make_request(staged.c, staged.send.data(), staged.recv.data());
}

Status write_images(StagedCase &staged) {
  for (StagedBuffer &b : staged.buffers)
    if (Status written = b.buffer.write(0, b.image.data(), b.image.size()); !written) return written;
  return {};
}

Result<std::vector<Comparison>> check_results(const CollectiveCase &c,
                                              const std::vector<std::vector<std::byte>> &contributions,
                                              std::span<const Buffer *const> result_buffers) {
  const size_t es = element_size(c.dtype);
  // Ranks whose expected result is the same skip recomputing it.
  const bool same_everywhere =
      c.collective == BP_ALL_REDUCE || c.collective == BP_BROADCAST || c.collective == BP_ALL_GATHER;
  std::vector<Comparison> comparisons(c.ranks);
  std::vector<std::byte> expected, got;
  bool have_expected = false;
  for (size_t r = 0; r < c.ranks; ++r) {
    const RankLayout l = rank_layout(c, r);
    if (l.result == 0 || !result_buffers[r]) continue;
    if (!have_expected || !same_everywhere) {
      expected = reference_result(c, contributions, r);
      have_expected = true;
    }
    got.resize(l.result * es);
    if (Status read = result_buffers[r]->read(l.result_offset * es, got.data(), got.size()); !read)
      return read.error();
    comparisons[r] = compare(c.dtype, got, expected, result_equality(c.collective));
  }
  return comparisons;
}

Result<std::vector<Comparison>> check_results(const StagedCase &staged) {
  std::vector<const Buffer *> result_buffers(staged.c.ranks, nullptr);
  for (size_t r = 0; r < staged.c.ranks; ++r)
    if (staged.layouts[r].result) result_buffers[r] = &staged.buffers[staged.result_buffer[r]].buffer;
  return check_results(staged.c, staged.contributions, result_buffers);
}

Result<Change> find_change(const StagedCase &staged, bool results_may_change) {
  const size_t es = element_size(staged.c.dtype);
  std::vector<std::byte> now;
  for (size_t i = 0; i < staged.buffers.size(); ++i) {
    const StagedBuffer &b = staged.buffers[i];
    now.resize(b.image.size());
    if (Status read = b.buffer.read(0, now.data(), now.size()); !read) return read.error();
    // Elements [skip_from, skip_to) hold the rank's result.
    size_t skip_from = 0, skip_to = 0;
    if (results_may_change && b.recv && staged.result_buffer[b.rank] == i) {
      const RankLayout &l = staged.layouts[b.rank];
      skip_from = l.result_offset;
      skip_to = l.result_offset + l.result;
    }
    for (size_t e = 0; e < now.size() / es; ++e) {
      if (e >= skip_from && e < skip_to) continue;
      if (std::memcmp(now.data() + e * es, b.image.data() + e * es, es) == 0) continue;
      const char *side = !b.recv ? "send" : !b.send ? "recv" : "send/recv";
      return Change{true, b.rank, side, e, format_value(staged.c.dtype, now.data() + e * es),
                    format_value(staged.c.dtype, b.image.data() + e * es)};
    }
  }
  return Change{};
}

}  // namespace backplane::reference
