// Flattening and combining capability rows.
#include "capability_table.hpp"

#include <algorithm>

namespace backplane {
namespace {

// Byte limits where 0 means none: the union of two rows allows the larger,
// the intersection of two sets the smaller.
uint64_t looser_limit(uint64_t a, uint64_t b) { return a == 0 || b == 0 ? 0 : std::max(a, b); }
uint64_t tighter_limit(uint64_t a, uint64_t b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

}  // namespace

void CapabilitySet::add(const bp_capability &row) {
  const uint32_t collective = row.collective;
  declared_[collective] = true;
  if (collective == BP_BARRIER) {
    flags_[collective][0] |= row.flags;
    return;
  }
  const uint32_t ops = collective_reduces(collective) ? row.reduce_ops : all_reduce_ops_mask;
  for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype) {
    if (!(row.dtypes & (1u << dtype))) continue;
    const bool first = !(dtypes_[collective] & (1u << dtype));
    max_bytes_[collective][dtype] = first ? row.max_bytes : looser_limit(max_bytes_[collective][dtype], row.max_bytes);
    ops_[collective][dtype] |= ops;
    flags_[collective][dtype] |= row.flags;
  }
  dtypes_[collective] |= row.dtypes;
}

void CapabilitySet::intersect(const CapabilitySet &other) {
  for (uint32_t collective = 0; collective < BP_COLLECTIVE_COUNT; ++collective) {
    declared_[collective] = declared_[collective] && other.declared_[collective];
    dtypes_[collective] &= other.dtypes_[collective];
    for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype) {
      ops_[collective][dtype] &= other.ops_[collective][dtype];
      flags_[collective][dtype] &= other.flags_[collective][dtype];
      max_bytes_[collective][dtype] = tighter_limit(max_bytes_[collective][dtype], other.max_bytes_[collective][dtype]);
    }
  }
}

uint32_t CapabilitySet::any_reduce_ops(uint32_t collective) const {
  uint32_t ops = 0;
  for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype) ops |= ops_[collective][dtype];
  return ops;
}

}  // namespace backplane
