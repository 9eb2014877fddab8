// The reference every checking subcommand shares (`run` now; `bench`,
// `conform` and `validate` later): each collective's buffer layout (NCCL
// counts, types.h), a generator of input values chosen so that every
// result is exact in every element type, a plain sequential implementation
// of each collective over host memory, and an element-wise comparison.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backplane/backplane.h"

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

// IEEE binary16 and bfloat16 from and to float, rounding to nearest even.
float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);
float bfloat16_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);

}  // namespace backplane::cli
