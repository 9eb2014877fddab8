// The reference every checking subcommand shares (`run`, `conform`, `bench`;
// `validate` later): each collective's buffer layout (NCCL counts,
// types.h), a generator of input values chosen so that every result is
// exact in every element type, a plain sequential implementation of each
// collective over host memory, an element-wise comparison, and a case
// staged in buffers on a group's devices and checked from them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backplane/backplane.h"
#include "backplane/backplane.hpp"

namespace backplane::cli {

// One collective call, as the C API takes it.
struct CollectiveCase {
  bp_collective collective = BP_ALL_REDUCE;
  bp_dtype dtype = BP_F32;
  bp_reduce_op op = BP_SUM;  // read only for reducing collectives
  size_t count = 0;          // the call's count argument
  size_t ranks = 1;          // group size
  uint32_t root = 0;         // read only for rooted collectives
  bool in_place = false;     // see RankLayout for which ranks that concerns
};

bool is_reducing(bp_collective collective);  // all_reduce, reduce, reduce_scatter
bool is_rooted(bp_collective collective);    // reduce, broadcast, gather, scatter
// 1, or the group size for the collectives whose largest buffer holds one
// block per rank (all_gather, reduce_scatter, gather, scatter, all_to_all).
size_t blocks_per_buffer(bp_collective collective, size_t ranks);

// Where one rank's data lives, in elements of the case's dtype.
//  Out of place: send[rank] and recv[rank] are separate buffers, or NULL
//  where types.h allows it (the side of a rooted collective a non-root rank
//  does not use); the contribution starts at element 0 of send and the
//  result at element 0 of recv.
//  In place: a rank that uses both sides passes one buffer as send[rank]
//  and recv[rank]; its contribution and result then sit at the offsets
//  below (block `rank` for all_gather/gather inputs and reduce_scatter/
//  scatter results). A rank that uses one side only (non-root ranks of
//  rooted collectives) is laid out as out of place.
struct RankLayout {
  bool in_place = false;     // one buffer passed as both send[rank] and recv[rank]
  bool has_send = false;     // send[rank] is a buffer, not NULL
  bool has_recv = false;     // recv[rank] is a buffer, not NULL
  size_t send = 0;           // elements of send[rank] (in place: of the one buffer)
  size_t recv = 0;           // elements of recv[rank] (in place: of the one buffer)
  size_t input_offset = 0;   // where the contribution starts in send[rank]
  size_t result_offset = 0;  // where the result starts in recv[rank]
  size_t contribution = 0;   // elements the rank contributes (0: none)
  size_t result = 0;         // elements of result to check on this rank (0: none)
};
RankLayout rank_layout(const CollectiveCase &c, size_t rank);

// The value rank `rank` contributes at element `index` of its contribution,
// a small integer. Chosen per (dtype, op, group size) so that nothing
// overflows or rounds: sums stay within the dtype's exactly representable
// integers (256 for bf16, 2048 for f16, 255 for u8), products are ±1 or ±2,
// and the values of an avg add up to a multiple of the group size.
// Deterministic in (case, rank, index, seed).
int64_t input_value(const CollectiveCase &c, size_t rank, size_t index, uint64_t seed = 0);

// A rank's whole contribution in the dtype's bytes (empty when it has none).
std::vector<std::byte> make_contribution(const CollectiveCase &c, size_t rank, uint64_t seed = 0);

// What rank `rank` must hold after the collective, given every rank's
// contribution (indexed by rank; an entry may be empty where the rank
// contributes nothing): `rank_layout(c, rank).result` elements, in bytes.
// Floating types reduce in double and round once at the end; integers wrap
// as unsigned arithmetic of their width does; avg is the sum divided by the
// group size, truncated toward zero for integers. With the generator's
// values every one of these is exact.
std::vector<std::byte> reference_result(const CollectiveCase &c,
                                        const std::vector<std::vector<std::byte>> &contributions, size_t rank);

// Element-wise comparison of two arrays of `dtype`. Floats compare by
// value (+0 equals -0, NaN equals NaN), integers exactly.
struct Comparison {
  size_t wrong = 0;           // elements that differ
  size_t first_index = 0;     // the first of them
  std::string got, expected;  // its two values, printed
};
Comparison compare(bp_dtype dtype, std::span<const std::byte> got, std::span<const std::byte> expected);

// One element printed ("-3", "0.5", "255").
std::string format_value(bp_dtype dtype, const std::byte *element);

// ---- one case on devices ----------------------------------------------

// One case staged on a group's devices: a buffer per rank and side as
// rank_layout() says (one buffer for a rank in place; none where the rank
// passes NULL), each with the bytes it is to hold before the call (its
// image): the rank's contribution at input_offset, `fill` everywhere else.
// Every buffer holds at least one element, so a zero count still passes
// real buffers, and the image covers the whole buffer.
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
// their images; writes nothing (write_images() does).
Result<StagedCase> stage_case(const CollectiveCase &c, std::span<const Device> ranks, std::byte fill,
                              uint64_t seed = 0);
// The call, pointing into the staged case's send and recv (valid while it lives).
bp_collective_request make_request(const StagedCase &staged);
// The call of case `c` over per-rank `send` and `recv` arrays (borrowed).
bp_collective_request make_request(const CollectiveCase &c, bp_buffer *const *send, bp_buffer *const *recv);
// Writes every buffer's image, as it must be before each call.
Status write_images(StagedCase &staged);

// Reads each rank's result and compares it with reference_result(): one
// Comparison per rank (wrong == 0 for a rank with no result).
Result<std::vector<Comparison>> check_results(const StagedCase &staged);
// The same for buffers staged elsewhere: rank r's result is read from
// result_buffers[r] (NULL where the rank has no result) at its layout's
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

// IEEE binary16 and bfloat16 from and to float, rounding to nearest even.
float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);
float bfloat16_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);

}  // namespace backplane::cli
