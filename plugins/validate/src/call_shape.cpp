// Names, sizes and the fingerprint of a call's shape (call_shape.hpp).
#include "call_shape.hpp"

#include <algorithm>
#include <array>

namespace backplane::validate {
namespace {

constexpr std::array<const char *, BP_COLLECTIVE_COUNT> kCollectives = {
    "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "scatter", "all_to_all", "barrier"};
constexpr std::array<const char *, BP_DTYPE_COUNT> kDtypes = {"f16", "bf16", "f32", "f64", "i8",
                                                              "u8",  "i32",  "u32", "i64", "u64"};
constexpr std::array<std::size_t, BP_DTYPE_COUNT> kDtypeSizes = {2, 2, 4, 8, 1, 1, 4, 4, 8, 8};
constexpr std::array<const char *, BP_REDUCE_OP_COUNT> kOps = {"sum", "prod", "min", "max", "avg"};

template <std::size_t N>
const char *name_in(const std::array<const char *, N> &names, std::uint32_t value) noexcept {
  return value < N ? names[value] : nullptr;
}

template <std::size_t N>
std::uint32_t value_in(const std::array<const char *, N> &names, std::string_view name) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<std::uint32_t>(i);
  return kNone;
}

constexpr std::uint64_t kSeed = 0xcbf29ce484222325ull;   // FNV-1a's offset basis
constexpr std::uint64_t kMultiplier = 0x100000001b3ull;  // FNV's 64-bit prime

// One step per 64-bit word: xor, then multiply by an odd constant. Each
// step is a bijection of the state for a given word, so two inputs that
// differ in one word never meet; a byte at a time (FNV-1a proper) cost 8
// times the multiplies, most of the hook's time with expect_fingerprints.
std::uint64_t step(std::uint64_t hash, std::uint64_t word) noexcept { return (hash ^ word) * kMultiplier; }

// Up to 8 bytes as a little-endian word, zero-padded: the same on every
// machine.
std::uint64_t word_of(const unsigned char *bytes, std::size_t size) noexcept {
  std::uint64_t word = 0;
  for (std::size_t i = 0; i < size; ++i) word |= std::uint64_t{bytes[i]} << (8 * i);
  return word;
}

}  // namespace

bool collective_reduces(std::uint32_t collective) noexcept {
  return collective == BP_ALL_REDUCE || collective == BP_REDUCE || collective == BP_REDUCE_SCATTER;
}

bool collective_has_root(std::uint32_t collective) noexcept {
  return collective == BP_REDUCE || collective == BP_BROADCAST || collective == BP_GATHER ||
         collective == BP_SCATTER;
}

bool dtype_is_float(std::uint32_t dtype) noexcept {
  return dtype == BP_F16 || dtype == BP_BF16 || dtype == BP_F32 || dtype == BP_F64;
}

std::size_t dtype_size(std::uint32_t dtype) noexcept { return dtype < BP_DTYPE_COUNT ? kDtypeSizes[dtype] : 0; }

const char *collective_name(std::uint32_t collective) noexcept { return name_in(kCollectives, collective); }
const char *dtype_name(std::uint32_t dtype) noexcept { return name_in(kDtypes, dtype); }
const char *reduce_op_name(std::uint32_t op) noexcept { return name_in(kOps, op); }
std::uint32_t collective_from_name(std::string_view name) noexcept { return value_in(kCollectives, name); }
std::uint32_t dtype_from_name(std::string_view name) noexcept { return value_in(kDtypes, name); }
std::uint32_t reduce_op_from_name(std::string_view name) noexcept { return value_in(kOps, name); }

CallShape shape_of(const bp_layer_call &call) noexcept {
  CallShape shape;
  shape.collective = call.collective;
  shape.rank_count = call.rank_count;
  if (call.collective != BP_BARRIER) {
    shape.dtype = call.dtype;
    shape.count = call.count;
  }
  if (collective_reduces(call.collective)) shape.op = call.reduce_op;
  if (collective_has_root(call.collective)) shape.root = call.root;
  return shape;
}

std::string describe(const CallShape &shape) {
  auto or_number = [](const char *name, std::uint32_t value) {
    return name != nullptr ? std::string(name) : "unknown " + std::to_string(value);
  };
  std::string text = or_number(collective_name(shape.collective), shape.collective);
  if (shape.collective == BP_BARRIER) return text;
  text += "(" + or_number(dtype_name(shape.dtype), shape.dtype);
  if (shape.op != kNone) text += ", " + or_number(reduce_op_name(shape.op), shape.op);
  if (shape.root != kNone) text += ", root " + std::to_string(shape.root);
  return text + ") of " + std::to_string(shape.count);
}

std::uint64_t fingerprint(const CallShape &shape, std::string_view group_name) noexcept {
  std::uint64_t hash = kSeed;
  for (const std::uint64_t field : {std::uint64_t{shape.collective}, std::uint64_t{shape.dtype},
                                    std::uint64_t{shape.op}, std::uint64_t{shape.root}, shape.count,
                                    shape.rank_count, std::uint64_t{group_name.size()}})
    hash = step(hash, field);
  const auto *name = reinterpret_cast<const unsigned char *>(group_name.data());
  for (std::size_t at = 0; at < group_name.size(); at += 8)
    hash = step(hash, word_of(name + at, std::min<std::size_t>(8, group_name.size() - at)));
  // SplitMix64's finaliser: every input bit reaches every output bit.
  hash = (hash ^ (hash >> 30)) * 0xbf58476d1ce4e5b9ull;
  hash = (hash ^ (hash >> 27)) * 0x94d049bb133111ebull;
  return hash ^ (hash >> 31);
}

}  // namespace backplane::validate
