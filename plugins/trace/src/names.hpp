// The names a trace file shows for the ABI's numbers: operations,
// collectives, element types, reduce ops and codes. Spelled as the host's
// bp_*_name() spell them (the plugin links no host library); a value this
// plugin does not know shows as "?".
#pragma once

#include <cstdint>

namespace backplane::trace {

const char *operation_name(std::uint32_t operation);  // "buffer_write", ..., "collective"
const char *collective_name(std::uint32_t collective);
const char *dtype_name(std::uint32_t dtype);
const char *reduce_op_name(std::uint32_t op);
const char *code_name(std::int32_t code);  // "OK", "DEVICE_FAILURE", ...

// Whether a collective's reduce op, and its root, mean anything (types.h).
bool collective_reduces(std::uint32_t collective);
bool collective_has_root(std::uint32_t collective);

}  // namespace backplane::trace
