// The capability table: what each device kind (and, where a device declares
// less, each device) can run, flattened from the plugins' rows into arrays
// indexed by collective and element type, so "can X run?" is two loads.
#pragma once

#include <array>
#include <cstdint>

#include "backplane/plugin.h"
#include "names.hpp"

namespace backplane {

// Why a lookup failed, in the order dispatch reports it.
enum class Support { yes, no_collective, no_dtype, no_reduce_op, no_mode };

class CapabilitySet {
 public:
  // Adds one plugin row whose values this host knows (the loader drops or
  // masks the rest first).
  void add(const bp_capability &row);
  // Keeps only what both sets allow (a group runs what all its ranks run).
  void intersect(const CapabilitySet &other);

  bool declares(uint32_t collective) const { return declared_[collective]; }
  uint32_t dtypes(uint32_t collective) const { return dtypes_[collective]; }
  // Ops allowed for (collective, dtype); for collectives that do not reduce,
  // every op bit is set so the op never narrows the answer.
  uint32_t reduce_ops(uint32_t collective, uint32_t dtype) const { return ops_[collective][dtype]; }
  // Modes (BP_CAPABILITY_*) of (collective, dtype); barrier's are at dtype 0.
  uint32_t flags(uint32_t collective, uint32_t dtype) const { return flags_[collective][dtype]; }
  // The most bytes one buffer of (collective, dtype) may span; 0 = no limit.
  uint64_t max_bytes(uint32_t collective, uint32_t dtype) const { return max_bytes_[collective][dtype]; }
  // Union over dtypes of the ops allowed for a collective.
  uint32_t any_reduce_ops(uint32_t collective) const;

  // Arguments must be in range (dispatch checks them first).
  Support lookup(uint32_t collective, uint32_t dtype, uint32_t op, uint32_t mode_flags) const {
    if (!declared_[collective]) return Support::no_collective;
    if (collective == BP_BARRIER) return Support::yes;  // no buffers: neither type, op nor mode
    if (!(dtypes_[collective] & (1u << dtype))) return Support::no_dtype;
    if (collective_reduces(collective) && !(ops_[collective][dtype] & (1u << op)))
      return Support::no_reduce_op;
    if ((flags_[collective][dtype] & mode_flags) != mode_flags) return Support::no_mode;
    return Support::yes;
  }

 private:
  std::array<bool, BP_COLLECTIVE_COUNT> declared_{};
  std::array<uint32_t, BP_COLLECTIVE_COUNT> dtypes_{};
  std::array<std::array<uint32_t, BP_DTYPE_COUNT>, BP_COLLECTIVE_COUNT> flags_{};
  std::array<std::array<uint32_t, BP_DTYPE_COUNT>, BP_COLLECTIVE_COUNT> ops_{};
  std::array<std::array<uint64_t, BP_DTYPE_COUNT>, BP_COLLECTIVE_COUNT> max_bytes_{};
};

}  // namespace backplane
