// Flattening and combining capability rows.
#include "capability_table.hpp"

namespace backplane {

void CapabilitySet::add(const bp_capability &row) {
  const uint32_t collective = row.collective;
  declared_[collective] = true;
  flags_[collective] |= row.flags;
  if (collective == BP_BARRIER) return;
  dtypes_[collective] |= row.dtypes;
  const uint32_t ops = collective_reduces(collective) ? row.reduce_ops : all_reduce_ops_mask;
  for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype) {
    if (row.dtypes & (1u << dtype)) ops_[collective][dtype] |= ops;
  }
}

void CapabilitySet::intersect(const CapabilitySet &other) {
  for (uint32_t collective = 0; collective < BP_COLLECTIVE_COUNT; ++collective) {
    declared_[collective] = declared_[collective] && other.declared_[collective];
    dtypes_[collective] &= other.dtypes_[collective];
    flags_[collective] &= other.flags_[collective];
    for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype)
      ops_[collective][dtype] &= other.ops_[collective][dtype];
  }
}

uint32_t CapabilitySet::any_reduce_ops(uint32_t collective) const {
  uint32_t ops = 0;
  for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype) ops |= ops_[collective][dtype];
  return ops;
}

}  // namespace backplane
