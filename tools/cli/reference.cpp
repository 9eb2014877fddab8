// The shared reference: collective layouts, exact input values, a sequential
// implementation of every collective, comparison, and cases staged on
// devices. See reference.hpp.
#include "reference.hpp"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>

namespace backplane::cli {
namespace {

// The 16-bit float types, as their bits; only the reference reads them.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

template <typename T>
constexpr bool is_float_type = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
double to_double(T value) {
  if constexpr (std::is_same_v<T, Half>)
    return half_to_float(value.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bfloat16_to_float(value.bits);
  else
    return static_cast<double>(value);
}

// Rounds a double to T. For the 16-bit types this rounds twice (to float,
// then to 16 bits), which can differ from one rounding only for values no
// generated input produces.
template <typename T>
T from_double(double value) {
  if constexpr (std::is_same_v<T, Half>)
    return Half{float_to_half(static_cast<float>(value))};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16{float_to_bfloat16(static_cast<float>(value))};
  else
    return static_cast<T>(value);
}

// Calls f with a value of the C++ type standing for `dtype`.
template <typename F>
decltype(auto) visit_dtype(bp_dtype dtype, F &&f) {
  switch (dtype) {
    case BP_DTYPE_MAX_ENUM:  // not a value; handled after the switch
      break;
    case BP_F16:
      return f(Half{});
    case BP_BF16:
      return f(BFloat16{});
    case BP_F32:
      return f(float{});
    case BP_F64:
      return f(double{});
    case BP_I8:
      return f(int8_t{});
    case BP_U8:
      return f(uint8_t{});
    case BP_I32:
      return f(int32_t{});
    case BP_U32:
      return f(uint32_t{});
    case BP_I64:
      return f(int64_t{});
    case BP_U64:
      return f(uint64_t{});
  }
  // A dtype the CLI itself produced out of range is a bug in the CLI.
  throw std::invalid_argument("element type out of range: " + std::to_string(static_cast<int>(dtype)));
}

// Elements live in byte vectors; memcpy keeps the reads free of aliasing
// questions and compiles to plain loads.
template <typename T>
T load(const std::byte *data, size_t index) {
  T value;
  std::memcpy(&value, data + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void store(std::byte *data, size_t index, T value) {
  std::memcpy(data + index * sizeof(T), &value, sizeof(T));
}

template <typename T>
T from_int64(int64_t value) {
  if constexpr (is_float_type<T>)
    return from_double<T>(static_cast<double>(value));
  else
    return static_cast<T>(value);
}

// The accumulator each type reduces in: double for floats, the 64-bit
// integer of the same signedness for integers (whose narrowing back to T is
// modular, as T's own wrapping arithmetic would be).
template <typename T>
using Accumulator =
    std::conditional_t<is_float_type<T>, double, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

template <typename T>
Accumulator<T> widen(T value) {
  if constexpr (is_float_type<T>)
    return to_double(value);
  else
    return static_cast<Accumulator<T>>(value);
}

template <typename T>
T narrow(Accumulator<T> value) {
  if constexpr (is_float_type<T>)
    return from_double<T>(value);
  else
    return static_cast<T>(value);
}

template <typename A>
A combine(bp_reduce_op op, A a, A b) {
  switch (op) {
    case BP_REDUCE_OP_MAX_ENUM:  // not a value; handled after the switch
      break;
    case BP_SUM:
    case BP_AVG:
      if constexpr (std::is_floating_point_v<A>)
        return a + b;
      else  // unsigned arithmetic wraps instead of overflowing
        return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case BP_PROD:
      if constexpr (std::is_floating_point_v<A>)
        return a * b;
      else
        return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case BP_MIN:
      return std::min(a, b);
    case BP_MAX:
      return std::max(a, b);
  }
  return a;
}

// result[k] = op over every rank s of contributions[s][offset + k].
template <typename T>
void reduce_into(const CollectiveCase &c, const std::vector<std::vector<std::byte>> &contributions, size_t offset,
                 size_t count, std::byte *result) {
  for (size_t k = 0; k < count; ++k) {
    Accumulator<T> acc = widen(load<T>(contributions[0].data(), offset + k));
    for (size_t s = 1; s < c.ranks; ++s) acc = combine(c.op, acc, widen(load<T>(contributions[s].data(), offset + k)));
    if (c.op == BP_AVG) acc = static_cast<Accumulator<T>>(acc / static_cast<Accumulator<T>>(c.ranks));
    store(result, k, narrow<T>(acc));
  }
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash(uint64_t seed, size_t rank, size_t index) {
  return splitmix64(seed * 0xD6E8FEB86659FD93ull + rank * 0x9E3779B97F4A7C15ull + index);
}

// Largest integer magnitude a sum may reach and stay exact (and in range).
int64_t exact_integer_limit(bp_dtype dtype) {
  switch (dtype) {
    case BP_DTYPE_MAX_ENUM:  // not a value; handled after the switch
      break;
    case BP_F16:
      return 2048;
    case BP_BF16:
      return 256;
    case BP_F32:
      return int64_t{1} << 24;
    case BP_F64:
      return int64_t{1} << 53;
    case BP_I8:
      return std::numeric_limits<int8_t>::max();
    case BP_U8:
      return std::numeric_limits<uint8_t>::max();
    case BP_I32:
      return std::numeric_limits<int32_t>::max();
    case BP_U32:
      return std::numeric_limits<uint32_t>::max();
    case BP_I64:
    case BP_U64:
      return std::numeric_limits<int64_t>::max();
  }
  return 0;
}

bool is_signed_dtype(bp_dtype dtype) { return dtype != BP_U8 && dtype != BP_U32 && dtype != BP_U64; }

int64_t pick(uint64_t h, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(h % static_cast<uint64_t>(hi - lo + 1));
}

// Reductions other than prod draw from [-m, m] (or [0, m] unsigned), with
// m small enough that a sum over every rank stays exact. Values stay small
// (at most 1000) so a printed mismatch is readable.
int64_t reduction_bound(const CollectiveCase &c) {
  const auto n = static_cast<int64_t>(c.ranks);
  int64_t m = exact_integer_limit(c.dtype) / n;
  if (c.op == BP_AVG) m = m > n ? m - n : 0;  // room for the last rank's adjustment
  return std::min<int64_t>(m, 1000);
}

int64_t reduction_draw(const CollectiveCase &c, size_t rank, size_t index, uint64_t seed) {
  int64_t m = reduction_bound(c);
  return pick(hash(seed, rank, index), is_signed_dtype(c.dtype) ? -m : 0, m);
}

}  // namespace

bool is_reducing(bp_collective collective) {
  return collective == BP_ALL_REDUCE || collective == BP_REDUCE || collective == BP_REDUCE_SCATTER;
}

bool is_rooted(bp_collective collective) {
  return collective == BP_REDUCE || collective == BP_BROADCAST || collective == BP_GATHER || collective == BP_SCATTER;
}

size_t blocks_per_buffer(bp_collective collective, size_t ranks) {
  switch (collective) {
    case BP_ALL_GATHER:
    case BP_REDUCE_SCATTER:
    case BP_GATHER:
    case BP_SCATTER:
    case BP_ALL_TO_ALL:
      return ranks;
    default:
      return 1;
  }
}

RankLayout rank_layout(const CollectiveCase &c, size_t rank) {
  const size_t count = c.count;
  // Out of place, a rank contributes all of its send buffer and checks all of its recv.
  const bp_rank_buffers use = bp_rank_buffers_of(c.collective, c.ranks, rank == c.root);
  RankLayout l;
  l.has_send = use.uses_send;
  l.has_recv = use.uses_recv;
  l.send = l.contribution = use.uses_send ? use.send_blocks * count : 0;
  l.recv = l.result = use.uses_recv ? use.recv_blocks * count : 0;
  if (c.in_place && l.has_send && l.has_recv) {
    l.in_place = true;
    l.send = l.recv = std::max(l.send, l.recv);
    if (c.collective == BP_ALL_GATHER || c.collective == BP_GATHER) l.input_offset = rank * count;
    if (c.collective == BP_REDUCE_SCATTER || c.collective == BP_SCATTER) l.result_offset = rank * count;
  }
  return l;
}

int64_t input_value(const CollectiveCase &c, size_t rank, size_t index, uint64_t seed) {
  if (!is_reducing(c.collective)) {
    // Copies only: any exactly representable value will do; a wide range
    // makes a block landing in the wrong place show.
    int64_t r = std::min<int64_t>(exact_integer_limit(c.dtype), 100000);
    return pick(hash(seed, rank, index), is_signed_dtype(c.dtype) ? -r : 0, r);
  }
  switch (c.op) {
    case BP_REDUCE_OP_MAX_ENUM:  // not a value; handled after the switch
      break;
    case BP_PROD: {
      // At most one rank per element contributes a 2, so every product is
      // ±1 or ±2: exact in every type, however many ranks.
      int64_t magnitude = (index + rank) % (c.ranks + 1) == 0 ? 2 : 1;
      bool negative = is_signed_dtype(c.dtype) && (hash(seed, rank, index) & 1);
      return negative ? -magnitude : magnitude;
    }
    case BP_AVG: {
      int64_t value = reduction_draw(c, rank, index, seed);
      if (rank + 1 != c.ranks) return value;
      // The last rank evens the sum out to a multiple of the group size, so
      // the average is an exact integer whatever the rounding convention.
      const auto n = static_cast<int64_t>(c.ranks);
      int64_t sum = 0;
      for (size_t s = 0; s < c.ranks; ++s) sum += reduction_draw(c, s, index, seed);
      int64_t rem = ((sum % n) + n) % n;
      if (rem == 0) return value;
      return (is_signed_dtype(c.dtype) || value >= rem) ? value - rem : value + (n - rem);
    }
    case BP_SUM:
    case BP_MIN:
    case BP_MAX:
      break;
  }
  return reduction_draw(c, rank, index, seed);
}

std::vector<std::byte> make_contribution(const CollectiveCase &c, size_t rank, uint64_t seed) {
  const size_t elements = rank_layout(c, rank).contribution;
  return visit_dtype(c.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<std::byte> bytes(elements * sizeof(T));
    for (size_t i = 0; i < elements; ++i) store(bytes.data(), i, from_int64<T>(input_value(c, rank, i, seed)));
    return bytes;
  });
}

std::vector<std::byte> reference_result(const CollectiveCase &c,
                                        const std::vector<std::vector<std::byte>> &contributions, size_t rank) {
  const RankLayout layout = rank_layout(c, rank);
  const size_t es = bp_dtype_size(c.dtype), count = c.count;
  std::vector<std::byte> result(layout.result * es);
  if (layout.result == 0) return result;
  // Copies the `count` elements at `from` of rank s's contribution to
  // element `to` of the result.
  auto copy_block = [&](size_t s, size_t from, size_t to) {
    std::memcpy(result.data() + to * es, contributions[s].data() + from * es, count * es);
  };
  switch (c.collective) {
    case BP_COLLECTIVE_MAX_ENUM:  // not a value; handled after the switch
      break;
    case BP_ALL_REDUCE:
    case BP_REDUCE:
      visit_dtype(c.dtype, [&](auto tag) { reduce_into<decltype(tag)>(c, contributions, 0, count, result.data()); });
      break;
    case BP_REDUCE_SCATTER:
      visit_dtype(c.dtype,
                  [&](auto tag) { reduce_into<decltype(tag)>(c, contributions, rank * count, count, result.data()); });
      break;
    case BP_BROADCAST:
      copy_block(c.root, 0, 0);
      break;
    case BP_ALL_GATHER:
    case BP_GATHER:
      for (size_t s = 0; s < c.ranks; ++s) copy_block(s, 0, s * count);
      break;
    case BP_SCATTER:
      copy_block(c.root, rank * count, 0);
      break;
    case BP_ALL_TO_ALL:
      for (size_t s = 0; s < c.ranks; ++s) copy_block(s, rank * count, s * count);
      break;
    case BP_BARRIER:
      break;
  }
  return result;
}

Comparison compare(bp_dtype dtype, std::span<const std::byte> got, std::span<const std::byte> expected) {
  Comparison comparison;
  const size_t es = bp_dtype_size(dtype);
  if (got.size() != expected.size()) {
    // Every element the two do not share counts as wrong.
    size_t shorter = std::min(got.size(), expected.size()) / es;
    comparison = compare(dtype, got.first(shorter * es), expected.first(shorter * es));
    if (comparison.wrong == 0) comparison.first_index = shorter;
    comparison.wrong += (std::max(got.size(), expected.size()) - shorter * es) / es;
    return comparison;
  }
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const size_t n = got.size() / sizeof(T);
    for (size_t i = 0; i < n; ++i) {
      bool equal;
      if constexpr (is_float_type<T>) {
        double a = to_double(load<T>(got.data(), i)), b = to_double(load<T>(expected.data(), i));
        equal = a == b || (std::isnan(a) && std::isnan(b));
      } else {
        equal = load<T>(got.data(), i) == load<T>(expected.data(), i);
      }
      if (!equal && comparison.wrong++ == 0) {
        comparison.first_index = i;
        comparison.got = format_value(dtype, got.data() + i * sizeof(T));
        comparison.expected = format_value(dtype, expected.data() + i * sizeof(T));
      }
    }
  });
  return comparison;
}

std::string format_value(bp_dtype dtype, const std::byte *element) {
  return visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    char text[48];
    T value = load<T>(element, 0);
    if constexpr (is_float_type<T>)
      std::snprintf(text, sizeof text, "%.9g", to_double(value));
    else if constexpr (std::is_signed_v<T>)
      std::snprintf(text, sizeof text, "%" PRId64, static_cast<int64_t>(value));
    else
      std::snprintf(text, sizeof text, "%" PRIu64, static_cast<uint64_t>(value));
    return std::string(text);
  });
}

