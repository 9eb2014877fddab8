// One collective case staged in buffers on a group's devices, through the
// public C++ wrapper, and checked from them against the reference
// (collective_reference.hpp): what `backplane run --sweep`, `backplane
// conform` and the OpenCL tests run each case through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backplane/backplane.h"
#include "backplane/backplane.hpp"
#include "backplane_reference/collective_reference.hpp"

namespace backplane::reference {

// A buffer per rank and side as rank_layout() says (one buffer for a rank in
// place; none where the rank passes NULL), each with the bytes it is to hold
// before the call (its image): the rank's contribution at input_offset,
// `fill` everywhere else. Every buffer holds at least one element, so a zero
// count still passes real buffers, and the image covers the whole buffer.
struct StagedBuffer {
  Buffer buffer;
  std::vector<std::byte> image;
  size_t rank = 0;
  bool send = false, recv = false;  // the sides of the call it is passed as (both: in place)
};
struct StagedCase {
  CollectiveCase c;
  std::vector<RankLayout> layouts;                    // per rank
  std::vector<std::vector<std::byte>> contributions;  // per rank, make_contribution()
  std::vector<StagedBuffer> buffers;                  // in rank order, send before recv
  std::vector<bp_buffer *> send, recv;                // per rank, as the request takes them
  std::vector<size_t> result_buffer;                  // per rank with a result: its index in `buffers`
};

// Creates the buffers on ranks[r] (one device per rank of c.ranks) and
// their images; writes nothing (write_images() does). A device count other
// than c.ranks is the caller's bug (std::invalid_argument).
Result<StagedCase> stage_case(const CollectiveCase &c, std::span<const Device> ranks, std::byte fill,
                              uint64_t seed = 0);
// The call, pointing into the staged case's send and recv (valid while it lives).
bp_collective_request make_request(const StagedCase &staged);
// The call of case `c` over per-rank `send` and `recv` arrays (borrowed).
bp_collective_request make_request(const CollectiveCase &c, bp_buffer *const *send, bp_buffer *const *recv);
// Writes every buffer's image, as it must be before each call.
Status write_images(StagedCase &staged);

// Reads each rank's result and compares it with reference_result(), by
// result_equality(): one Comparison per rank (wrong == 0 for a rank with no
// result).
Result<std::vector<Comparison>> check_results(const StagedCase &staged);
// The same for buffers staged elsewhere: rank r's result is read from
// result_buffers[r] (NULL where the rank has no result, or where it is another
// process's rank of a group across processes) at its layout's
// result_offset; `contributions` as reference_result() takes them.
Result<std::vector<Comparison>> check_results(const CollectiveCase &c,
                                              const std::vector<std::vector<std::byte>> &contributions,
                                              std::span<const Buffer *const> result_buffers);

// The first element of a buffer that no longer holds its image. With
// `results_may_change`, the result regions (what check_results() reads) are
// left out: what remains is what a completed call must not have touched
// (out-of-place inputs, the rest of an in-place buffer, the spare element
// of a zero count). Without it, every byte must be as staged, as after a
// refused call.
struct Change {
  bool changed = false;
  size_t rank = 0;
  const char *side = "";      // "send", "recv" or "send/recv" (in place)
  size_t element = 0;         // index within that buffer
  std::string got, expected;  // the element printed
};
Result<Change> find_change(const StagedCase &staged, bool results_may_change);

}  // namespace backplane::reference
