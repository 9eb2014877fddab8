// The reference semantics: layouts, the input generator, a plain sequential
// implementation of every collective over host memory, and comparison. See
// collective_reference.hpp.
#include "backplane_reference/collective_reference.hpp"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>

namespace backplane::reference {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Largest integer magnitude a sum may reach and stay exact (and in range).
int64_t exact_integer_limit(bp_dtype dtype) {
  switch (dtype) {
    case BP_DTYPE_MAX_ENUM:  // not a value; with_dtype() refuses it first
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

// A whole number in [lo, hi].
int64_t pick(uint64_t h, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(h % static_cast<uint64_t>(hi - lo + 1));
}

// A whole number in [-half_range, half_range).
int64_t centered(uint64_t h, int64_t half_range) {
  return static_cast<int64_t>(h % static_cast<uint64_t>(2 * half_range)) - half_range;
}

template <size_t bytes>
using UnsignedOfSize = std::conditional_t<
    bytes == 1, uint8_t, std::conditional_t<bytes == 2, uint16_t, std::conditional_t<bytes == 4, uint32_t, uint64_t>>>;

// The low bits of `bits` as an S, whatever S is (the copies' inputs).
template <class S>
S from_bits(uint64_t bits) {
  return std::bit_cast<S>(static_cast<UnsignedOfSize<sizeof(S)>>(bits));
}

template <class S>
uint64_t to_bits(S value) {
  return std::bit_cast<UnsignedOfSize<sizeof(S)>>(value);
}

// Sums and avgs draw from [-m, m] (or [0, m] unsigned), m small enough that
// a sum over every rank stays exact; an avg keeps room for the last rank's
// evening out, and stays within 1000 so that any division is exact.
int64_t sum_bound(const CollectiveCase &c) {
  const auto n = static_cast<int64_t>(c.ranks);
  const int64_t m = exact_integer_limit(c.dtype) / n;
  if (c.op != BP_AVG) return m;
  return std::min<int64_t>(m > n ? m - n : 0, 1000);
}

int64_t sum_draw(const CollectiveCase &c, size_t rank, size_t index, uint64_t seed) {
  const int64_t m = sum_bound(c);
  return pick(input_hash(seed, rank, index), is_signed_dtype(c.dtype) ? -m : 0, m);
}

// An avg's input: the last rank evens the sum out to a multiple of the group
// size, so the average is a whole number whatever the rounding convention.
int64_t avg_input(const CollectiveCase &c, size_t rank, size_t index, uint64_t seed) {
  const int64_t value = sum_draw(c, rank, index, seed);
  if (rank + 1 != c.ranks) return value;
  const auto n = static_cast<int64_t>(c.ranks);
  int64_t sum = 0;
  for (size_t s = 0; s < c.ranks; ++s) sum += sum_draw(c, s, index, seed);
  const int64_t rem = ((sum % n) + n) % n;
  if (rem == 0) return value;
  return (is_signed_dtype(c.dtype) || value >= rem) ? value - rem : value + (n - rem);
}

// Element `index` of rank `rank`'s contribution; the promises are in the header.
template <class E>
typename E::storage input_element(const CollectiveCase &c, size_t rank, size_t index, uint64_t seed) {
  using S = typename E::storage;
  const uint64_t h = input_hash(seed, rank, index);
  if (!is_reducing(c.collective)) return from_bits<S>(h);
  if (c.op == BP_AVG) {
    if constexpr (E::is_float)
      return E::from_double(static_cast<double>(avg_input(c, rank, index, seed)));
    else
      return static_cast<S>(avg_input(c, rank, index, seed));
  }
  if constexpr (E::is_float) {
    switch (c.op) {
      case BP_REDUCE_OP_MAX_ENUM:  // not a value; reference_result() ignores it too
      case BP_AVG:                 // above
      case BP_SUM:
        break;
      case BP_PROD: {
        // (index + rank) % (ranks + 1) is 0 for one rank of the group at most.
        const bool scaled = (index + rank) % (c.ranks + 1) == 0;
        const double magnitude = !scaled ? 1.0 : (h & 2) ? 2.0 : 0.5;
        return E::from_double((h & 1) ? -magnitude : magnitude);
      }
      case BP_MIN:
      case BP_MAX:
        if constexpr (sizeof(S) == 2)  // f16, bf16: 8 significant bits at most
          return E::from_double(static_cast<double>(centered(h, 256)) * 0.25);
        else if constexpr (sizeof(S) == 4)
          return E::from_double(std::ldexp(static_cast<double>(centered(h, int64_t{1} << 23)), -8));
        else
          return E::from_double(std::ldexp(static_cast<double>(centered(h, int64_t{1} << 52)), -20));
    }
    return E::from_double(static_cast<double>(sum_draw(c, rank, index, seed)));
  } else {
    if (c.op != BP_PROD) return static_cast<S>(h);  // the full range; sums wrap on purpose
    switch (h % 8) {
      case 0:
        return static_cast<S>(splitmix64(h));  // anything: the product wraps
      case 1:
        return static_cast<S>(2);
      case 2:
        return static_cast<S>(-1);  // all ones for the unsigned types
      default:
        return static_cast<S>(1);
    }
  }
}

// The type integers reduce in: the 64-bit integer of the same signedness,
// whose narrowing back is modular, as the type's own wrapping would be.
template <class S>
using WideInteger = std::conditional_t<std::is_signed_v<S>, int64_t, uint64_t>;

template <class A>
A combine(bp_reduce_op op, A a, A b) {
  switch (op) {
    case BP_REDUCE_OP_MAX_ENUM:  // not a value: the first operand stands
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
template <class E>
void reduce_into(const CollectiveCase &c, const std::vector<std::vector<std::byte>> &contributions, size_t offset,
                 size_t count, std::byte *result) {
  using S = typename E::storage;
  for (size_t k = 0; k < count; ++k) {
    auto element = [&](size_t s) { return load<E>(contributions[s].data(), offset + k); };
    if constexpr (E::is_float) {
      double acc = E::to_double(element(0));
      for (size_t s = 1; s < c.ranks; ++s) acc = combine(c.op, acc, E::to_double(element(s)));
      if (c.op == BP_AVG) acc /= static_cast<double>(c.ranks);
      store<E>(result, k, E::from_double(acc));
    } else {
      using A = WideInteger<S>;
      A acc = static_cast<A>(element(0));
      for (size_t s = 1; s < c.ranks; ++s) acc = combine(c.op, acc, static_cast<A>(element(s)));
      if (c.op == BP_AVG) acc /= static_cast<A>(c.ranks);
      store<E>(result, k, static_cast<S>(acc));
    }
  }
}

}  // namespace

bool is_float_dtype(bp_dtype dtype) {
  return dtype == BP_F16 || dtype == BP_BF16 || dtype == BP_F32 || dtype == BP_F64;
}

bool is_signed_dtype(bp_dtype dtype) {
  return is_float_dtype(dtype) || dtype == BP_I8 || dtype == BP_I32 || dtype == BP_I64;
}

size_t element_size(bp_dtype dtype) {
  return with_dtype(dtype, [](auto traits) { return sizeof(typename decltype(traits)::storage); });
}

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

uint64_t input_hash(uint64_t seed, uint64_t rank, uint64_t index) {
  return splitmix64(seed * 0xD6E8FEB86659FD93ull + rank * 0x9E3779B97F4A7C15ull + index);
}

std::vector<std::byte> make_contribution(const CollectiveCase &c, size_t rank, uint64_t seed) {
  const size_t elements = rank_layout(c, rank).contribution;
  return with_dtype(c.dtype, [&](auto traits) {
    using E = decltype(traits);
    std::vector<std::byte> bytes(elements * sizeof(typename E::storage));
    for (size_t i = 0; i < elements; ++i) store<E>(bytes.data(), i, input_element<E>(c, rank, i, seed));
    return bytes;
  });
}

std::vector<std::byte> reference_result(const CollectiveCase &c,
                                        const std::vector<std::vector<std::byte>> &contributions, size_t rank) {
  const RankLayout layout = rank_layout(c, rank);
  const size_t es = element_size(c.dtype), count = c.count;
  std::vector<std::byte> result(layout.result * es);
  if (layout.result == 0) return result;
  // Copies the `count` elements at `from` of rank s's contribution to
  // element `to` of the result.
  auto copy_block = [&](size_t s, size_t from, size_t to) {
    std::memcpy(result.data() + to * es, contributions[s].data() + from * es, count * es);
  };
  auto reduce_block = [&](size_t offset) {
    with_dtype(c.dtype,
               [&](auto traits) { reduce_into<decltype(traits)>(c, contributions, offset, count, result.data()); });
  };
  switch (c.collective) {
    case BP_COLLECTIVE_MAX_ENUM:  // not a value: rank_layout() gives it no result
      break;
    case BP_ALL_REDUCE:
    case BP_REDUCE:
      reduce_block(0);
      break;
    case BP_REDUCE_SCATTER:
      reduce_block(rank * count);
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

Equality result_equality(bp_collective collective) {
  return is_reducing(collective) ? Equality::value : Equality::bits;
}

Comparison compare(bp_dtype dtype, std::span<const std::byte> got, std::span<const std::byte> expected,
                   Equality equality) {
  Comparison comparison;
  const size_t es = element_size(dtype);
  if (got.size() != expected.size()) {
    // Every element the two do not share counts as wrong.
    const size_t shorter = std::min(got.size(), expected.size()) / es;
    comparison = compare(dtype, got.first(shorter * es), expected.first(shorter * es), equality);
    if (comparison.wrong == 0) comparison.first_index = shorter;
    comparison.wrong += (std::max(got.size(), expected.size()) - shorter * es) / es;
    return comparison;
  }
  with_dtype(dtype, [&](auto traits) {
    using E = decltype(traits);
    const size_t n = got.size() / es;
    for (size_t i = 0; i < n; ++i) {
      bool equal;
      if (equality == Equality::bits) {
        equal = std::memcmp(got.data() + i * es, expected.data() + i * es, es) == 0;
      } else if constexpr (E::is_float) {
        const double a = E::to_double(load<E>(got.data(), i)), b = E::to_double(load<E>(expected.data(), i));
        equal = a == b || (std::isnan(a) && std::isnan(b));
      } else {
        equal = load<E>(got.data(), i) == load<E>(expected.data(), i);
      }
      if (!equal && comparison.wrong++ == 0) {
        comparison.first_index = i;
        comparison.got = format_value(dtype, got.data() + i * es);
        comparison.expected = format_value(dtype, expected.data() + i * es);
      }
    }
  });
  return comparison;
}

std::string format_value(bp_dtype dtype, const std::byte *element) {
  return with_dtype(dtype, [&](auto traits) {
    using E = decltype(traits);
    using S = typename E::storage;
    char text[64];
    const S value = load<E>(element, 0);
    if constexpr (E::is_float) {
      // As many digits as tell every value of the format apart.
      const int digits = sizeof(S) == 8 ? 17 : 9;
      std::snprintf(text, sizeof text, "%.*g (0x%0*" PRIx64 ")", digits, E::to_double(value),
                    static_cast<int>(2 * sizeof(S)), to_bits(value));
    } else if constexpr (std::is_signed_v<S>) {
      std::snprintf(text, sizeof text, "%" PRId64, static_cast<int64_t>(value));
    } else {
      std::snprintf(text, sizeof text, "%" PRIu64, static_cast<uint64_t>(value));
    }
    return std::string(text);
  });
}

}  // namespace backplane::reference