Result<StagedCase> stage_case(const CollectiveCase &c, std::span<const Device> ranks, std::byte fill, uint64_t seed) {
  const size_t es = bp_dtype_size(c.dtype), n = c.ranks;
  // The caller's own mistake, not the plugin's: as visit_dtype's.
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
    if (l.in_place)
      failed = make(l.send, true, true);
    else {
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
  const size_t es = bp_dtype_size(c.dtype);
  // Ranks whose expected result is the same skip recomputing it.
  const bool same_everywhere =
      c.collective == BP_ALL_REDUCE || c.collective == BP_BROADCAST || c.collective == BP_ALL_GATHER;
  std::vector<Comparison> comparisons(c.ranks);
  std::vector<std::byte> expected, got;
  bool have_expected = false;
  for (size_t r = 0; r < c.ranks; ++r) {
    const RankLayout l = rank_layout(c, r);
    if (l.result == 0) continue;
    if (!have_expected || !same_everywhere) {
      expected = reference_result(c, contributions, r);
      have_expected = true;
    }
    got.resize(l.result * es);
    if (Status read = result_buffers[r]->read(l.result_offset * es, got.data(), got.size()); !read)
      return read.error();
    comparisons[r] = compare(c.dtype, got, expected);
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
  const size_t es = bp_dtype_size(staged.c.dtype);
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
      Change change{true, b.rank, side, e, format_value(staged.c.dtype, now.data() + e * es), ""};
      change.expected = format_value(staged.c.dtype, b.image.data() + e * es);
      return change;
    }
  }
  return Change{};
}

float half_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu, mantissa = bits & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_half(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t magnitude = x & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7E00u;   // NaN stays NaN (quiet)
  if (magnitude >= 0x47800000u) return sign | 0x7C00u;  // >= 65536: infinity
  if (magnitude < 0x38800000u) {
    // Below 2^-14 the result is subnormal: scale so one unit is 2^-24 and
    // let the FPU round to nearest even.
    float scaled = std::bit_cast<float>(magnitude) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped bits to
  // nearest even; a carry rolls into the exponent, up to infinity.
  magnitude += 0xC8000000u + 0xFFFu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | (magnitude >> 13));
}

float bfloat16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_bfloat16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace backplane::cli
