// Groups that span processes (span.hpp).
#include "span.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <array>
#include <cstdio>
#include <iterator>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <utility>

#include "c_api_guard.hpp"
#include "fleet_problems.hpp"
#include "host.hpp"
#include "log.hpp"
#include "names.hpp"
#include "staging.hpp"

namespace backplane {
namespace {

constexpr std::align_val_t kAreaAlignment{64};
constexpr size_t kAreaGranule = 4096;

std::string operation_of(const bp_collective_request &request) {
  std::string text = collective_name(request.collective);
  if (request.collective == BP_BARRIER) return text;
  text += std::string("(") + dtype_name(request.dtype);
  if (collective_reduces(request.collective)) text += std::string(", ") + reduce_op_name(request.reduce_op);
  return text + ")";
}

// The process that holds global rank `rank`.
uint32_t process_of(const Span &span, uint64_t rank) {
  const auto after = std::upper_bound(span.process_first.begin(), span.process_first.end(), rank);
  return static_cast<uint32_t>(after - span.process_first.begin() - 1);
}

// Where the local phases run: the group's own comm over its ranks' host
// memory, or, for a staged group (Span::staged), the staging's cpu comm
// over the ranks' copies in host memory.
struct LocalSide {
  LoadedPlugin *plugin = nullptr;
  bp_plugin_comm *comm = nullptr;
  uint32_t kind_index = 0;                  // in the plugin
  const uint32_t *devices = nullptr;        // local rank r's device index in the plugin
  const std::vector<bp_plugin_buffer *> *send = nullptr, *recv = nullptr;  // the call's buffers, on that plugin
};

// Host memory of `bytes` wrapped as a buffer on local rank `rank`'s device
// of the local side, destroyed with the set.
class Views {
 public:
  explicit Views(const LocalSide &side) : side_(side), plugin_(*side.plugin) {}
  Views(const Views &) = delete;
  Views &operator=(const Views &) = delete;
  ~Views() { clear(); }
  void clear() {
    for (bp_plugin_buffer *view : views_)
      call_plugin_release(plugin_, "buffer_destroy", [&] { plugin_.functions.buffer_destroy(plugin_.state, view); });
    views_.clear();
  }
  Status wrap(size_t rank, std::byte *memory, size_t bytes, bp_plugin_buffer *&view) {
    view = nullptr;
    // A wrapped range of zero bytes is still a buffer: the plugin sees count 0.
    Status status = call_plugin(plugin_, "buffer_wrap_host", [&](bp_error_sink *sink) {
      return plugin_.functions.buffer_wrap_host(plugin_.state, side_.kind_index, side_.devices[rank], memory,
                                                std::max<size_t>(bytes, 1), &view, sink);
    });
    if (status && !view) status = plugin_returned_null(plugin_, "buffer_wrap_host");
    if (status) views_.push_back(view);
    return status;
  }

 private:
  const LocalSide &side_;
  LoadedPlugin &plugin_;
  std::vector<bp_plugin_buffer *> views_;
};

// One call's phases: the local ranks' work on the group's own comm, and the
// exchanges across processes.
class SpanningCall {
 public:
  SpanningCall(bp_group &group, const bp_collective_request &request, const LocalSide &side)
      : span_(*group.span),
        request_(request),
        side_(side),
        plugin_(*side.plugin),
        local_(group.ranks.size()),
        element_(dtype_size(request.dtype)),
        block_(request.count * element_),
        local_op_(request.reduce_op == BP_AVG ? uint32_t{BP_SUM} : request.reduce_op),
        fragment_elements_(std::max<size_t>(1, group.span->fragment_bytes / std::max<size_t>(element_, 1))),
        views_(side) {}

  Status run();
  Status guard();
  // One exchange across processes, of `count` elements of `dtype` per block.
  Status exchange(uint32_t collective, uint32_t dtype, uint32_t op, size_t count, uint32_t root_process,
                  const void *send, void *recv, uint32_t flags);

 private:
  // exchange() in two halves: `started` is left in flight (NULL for a
  // plugin that completed it in its start), `finish` waits and releases it.
  // Either breaks the group when it fails.
  Status start(uint32_t collective, uint32_t dtype, uint32_t op, size_t count, uint32_t root_process,
               const void *send, void *recv, uint32_t flags, bp_plugin_request *&started);
  Status finish(bp_plugin_request *started);
  Status broke(Status failed);
  // The fragments of a large collective: fragment k's exchange is in flight
  // while fragment k-1's local `after` and fragment k+1's local `before` run
  // (what coll/han does between its levels). `cross(k, started)` starts
  // fragment k's exchange; `before` or `after` may do nothing.
  template <typename Before, typename Cross, typename After>
  Status pipelined(Before &&before, Cross &&cross, After &&after);
  // Decided alike on every process: whether any process has several ranks.
  bool pipelines() const {
    return span_.several_local && span_.fragment_bytes > 0 && block_ > span_.fragment_bytes;
  }
  // A local collective on fragment k's views, which go once it ran.
  Status local_in_fragment(uint32_t collective, uint32_t root, size_t k, const std::vector<bp_plugin_buffer *> &send,
                           const std::vector<bp_plugin_buffer *> &recv) {
    Status status = local(collective, root, fragment_count(k), send, recv);
    views_.clear();
    return status;
  }
  // Fragment k: its first element and its element count.
  size_t fragment_first(size_t k) const { return k * fragment_elements_; }
  size_t fragment_count(size_t k) const { return std::min(fragment_elements_, request_.count - fragment_first(k)); }
  // Local rank r's memory from fragment k's first element on, as a buffer of its device.
  Status fragment_view(size_t r, std::byte *memory, size_t k, bp_plugin_buffer *&view) {
    return views_.wrap(r, memory + fragment_first(k) * element_, fragment_count(k) * element_, view);
  }
  // Every local rank's send and recv at fragment k; a rank in place gets one
  // view for both, as the caller gave one buffer for both.
  Status fragment_views(size_t k, bool sends, bool recvs, std::vector<bp_plugin_buffer *> &send_views,
                        std::vector<bp_plugin_buffer *> &recv_views);
  Status pipelined_all_reduce();
  Status pipelined_reduce();
  Status pipelined_broadcast();

  // The local ranks' collective over the group's comm (op: local_op_).
  Status local(uint32_t collective, uint32_t root, size_t count, const std::vector<bp_plugin_buffer *> &send,
               const std::vector<bp_plugin_buffer *> &recv) {
    return run_collective(plugin_, side_.comm,
                          collective_args(collective, request_.dtype, local_op_, root, count, local_,
                                          send.data(), recv.data(), BP_COLLECTIVE_CALLER_WAITS));
  }
  // The call's own exchange.
  Status exchange(uint32_t collective, uint32_t root_process, const void *send, void *recv) {
    return exchange(collective, request_.dtype, request_.reduce_op, request_.count, root_process, send, recv, 0);
  }
  Status memory(bp_plugin_buffer *handle, std::byte *&out) { return plugin_host_memory(plugin_, handle, out); }
  std::byte *block_of(std::byte *memory, uint64_t block) const { return memory + block * block_; }
  // Local rank r's send and recv (the checked arguments) and whether it is in place.
  bp_plugin_buffer *send(size_t r) const { return (*side_.send)[r]; }
  bp_plugin_buffer *recv(size_t r) const { return (*side_.recv)[r]; }
  bool in_place(size_t r) const { return send(r) && send(r) == recv(r); }
  // Only entry `rank` set: a rooted local collective's one buffer.
  std::vector<bp_plugin_buffer *> only(size_t rank, bp_plugin_buffer *handle) const {
    std::vector<bp_plugin_buffer *> handles(local_, nullptr);
    handles[rank] = handle;
    return handles;
  }

  Status all_reduce();
  Status reduce();
  Status broadcast();
  Status gather(bool to_all);
  Status reduce_scatter();
  Status scatter();
  Status all_to_all();

  Span &span_;
  const bp_collective_request &request_;
  const LocalSide &side_;
  LoadedPlugin &plugin_;
  const size_t local_, element_, block_;
  const uint32_t local_op_;
  const size_t fragment_elements_;
  Views views_;
};

// An exchange's start and its wait, for the calls and for group creation.
Status start_exchange(Span &span, const bp_transport_exchange &exchange, bp_plugin_request *&started) {
  LoadedPlugin &plugin = *span.transport->plugin;
  started = nullptr;
  Status status = call_plugin(plugin, "exchange_start", [&](bp_error_sink *sink) {
    return plugin.transport_functions.exchange_start(plugin.state, span.comm, &exchange, &started, sink);
  });
  if (!status) started = nullptr;
  return status;
}

Status finish_exchange(Span &span, bp_plugin_request *started) {
  if (!started) return {};
  LoadedPlugin &plugin = *span.transport->plugin;
  const bp_transport_functions &functions = plugin.transport_functions;
  Status status = call_plugin(plugin, "exchange_wait", [&](bp_error_sink *sink) {
    return functions.exchange_wait(plugin.state, started, span.transport->timeout_ns, sink);
  });
  if (!status && status.error().code() == BP_TIMEOUT) {
    span.abandoned.push_back(started);  // still in flight: released with the group
  } else {
    call_plugin_release(plugin, "exchange_release", [&] { functions.exchange_release(plugin.state, started); });
  }
  return status;
}

bp_transport_exchange exchange_of(const Span &span, uint32_t collective, uint32_t dtype, uint32_t op, size_t count,
                                  uint32_t root_process, const void *send, void *recv, uint32_t flags) {
  bp_transport_exchange exchange{};
  exchange.struct_size = sizeof exchange;
  exchange.collective = collective;
  exchange.dtype = dtype;
  exchange.reduce_op = op;
  exchange.root = root_process;
  exchange.count = count;
  exchange.send = send;
  exchange.recv = recv;
  exchange.average_over = span.global_size;
  exchange.flags = flags;
  return exchange;
}

Status SpanningCall::start(uint32_t collective, uint32_t dtype, uint32_t op, size_t count, uint32_t root_process,
                           const void *send, void *recv, uint32_t flags, bp_plugin_request *&started) {
  const bp_transport_exchange exchange =
      exchange_of(span_, collective, dtype, op, count, root_process, send, recv, flags);
  if (Status status = start_exchange(span_, exchange, started); !status) return broke(std::move(status));
  return {};
}

Status SpanningCall::finish(bp_plugin_request *started) {
  if (Status status = finish_exchange(span_, started); !status) return broke(std::move(status));
  return {};
}

Status SpanningCall::exchange(uint32_t collective, uint32_t dtype, uint32_t op, size_t count, uint32_t root_process,
                              const void *send, void *recv, uint32_t flags) {
  bp_plugin_request *started = nullptr;
  if (Status status = start(collective, dtype, op, count, root_process, send, recv, flags, started); !status)
    return status;
  return finish(started);
}

Status SpanningCall::broke(Status failed) {
  // The processes may now be in different calls: nothing more runs on the group.
  Error error = failed.take_error();
  span_.broken_reason = "call " + std::to_string(span_.calls) + " (" + operation_of(request_) + ") failed: " +
                        error.message();
  span_.broken.store(true, std::memory_order_release);
  error.with("process", span_.process_index).with("processes", span_.process_count);
  if (error.code() == BP_TIMEOUT) {
    error.with("timeout_s", static_cast<double>(span_.transport->timeout_ns) / 1e9);
    return std::move(error).hint("every process must make the same calls on the group in the same order; the "
                                 "group is broken now: destroy it");
  }
  return error;
}

template <typename Before, typename Cross, typename After>
Status SpanningCall::pipelined(Before &&before, Cross &&cross, After &&after) {
  const size_t fragments = (request_.count + fragment_elements_ - 1) / fragment_elements_;
  bp_plugin_request *in_flight = nullptr;  // fragment k-1's exchange
  // A failure with an exchange in flight leaves it to the group, broken
  // now, which releases it when it is destroyed (room kept for it first,
  // so that an exception on the way out loses nothing).
  span_.abandoned.reserve(span_.abandoned.size() + 2);
  auto give_up = [&](Status failed) {
    if (in_flight) span_.abandoned.push_back(std::exchange(in_flight, nullptr));
    return failed;
  };
  struct KeepInFlight {
    Span &span;
    bp_plugin_request *&request;
    ~KeepInFlight() {
      if (request) span.abandoned.push_back(request);  // within the room reserved: cannot throw
    }
  } keep{span_, in_flight};
  for (size_t k = 0; k < fragments; ++k) {
    if (Status status = before(k); !status) return give_up(std::move(status));
    bp_plugin_request *started = nullptr;
    if (Status status = cross(k, started); !status) return give_up(std::move(status));
    if (k == 0) {
      in_flight = started;
      continue;
    }
    // finish() owns the previous one from here, in_flight the new one.
    bp_plugin_request *previous = std::exchange(in_flight, started);
    if (Status status = finish(previous); !status) return give_up(std::move(status));
    if (Status status = after(k - 1); !status) return give_up(std::move(status));
  }
  if (Status status = finish(std::exchange(in_flight, nullptr)); !status) return status;
  return after(fragments - 1);
}

Status SpanningCall::fragment_views(size_t k, bool sends, bool recvs, std::vector<bp_plugin_buffer *> &send_views,
                                    std::vector<bp_plugin_buffer *> &recv_views) {
  send_views.assign(local_, nullptr);
  recv_views.assign(local_, nullptr);
  for (size_t r = 0; r < local_; ++r) {
    std::byte *memory = nullptr;
    if (send(r) && (sends || (recvs && in_place(r)))) {
      if (Status status = this->memory(send(r), memory); !status) return status;
      if (Status status = fragment_view(r, memory, k, send_views[r]); !status) return status;
    }
    if (!recvs) continue;
    if (in_place(r)) {
      recv_views[r] = send_views[r];
      continue;
    }
    if (!recv(r)) continue;  // off the root of a reduce
    if (Status status = this->memory(recv(r), memory); !status) return status;
    if (Status status = fragment_view(r, memory, k, recv_views[r]); !status) return status;
  }
  if (!sends) std::fill(send_views.begin(), send_views.end(), nullptr);
  return {};
}

// Fragment by fragment: a local reduce into rank 0's recv, the exchange in
// place there, a local broadcast from it.
// A process with one rank cuts its exchange alike (the processes' calls
// must pair up) and has no local phase: its send crosses as it is.
Status SpanningCall::pipelined_all_reduce() {
  std::byte *result = nullptr, *source = nullptr;
  if (Status status = memory(recv(0), result); !status) return status;
  if (Status status = memory(send(0), source); !status) return status;
  std::vector<bp_plugin_buffer *> sends, recvs;
  auto before = [&](size_t k) -> Status {
    if (local_ == 1) return {};
    if (Status status = fragment_views(k, true, true, sends, recvs); !status) return status;
    return local_in_fragment(BP_REDUCE, 0, k, sends, only(0, recvs[0]));
  };
  auto cross = [&](size_t k, bp_plugin_request *&started) {
    const size_t offset = fragment_first(k) * element_;
    return start(BP_ALL_REDUCE, request_.dtype, request_.reduce_op, fragment_count(k), 0,
                 (local_ == 1 ? source : result) + offset, result + offset, 0, started);
  };
  auto after = [&](size_t k) -> Status {
    if (local_ == 1) return {};
    if (Status status = fragment_views(k, false, true, sends, recvs); !status) return status;
    return local_in_fragment(BP_BROADCAST, 0, k, only(0, recvs[0]), recvs);
  };
  return pipelined(before, cross, after);
}

// Fragment by fragment: the local reduce to the root's rank (or to the
// group's memory off the root's process), then the exchange's reduce.
Status SpanningCall::pipelined_reduce() {
  const uint32_t root_process = process_of(span_, request_.root);
  const bool at_root = root_process == span_.process_index;
  const size_t collector = at_root ? request_.root - span_.first_rank : 0;
  // What crosses: this process's partial result (its one rank's send when
  // it has one), into the root's recv on the root's process.
  std::byte *result = nullptr, *partial = nullptr;
  if (at_root) {
    if (Status status = memory(recv(collector), result); !status) return status;
  }
  if (local_ == 1) {
    if (Status status = memory(send(0), partial); !status) return status;
  } else if (at_root) {
    partial = result;
  } else {
    if (Status status = span_.scratch.ensure(block_); !status) return status;
    partial = span_.scratch.memory;
  }
  std::vector<bp_plugin_buffer *> sends, recvs;
  auto before = [&](size_t k) -> Status {
    if (local_ == 1) return {};
    if (Status status = fragment_views(k, true, at_root, sends, recvs); !status) return status;
    if (!at_root) {
      if (Status status = fragment_view(0, partial, k, recvs[0]); !status) return status;
    }
    return local_in_fragment(BP_REDUCE, static_cast<uint32_t>(collector), k, sends, only(collector, recvs[collector]));
  };
  auto cross = [&](size_t k, bp_plugin_request *&started) {
    const size_t offset = fragment_first(k) * element_;
    return start(BP_REDUCE, request_.dtype, request_.reduce_op, fragment_count(k), root_process, partial + offset,
                 at_root ? result + offset : nullptr, 0, started);
  };
  return pipelined(before, cross, [](size_t) { return Status(); });
}

// Fragment by fragment: the exchange's broadcast to this process's rank
// (the root's send on its process), then a local broadcast from it.
Status SpanningCall::pipelined_broadcast() {
  const uint32_t root_process = process_of(span_, request_.root);
  const bool at_root = root_process == span_.process_index;
  const size_t from = at_root ? request_.root - span_.first_rank : 0;
  std::byte *source = nullptr;
  if (Status status = memory(at_root ? send(from) : recv(0), source); !status) return status;
  std::vector<bp_plugin_buffer *> sends, recvs;
  auto cross = [&](size_t k, bp_plugin_request *&started) {
    std::byte *part = source + fragment_first(k) * element_;
    return start(BP_BROADCAST, request_.dtype, request_.reduce_op, fragment_count(k), root_process,
                 at_root ? part : nullptr, at_root ? nullptr : part, 0, started);
  };
  auto after = [&](size_t k) -> Status {
    if (local_ == 1 && !at_root) return {};
    if (local_ == 1 && in_place(0)) return {};
    if (Status status = fragment_views(k, at_root, true, sends, recvs); !status) return status;
    bp_plugin_buffer *origin = at_root ? sends[from] : recvs[0];
    return local_in_fragment(BP_BROADCAST, static_cast<uint32_t>(from), k, only(from, origin), recvs);
  };
  return pipelined([](size_t) { return Status(); }, cross, after);
}

Status SpanningCall::all_reduce() {
  if (pipelines()) return pipelined_all_reduce();
  std::byte *result = nullptr;
  if (local_ == 1) {
    std::byte *source = nullptr;
    if (Status status = memory(send(0), source); !status) return status;
    if (Status status = memory(recv(0), result); !status) return status;
    return exchange(BP_ALL_REDUCE, 0, source, result);
  }
  // Local reduce to rank 0, the exchange in place on its result, a local broadcast.
  if (Status status = local(BP_REDUCE, 0, request_.count, *side_.send, only(0, recv(0))); !status) return status;
  if (Status status = memory(recv(0), result); !status) return status;
  if (Status status = exchange(BP_ALL_REDUCE, 0, result, result); !status) return status;
  return local(BP_BROADCAST, 0, request_.count, only(0, recv(0)), *side_.recv);
}

Status SpanningCall::reduce() {
  if (pipelines()) return pipelined_reduce();
  const uint32_t root_process = process_of(span_, request_.root);
  if (root_process == span_.process_index) {
    const size_t root = request_.root - span_.first_rank;
    std::byte *source = nullptr, *result = nullptr;
    if (Status status = memory(recv(root), result); !status) return status;
    if (local_ == 1) {
      if (Status status = memory(send(0), source); !status) return status;
      return exchange(BP_REDUCE, root_process, source, result);
    }
    if (Status status = local(BP_REDUCE, static_cast<uint32_t>(root), request_.count, *side_.send,
                              only(root, recv(root)));
        !status)
      return status;
    return exchange(BP_REDUCE, root_process, result, result);
  }
  std::byte *partial = nullptr;
  if (local_ == 1) {
    if (Status status = memory(send(0), partial); !status) return status;
  } else {
    // This process's partial sum has no buffer of the caller's: the group's own.
    if (Status status = span_.scratch.ensure(block_); !status) return status;
    partial = span_.scratch.memory;
    bp_plugin_buffer *view = nullptr;
    if (Status status = views_.wrap(0, partial, block_, view); !status) return status;
    if (Status status = local(BP_REDUCE, 0, request_.count, *side_.send, only(0, view)); !status) return status;
  }
  return exchange(BP_REDUCE, root_process, partial, nullptr);
}

Status SpanningCall::broadcast() {
  if (pipelines()) return pipelined_broadcast();
  const uint32_t root_process = process_of(span_, request_.root);
  if (root_process == span_.process_index) {
    const size_t root = request_.root - span_.first_rank;
    std::byte *source = nullptr;
    if (Status status = memory(send(root), source); !status) return status;
    if (Status status = exchange(BP_BROADCAST, root_process, source, nullptr); !status) return status;
    return local(BP_BROADCAST, static_cast<uint32_t>(root), request_.count, only(root, send(root)),
                 *side_.recv);
  }
  std::byte *result = nullptr;
  if (Status status = memory(recv(0), result); !status) return status;
  if (Status status = exchange(BP_BROADCAST, root_process, nullptr, result); !status) return status;
  if (local_ == 1) return {};
  return local(BP_BROADCAST, 0, request_.count, only(0, recv(0)), *side_.recv);
}

// all_gather (to_all) and gather: the local ranks gather into this
// process's part of the collecting rank's recv (its blocks at first_rank),
// which the exchange then fills in place; all_gather broadcasts the whole.
Status SpanningCall::gather(bool to_all) {
  const uint32_t root_process = to_all ? 0 : process_of(span_, request_.root);
  const bool collects = to_all || root_process == span_.process_index;
  const size_t collector = to_all || !collects ? 0 : request_.root - span_.first_rank;
  const size_t part_bytes = local_ * block_;
  std::byte *whole = nullptr, *part = nullptr;
  if (collects) {
    if (Status status = memory(recv(collector), whole); !status) return status;
    part = block_of(whole, span_.first_rank);
  } else {
    if (Status status = span_.scratch.ensure(part_bytes); !status) return status;
    part = span_.scratch.memory;
  }
  bp_plugin_buffer *part_view = nullptr;
  if (Status status = views_.wrap(collector, part, part_bytes, part_view); !status) return status;
  std::vector<bp_plugin_buffer *> sends(local_, nullptr);
  for (size_t r = 0; r < local_; ++r) {
    if (!in_place(r)) {
      sends[r] = send(r);
    } else if (r == collector) {
      sends[r] = part_view;  // its block is where the local gather puts it: in place there too
    } else {
      // In place off the collector (all_gather): its block r of its own recv.
      std::byte *own = nullptr;
      if (Status status = memory(recv(r), own); !status) return status;
      if (Status status = views_.wrap(r, block_of(own, span_.first_rank + r), block_, sends[r]); !status)
        return status;
    }
  }
  if (Status status = local(BP_GATHER, static_cast<uint32_t>(collector), request_.count, sends,
                            only(collector, part_view));
      !status)
    return status;
  // At the root in place: its part is already where it goes in `whole`.
  if (!to_all) return exchange(BP_GATHER, root_process, collects ? whole : part, collects ? whole : nullptr);
  if (Status status = exchange(BP_ALL_GATHER, 0, whole, whole); !status) return status;
  if (local_ == 1) return {};
  return local(BP_BROADCAST, 0, request_.count * span_.global_size, only(0, recv(0)), *side_.recv);
}

// A local reduce of every block to rank 0 (the group's memory), the
// exchange's reduce_scatter to this process's part, a local scatter of it.
Status SpanningCall::reduce_scatter() {
  const size_t all_bytes = span_.global_size * block_, part_bytes = local_ * block_;
  if (Status status = span_.scratch.ensure(all_bytes + part_bytes); !status) return status;
  std::byte *const reduced = span_.scratch.memory, *const part = reduced + all_bytes;
  bp_plugin_buffer *reduced_view = nullptr, *part_view = nullptr;
  if (Status status = views_.wrap(0, reduced, all_bytes, reduced_view); !status) return status;
  if (Status status = views_.wrap(0, part, part_bytes, part_view); !status) return status;
  if (Status status = local(BP_REDUCE, 0, request_.count * span_.global_size, *side_.send,
                            only(0, reduced_view));
      !status)
    return status;
  if (Status status = exchange(BP_REDUCE_SCATTER, 0, reduced, part); !status) return status;
  std::vector<bp_plugin_buffer *> recvs(local_, nullptr);
  for (size_t r = 0; r < local_; ++r) {
    if (!in_place(r)) {
      recvs[r] = recv(r);
      continue;
    }
    // In place: the result is block (first_rank + r) of its send.
    std::byte *own = nullptr;
    if (Status status = memory(send(r), own); !status) return status;
    if (Status status = views_.wrap(r, block_of(own, span_.first_rank + r), block_, recvs[r]); !status) return status;
  }
  return local(BP_SCATTER, 0, request_.count, only(0, part_view), recvs);
}

// The exchange's scatter gives each process its part (the group's memory),
// then a local scatter from the root's rank, or from rank 0 elsewhere.
Status SpanningCall::scatter() {
  const uint32_t root_process = process_of(span_, request_.root);
  const bool at_root = root_process == span_.process_index;
  const size_t from = at_root ? request_.root - span_.first_rank : 0;
  const size_t part_bytes = local_ * block_;
  if (Status status = span_.scratch.ensure(part_bytes); !status) return status;
  std::byte *const part = span_.scratch.memory;
  std::byte *source = nullptr;
  if (at_root) {
    if (Status status = memory(send(from), source); !status) return status;
  }
  if (Status status = exchange(BP_SCATTER, root_process, source, part); !status) return status;
  bp_plugin_buffer *part_view = nullptr;
  if (Status status = views_.wrap(from, part, part_bytes, part_view); !status) return status;
  std::vector<bp_plugin_buffer *> recvs = *side_.recv;
  if (at_root && in_place(from)) {
    // The root's result is its block of its own send.
    if (Status status = views_.wrap(from, block_of(source, request_.root), block_, recvs[from]); !status)
      return status;
  }
  return local(BP_SCATTER, static_cast<uint32_t>(from), request_.count, only(from, part_view), recvs);
}

// Block j of local rank r's send goes to rank j: the exchange carries, to
// each process q, every local rank's blocks for q's ranks, rank by rank.
// With one local rank and distinct buffers that is its send and recv as
// they are; otherwise the group's memory holds both layouts.
Status SpanningCall::all_to_all() {
  const uint64_t global = span_.global_size;
  std::vector<std::byte *> sends(local_), recvs(local_);
  for (size_t r = 0; r < local_; ++r) {
    if (Status status = memory(send(r), sends[r]); !status) return status;
    if (Status status = memory(recv(r), recvs[r]); !status) return status;
  }
  if (local_ == 1 && sends[0] != recvs[0]) return exchange(BP_ALL_TO_ALL, 0, sends[0], recvs[0]);
  size_t side = 0;
  if (__builtin_mul_overflow(local_ * block_, global, &side) || side > SIZE_MAX / 2)
    return Error(BP_OUT_OF_MEMORY, "all_to_all across processes: " + std::to_string(local_) + " local ranks of " +
                                       std::to_string(global) + " blocks of " + std::to_string(block_) +
                                       " bytes overflow the host memory it packs them in");
  if (Status status = span_.packed.ensure(2 * side); !status) return status;
  std::byte *const out = span_.packed.memory, *const in = out + side;
  std::byte *cursor = out;
  for (uint32_t q = 0; q < span_.process_count; ++q) {
    const size_t bytes = span_.process_ranks[q] * block_;
    for (size_t r = 0; r < local_; ++r, cursor += bytes)
      std::memcpy(cursor, block_of(sends[r], span_.process_first[q]), bytes);
  }
  if (Status status = exchange(BP_ALL_TO_ALL, 0, out, in); !status) return status;
  cursor = in;
  for (uint32_t q = 0; q < span_.process_count; ++q) {
    for (uint64_t sender = 0; sender < span_.process_ranks[q]; ++sender) {
      for (size_t j = 0; j < local_; ++j, cursor += block_)
        std::memcpy(block_of(recvs[j], span_.process_first[q] + sender), cursor, block_);
    }
  }
  return {};
}

Status SpanningCall::run() {
  switch (request_.collective) {
    case BP_ALL_REDUCE: return all_reduce();
    case BP_REDUCE: return reduce();
    case BP_BROADCAST: return broadcast();
    case BP_ALL_GATHER: return gather(true);
    case BP_REDUCE_SCATTER: return reduce_scatter();
    case BP_GATHER: return gather(false);
    case BP_SCATTER: return scatter();
    case BP_ALL_TO_ALL: return all_to_all();
    default: return exchange(BP_BARRIER, 0, nullptr, nullptr);
  }
}

// ---- ranks staged through host memory ----------------------------------------

// A staged group's call (Span::staged): each rank's input copied by its own
// plugin into its host area, wrapped there as a buffer of its cpu device in
// the staging's comm, and the result copied back. A cpu rank (the
// staging's direct ranks) takes part in its own memory.
class StagedRanks {
 public:
  // `send` and `recv`: the ranks' own buffers, on their plugins.
  StagedRanks(bp_group &group, const bp_collective_request &request, const std::vector<bp_plugin_buffer *> &send,
              const std::vector<bp_plugin_buffer *> &recv, const LocalSide &side)
      : group_(group), request_(request), send_(send), recv_(recv), views_(side) {}

  Status up() {
    Span &span = *group_.span;
    const Staging &staging = *group_.staging;
    std::vector<bp_plugin_buffer *> &staged_send = span.staged_send, &staged_recv = span.staged_recv;
    const size_t block = request_.count * dtype_size(request_.dtype);
    const bool rooted = collective_has_root(request_.collective);
    for (size_t r = 0; r < group_.ranks.size(); ++r) {
      bp_plugin_buffer *const send = send_[r], *const recv = recv_[r];
      if (staging.direct[r]) {
        staged_send[r] = send;
        staged_recv[r] = recv;
        continue;
      }
      const bool is_root = rooted && span.first_rank + r == request_.root;
      const bp_rank_buffers use = bp_rank_buffers_of(request_.collective, span.global_size, is_root);
      const size_t send_bytes = use.uses_send && send ? use.send_blocks * block : 0;
      const size_t recv_bytes = use.uses_recv && recv ? use.recv_blocks * block : 0;
      const bool in_place = send && send == recv;
      // In place: one area for both, copied up whole and back whole.
      const size_t up_bytes = in_place ? std::max(send_bytes, recv_bytes) : send_bytes;
      const size_t down_bytes = in_place ? up_bytes : recv_bytes;
      HostArea &area = span.rank_areas[r];
      if (Status status = area.ensure(in_place ? up_bytes : send_bytes + recv_bytes); !status) return status;
      std::byte *const up_memory = area.memory, *const down_memory = in_place ? area.memory : area.memory + send_bytes;
      LoadedPlugin &plugin = *group_.ranks[r]->kind->plugin;
      if (up_bytes > 0) {
        Status status = call_plugin(plugin, "buffer_read", [&](bp_error_sink *sink) {
          return plugin.functions.buffer_read(plugin.state, send, 0, up_memory, up_bytes, sink);
        });
        if (!status) return status;
        if (Status wrapped = views_.wrap(r, up_memory, up_bytes, staged_send[r]); !wrapped) return wrapped;
      }
      if (in_place) {
        staged_recv[r] = staged_send[r];
      } else if (down_bytes > 0) {
        if (Status wrapped = views_.wrap(r, down_memory, down_bytes, staged_recv[r]); !wrapped) return wrapped;
      }
      if (down_bytes > 0) copies_.push_back({r, down_memory, down_bytes});
    }
    copied_ = true;
    return {};
  }

  bool copied() const { return copied_; }

  Status down() {
    for (const Copy &copy : copies_) {
      LoadedPlugin &plugin = *group_.ranks[copy.rank]->kind->plugin;
      bp_plugin_buffer *const recv = recv_[copy.rank];
      Status status = call_plugin(plugin, "buffer_write", [&](bp_error_sink *sink) {
        return plugin.functions.buffer_write(plugin.state, recv, 0, copy.memory, copy.bytes, sink);
      });
      if (!status) return std::move(status.take_error().with("rank", group_.span->first_rank + copy.rank));
    }
    return {};
  }

 private:
  struct Copy {
    size_t rank;
    const std::byte *memory;
    size_t bytes;
  };
  bp_group &group_;
  const bp_collective_request &request_;
  const std::vector<bp_plugin_buffer *> &send_, &recv_;
  Views views_;
  std::vector<Copy> copies_;
  bool copied_ = false;
};

// ---- the mismatch guard ---------------------------------------------------

// What every process must agree on about a call, in this order.
constexpr const char *kFingerprintFields[] = {"collective", "dtype", "reduce_op", "count", "root", "group", "sequence"};
constexpr size_t kFingerprintSize = std::size(kFingerprintFields);
using Fingerprint = std::array<uint64_t, kFingerprintSize>;

Fingerprint fingerprint_of(const Span &span, const bp_collective_request &request) {
  const bool reduces = collective_reduces(request.collective), rooted = collective_has_root(request.collective);
  const bool typed = request.collective != BP_BARRIER;
  return {request.collective,  typed ? request.dtype : 0u,  reduces ? request.reduce_op : 0u,
          typed ? request.count : 0u, rooted ? request.root : 0u, span.group_digest, span.calls};
}

uint64_t mix(uint64_t hash, uint64_t value) {
  // splitmix64's finaliser over the running hash: every field moves every bit.
  hash ^= value + 0x9E3779B97F4A7C15ull + (hash << 6) + (hash >> 2);
  hash ^= hash >> 30;
  hash *= 0xBF58476D1CE4E5B9ull;
  hash ^= hash >> 27;
  hash *= 0x94D049BB133111EBull;
  return hash ^ (hash >> 31);
}

std::string field_value(size_t field, uint64_t value) {
  switch (field) {
    case 0: return collective_name(static_cast<uint32_t>(value));
    case 1: return dtype_name(static_cast<uint32_t>(value));
    case 2: return reduce_op_name(static_cast<uint32_t>(value));
    default: return std::to_string(value);
  }
}

// The processes' fingerprints differ: which fields, with which process passing what.
Error mismatch(const Span &span, const bp_collective_request &request, const std::vector<Fingerprint> &all) {
  std::string text;
  nlohmann::json fields = nlohmann::json::object();
  std::vector<uint32_t> differing;
  for (size_t field = 0; field < kFingerprintSize; ++field) {
    std::vector<std::pair<uint64_t, std::vector<uint32_t>>> values;  // value -> processes, in first-seen order
    for (uint32_t p = 0; p < all.size(); ++p) {
      auto found = std::find_if(values.begin(), values.end(), [&](const auto &v) { return v.first == all[p][field]; });
      if (found == values.end()) values.push_back({all[p][field], {p}});
      else found->second.push_back(p);
    }
    if (values.size() < 2) continue;
    nlohmann::json by_value = nlohmann::json::object();
    std::string part = std::string(kFingerprintFields[field]) + ":";
    for (const auto &[value, processes] : values) {
      std::string who;
      for (uint32_t p : processes) {
        who += (who.empty() ? "" : ",") + std::to_string(p);
        if (std::find(differing.begin(), differing.end(), p) == differing.end()) differing.push_back(p);
      }
      part += " process" + std::string(processes.size() > 1 ? "es " : " ") + who + " " + field_value(field, value);
      by_value[field_value(field, value)] = processes;
    }
    fields[kFingerprintFields[field]] = by_value;
    text += (text.empty() ? "" : "; ") + part;
  }
  std::sort(differing.begin(), differing.end());
  Error error(BP_INVALID_ARGUMENT, operation_of(request) + " on process " + std::to_string(span.process_index) +
                                       ": the processes' calls differ (" + text + ")");
  error.with("mismatch", fields).with("processes", differing).with("process", span.process_index);
  return std::move(error).hint("every process must make the same calls on the group in the same order");
}

}  // namespace

// One small exchange before the data moves: the minimum of each process's
// hash and of its complement, so that min != ~min(~h) means some differ.
// Only then are the fingerprints gathered to name what differs.
Status SpanningCall::guard() {
  // The exchanges' memory is the group's (Span::guard_memory), not this
  // frame's: one that times out may still be written later.
  uint64_t *const memory = span_.guard_memory.get();
  uint64_t *const both = memory, *const mine = memory + 2, *const all = mine + kFingerprintSize;
  const Fingerprint fingerprint = fingerprint_of(span_, request_);
  std::copy(fingerprint.begin(), fingerprint.end(), mine);
  uint64_t hash = 0;
  for (uint64_t value : fingerprint) hash = mix(hash, value);
  both[0] = hash;
  both[1] = ~hash;
  if (Status status = exchange(BP_ALL_REDUCE, BP_U64, BP_MIN, 2, 0, both, both, 0); !status) return status;
  if (both[0] == ~both[1]) return {};
  if (Status status = exchange(BP_ALL_GATHER, BP_U64, BP_MIN, kFingerprintSize, 0, mine, all,
                               BP_EXCHANGE_ONE_BLOCK_PER_PROCESS);
      !status)
    return status;
  std::vector<Fingerprint> table(span_.process_count);
  for (uint32_t p = 0; p < span_.process_count; ++p)
    std::copy(all + p * kFingerprintSize, all + (p + 1) * kFingerprintSize, table[p].begin());
  Error error = mismatch(span_, request_, table);
  // Calls counted apart never line up again: the group can run nothing more.
  if (error.context()["mismatch"].contains("sequence")) {
    span_.broken_reason = "the processes' calls on it were counted apart (" + error.message() + ")";
    span_.broken.store(true, std::memory_order_release);
  }
  return error;
}

// ---- the transport and a group's side of it ---------------------------------

OpenTransport::~OpenTransport() {
  if (!handle) return;
  call_plugin_release(*plugin, "close", [&] { plugin->transport_functions.close(plugin->state, handle); });
}

HostArea::~HostArea() { ::operator delete[](memory, kAreaAlignment); }

Status HostArea::ensure(size_t wanted) {
  if (wanted <= bytes) return {};
  const size_t rounded = (wanted + kAreaGranule - 1) / kAreaGranule * kAreaGranule;
  std::byte *grown = nullptr;
  try {
    grown = static_cast<std::byte *>(::operator new[](rounded, kAreaAlignment));
  } catch (const std::bad_alloc &) {
    return Error(BP_OUT_OF_MEMORY, "a group across processes cannot allocate " + std::to_string(rounded) +
                                       " bytes of host memory for its exchanges");
  }
  ::operator delete[](memory, kAreaAlignment);
  memory = grown;
  bytes = rounded;
  return {};
}

void SpanDeleter::operator()(Span *span) const { delete span; }
void OpenTransportDeleter::operator()(OpenTransport *transport) const { delete transport; }

Span::~Span() {
  runner.stop();  // its call, if any, finishes before the comm goes
  if (!abandoned.empty()) {
    // An exchange still in flight may write the group's own memory yet.
    (void)guard_memory.release();
    scratch.memory = packed.memory = nullptr;
    if (rank_areas) {
      for (size_t r = 0; r < local_devices.size(); ++r) rank_areas[r].memory = nullptr;
    }
  }
  if (!transport) return;
  LoadedPlugin &plugin = *transport->plugin;
  for (bp_plugin_request *request : abandoned)
    call_plugin_release(plugin, "exchange_release",
                        [&] { plugin.transport_functions.exchange_release(plugin.state, request); });
  if (comm)
    call_plugin_release(plugin, "comm_destroy", [&] { plugin.transport_functions.comm_destroy(plugin.state, comm); });
}

Status open_transport(bp_host &host, const bp_transport_options &options) {
  constexpr const char *function = "bp_host_open_transport";
  if (options.struct_size < BP_TRANSPORT_OPTIONS_SIZE_V1_6)
    return Error(BP_INVALID_ARGUMENT, std::string(function) + ": options->struct_size is below its 1.6 size");
  if (!options.plugin) return Error(BP_INVALID_ARGUMENT, std::string(function) + ": options->plugin is NULL");
  if (options.flags & ~BP_TRANSPORT_OPTION_HANDLE)
    return Error(BP_INVALID_ARGUMENT, std::string(function) + ": unknown flags " + std::to_string(options.flags));
  const std::string name = one_line_utf8(options.plugin);
  std::string options_json = "{}";
  if (options.options_json) {
    nlohmann::json parsed = nlohmann::json::parse(options.options_json, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object())
      return Error(BP_CONFIG, std::string(function) + ": the options of transport '" + name +
                                  "' are not a JSON object");
    options_json = parsed.dump();
  }
  std::unique_lock lock(host.mutex);
  if (host.transport)
    return Error(BP_INVALID_ARGUMENT, std::string(function) + ": the host has transport '" +
                                          host.transport->plugin->transport + "' open already")
        .hint("a host opens one transport; make another host for another");
  LoadedPlugin *provider = nullptr;
  std::vector<std::string> known;
  for (const auto &plugin : host.plugins) {
    if (plugin->transport.empty()) continue;
    if (plugin->transport == name) provider = plugin.get();
    known.push_back(plugin->transport);
  }
  if (!provider) {
    Error error(BP_PLUGIN_NOT_FOUND, "no loaded plugin provides transport '" + name + "'" +
                                         (known.empty() ? " (no transport plugin is loaded)" : ""));
    error.with("transport", name).with("transports", known);
    const std::string hint = did_you_mean(name, known);
    return std::move(error).hint(!hint.empty() ? hint
                                               : "put libbackplane_mpi.so in a plugin directory (built with Open MPI)");
  }
  auto transport = std::make_unique<OpenTransport>();
  transport->plugin = provider;
  if (options.timeout_ns != 0) transport->timeout_ns = options.timeout_ns;
  bp_transport_open_args args{};
  args.struct_size = sizeof args;
  args.options_json = options_json.c_str();
  args.flags = (options.flags & BP_TRANSPORT_OPTION_HANDLE) ? BP_TRANSPORT_GIVEN_HANDLE : 0u;
  args.handle = options.handle;
  const bp_transport_functions &functions = provider->transport_functions;
  Status status = call_plugin(*provider, "open", [&](bp_error_sink *sink) {
    return functions.open(provider->state, &args, &transport->handle, sink);
  });
  if (status && !transport->handle) status = plugin_returned_null(*provider, "open");
  if (!status) return status;
  bp_transport_info info{};
  info.struct_size = sizeof info;
  status = call_plugin(*provider, "transport_info", [&](bp_error_sink *sink) {
    return functions.transport_info(provider->state, transport->handle, &info, sink);
  });
  if (!status) return status;  // the transport closes with its unique_ptr
  if (info.process_count == 0 || info.process_index >= info.process_count)
    return Error(BP_PLUGIN_INIT, "transport '" + name + "' says it is process " + std::to_string(info.process_index) +
                                     " of " + std::to_string(info.process_count));
  transport->process_index = info.process_index;
  transport->process_count = info.process_count;
  transport->library = read_bounded_string(info.library, kMaxPluginTextBytes).text;
  transport->details = read_bounded_string(info.details, kMaxPluginTextBytes).text;
  log(BP_LOG_INFO, "transport",
      "opened '" + name + "': process " + std::to_string(info.process_index) + " of " +
          std::to_string(info.process_count) + "; " + transport->library + "; " + transport->details);
  host.transport.reset(transport.release());
  return {};
}

namespace {

// This process's wish for Span::fragment_bytes.
size_t fragment_bytes_asked() {
  const char *text = std::getenv("BACKPLANE_SPAN_FRAGMENT_BYTES");
  if (!text || !*text) return kDefaultFragmentBytes;
  char *end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-') {
    log(BP_LOG_WARN, "transport",
        "BACKPLANE_SPAN_FRAGMENT_BYTES='" + one_line_utf8(text) + "' is not a byte count; using " +
            std::to_string(kDefaultFragmentBytes));
    return kDefaultFragmentBytes;
  }
  return static_cast<size_t>(std::min<unsigned long long>(value, SIZE_MAX));
}

// One exchange when the group is made: the smallest fragment any process
// asks for, since the processes must cut every call alike.
Status agree_on_fragment(Span &span) {
  const uint64_t asked = fragment_bytes_asked();
  // Not this frame's memory: an exchange that times out may write it later.
  auto wishes = std::make_unique<uint64_t[]>(2);
  wishes[0] = asked;  // the minimum of both: the smallest wish and the largest
  wishes[1] = ~asked;
  bp_plugin_request *started = nullptr;
  const bp_transport_exchange exchange =
      exchange_of(span, BP_ALL_REDUCE, BP_U64, BP_MIN, 2, 0, wishes.get(), wishes.get(), 0);
  Status status = start_exchange(span, exchange, started);
  if (status) status = finish_exchange(span, started);
  if (!span.abandoned.empty()) (void)wishes.release();
  if (!status) return status;
  span.fragment_bytes = static_cast<size_t>(wishes[0]);
  if (wishes[0] != ~wishes[1])
    log(BP_LOG_WARN, "transport",
        "the processes ask for different fragments (BACKPLANE_SPAN_FRAGMENT_BYTES, " + std::to_string(wishes[0]) +
            " to " + std::to_string(~wishes[1]) + " bytes): every process uses " + std::to_string(wishes[0]));
  return {};
}

}  // namespace

Status prepare_span(bp_group &group, bool guard, HostLock host_lock) {
  bp_host &host = *group.host;
  OpenTransport *transport = nullptr;
  if (host_lock == HostLock::take) {
    std::shared_lock lock(host.mutex);
    transport = host.transport.get();
  } else {
    transport = host.transport.get();
  }
  if (!transport)
    return Error(BP_INVALID_ARGUMENT, "bp_group_create: span BP_SPAN_WORLD needs the host's transport, and none is open")
        .hint("call bp_host_open_transport first, or give the fleet a \"transport\": {\"plugin\": \"mpi\"}");
  if (group.layered)
    return Error(BP_UNSUPPORTED_DEVICE, "bp_group_create: a group across processes takes no layered device yet")
        .with("devices", nlohmann::json::array())
        .hint("use bp_device_base() for its ranks, or the group option guard for the cross-process mismatch guard");
  // Ranks of several kinds, or with device memory, stage through host
  // memory: the local phases then run on the cpu plugin's comm.
  const bool mixed = group.kind == nullptr;
  const bool host_memory =
      !mixed && group.kind->plugin->functions.buffer_host_memory && group.kind->plugin->functions.buffer_wrap_host &&
      std::all_of(group.ranks.begin(), group.ranks.end(),
                  [](const bp_device *device) { return (device->flags & BP_DEVICE_HOST_ADDRESSABLE) != 0; });
  if (!host_memory) {
    std::vector<std::string> kinds;
    for (const bp_device *device : group.ranks)
      if (std::find(kinds.begin(), kinds.end(), device->kind->name) == kinds.end()) kinds.push_back(device->kind->name);
    std::string list;
    for (const std::string &kind : kinds) list += (list.empty() ? "" : ", ") + kind;
    if (mixed && group.policy == BP_POLICY_REJECT)
      return Error(BP_MIXED_DEVICE_KINDS, "bp_group_create: this process's ranks of a group across processes mix "
                                          "device kinds " + list + ", and its policy is 'reject'")
          .with("kinds", kinds)
          .with("policy", "reject")
          .hint("create the group with policy 'stage' to run it through host memory, or from devices of one kind");
    prepare_staging(group, host_lock, StagingFor::span);
    if (!group.staging) {
      const std::string why = "bp_group_create: a group across processes stages " +
                              (mixed ? "ranks of kinds " + list : "ranks with device memory (" + list + ")") +
                              " through host memory, and " + group.staging_refusal;
      return Error(mixed ? BP_MIXED_DEVICE_KINDS : BP_UNSUPPORTED_DEVICE, why)
          .with("kinds", kinds)
          .with("staging", group.staging_refusal)
          .hint("load the cpu plugin with a device for each rank of this process, or use cpu devices only");
    }
    group.capabilities = group.staging->capabilities;
  }
  auto span = std::unique_ptr<Span, SpanDeleter>(new Span);
  span->transport = transport;
  span->guard = guard;
  span->staged = !host_memory;
  if (span->staged) {
    span->rank_areas = std::make_unique<HostArea[]>(group.ranks.size());
    span->staged_send.assign(group.ranks.size(), nullptr);
    span->staged_recv.assign(group.ranks.size(), nullptr);
    span->local_devices = group.staging->reducer_devices;
  } else {
    for (const bp_device *device : group.ranks) span->local_devices.push_back(device->index);
  }
  LoadedPlugin &carrier = *transport->plugin;
  bp_transport_comm_args args{};
  args.struct_size = sizeof args;
  args.local_ranks = group.ranks.size();
  args.timeout_ns = transport->timeout_ns;
  bp_transport_comm_info info{};
  info.struct_size = sizeof info;
  Status status = call_plugin(carrier, "comm_create", [&](bp_error_sink *sink) {
    return carrier.transport_functions.comm_create(carrier.state, transport->handle, &args, &info, &span->comm, sink);
  });
  if (status && !span->comm) status = plugin_returned_null(carrier, "comm_create");
  if (!status) return status;
  if (info.process_count == 0 || info.process_index >= info.process_count || !info.process_ranks ||
      info.process_ranks[info.process_index] != group.ranks.size())
    return Error(BP_INTERNAL, "transport '" + carrier.transport + "' made a group whose process table is wrong");
  span->process_index = info.process_index;
  span->process_count = info.process_count;
  span->process_ranks.assign(info.process_ranks, info.process_ranks + info.process_count);
  if (guard) span->guard_memory = std::make_unique<uint64_t[]>(2 + kFingerprintSize * (1 + size_t{info.process_count}));
  uint64_t first = 0;
  for (uint64_t ranks : span->process_ranks) {
    span->process_first.push_back(first);
    if (ranks == 0 || __builtin_add_overflow(first, ranks, &first) || first > (uint64_t{1} << 32))
      return Error(BP_INTERNAL, "transport '" + carrier.transport + "' made a group of impossible size");
  }
  span->global_size = first;
  span->several_local = std::any_of(span->process_ranks.begin(), span->process_ranks.end(),
                                    [](uint64_t ranks) { return ranks > 1; });
  span->first_rank = span->process_first[span->process_index];
  if (Status status = agree_on_fragment(*span); !status) return status;
  uint64_t digest = mix(0, span->global_size);
  for (unsigned char c : group.name) digest = mix(digest, c);
  span->group_digest = digest;
  group.global_ranks = static_cast<size_t>(span->global_size);
  group.first_rank = static_cast<size_t>(span->first_rank);
  group.capabilities.intersect(carrier.transport_capabilities);
  group.span = std::move(span);
  return {};
}

Status transport_carries(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op, uint32_t mode_flags) {
  const LoadedPlugin &carrier = *group.span->transport->plugin;
  const Support support = carrier.transport_capabilities.lookup(collective, dtype, op, mode_flags);
  if (support == Support::yes) return {};
  static constexpr bp_code codes[] = {BP_OK, BP_UNSUPPORTED_COLLECTIVE, BP_UNSUPPORTED_DTYPE, BP_UNSUPPORTED_REDUCE_OP,
                                      BP_INVALID_ARGUMENT};
  std::string what = collective_name(collective);
  if (support == Support::no_dtype) what = std::string(dtype_name(dtype)) + " " + what;
  if (support == Support::no_reduce_op) what = std::string(reduce_op_name(op)) + " " + what + " of " + dtype_name(dtype);
  if (support == Support::no_mode)
    what += mode_flags & BP_CAPABILITY_IN_PLACE ? " in place" : " out of place";
  Error error(codes[static_cast<int>(support)],
              "transport '" + carrier.transport + "' does not carry " + what + " across processes");
  error.with("path", "across processes").with("transport", carrier.transport);
  return std::move(error).hint("run it on a group of this process's devices, or convert the data to a type it carries");
}

Error broken_group(const bp_group &group) {
  Error error(BP_DEVICE_FAILURE, "group '" + group.name + "' across processes is broken: " + group.span->broken_reason);
  error.with("broken", true).with("process", group.span->process_index);
  return std::move(error).hint("destroy the group; every process must make the same calls in the same order");
}

namespace {

// The local side of a call: the group's own comm and buffers, or a staged
// group's cpu comm (StagedRanks fills the buffers in).
LocalSide local_side(const bp_group &group, const std::vector<bp_plugin_buffer *> &send,
                     const std::vector<bp_plugin_buffer *> &recv) {
  LocalSide side;
  Span &span = *group.span;
  side.devices = span.local_devices.data();
  if (!span.staged) {
    side.plugin = group.kind->plugin;
    side.comm = group.comm;
    side.kind_index = group.kind->index_in_plugin;
    side.send = &send;
    side.recv = &recv;
    return side;
  }
  const Staging &staging = *group.staging;
  side.plugin = staging.reducer->plugin;
  side.comm = staging.comm;
  side.kind_index = staging.reducer->index_in_plugin;
  side.send = &span.staged_send;
  side.recv = &span.staged_recv;
  std::fill(span.staged_send.begin(), span.staged_send.end(), nullptr);
  std::fill(span.staged_recv.begin(), span.staged_recv.end(), nullptr);
  return side;
}

}  // namespace

namespace {

Status run_spanning_on(bp_group &group, const bp_collective_request &request,
                       const std::vector<bp_plugin_buffer *> &send, const std::vector<bp_plugin_buffer *> &recv);

// The runner's job: the handed call. Nothing may leave a thread's function.
void run_handed(void *context, uint64_t) {
  bp_group &group = *static_cast<bp_group *>(context);
  Span &span = *group.span;
  try {
    span.outcome = run_spanning_on(group, span.handed.request, span.handed.send, span.handed.recv);
  } catch (const std::bad_alloc &) {
    span.outcome = Error(BP_OUT_OF_MEMORY, "a call across processes ran out of host memory on its runner thread");
  } catch (...) {
    span.outcome = Error(BP_INTERNAL, "a call across processes threw on its runner thread");
  }
}

}  // namespace

bool start_spanning_apart(bp_group &group, const bp_collective_request &request) {
  Span &span = *group.span;
  if (!span.runner.ensure_started(run_handed, &group, "run an _async call across processes apart from its caller"))
    return false;
  span.handed.request = request;
  span.handed.send = group.send_handles;
  span.handed.recv = group.recv_handles;
  span.runner_job = span.runner.give();
  return true;
}

bool wait_spanning(Span &span, int64_t timeout_ns, Status &outcome) {
  if (!span.runner.wait_done(span.runner_job + 1, timeout_ns)) return false;
  outcome = std::exchange(span.outcome, Status());
  return true;
}

bool spanning_finished(Span &span) { return span.runner.wait_done(span.runner_job + 1, 0); }

Status run_spanning(bp_group &group, const bp_collective_request &request) {
  return run_spanning_on(group, request, group.send_handles, group.recv_handles);
}

namespace {

Status run_spanning_calls(bp_group &group, const bp_collective_request &request,
                          const std::vector<bp_plugin_buffer *> &send, const std::vector<bp_plugin_buffer *> &recv);

// A call that failed on this process outside an exchange breaks the group,
// unless an exchange's failure already did (and said why).
void failed_here(Span &span, const bp_collective_request &request, const std::string &why) {
  if (span.broken.load(std::memory_order_relaxed)) return;
  span.broken_reason = "call " + std::to_string(span.calls) + " (" + operation_of(request) + ") failed on process " +
                       std::to_string(span.process_index) + ": " + why;
  span.broken.store(true, std::memory_order_release);
}

Status run_spanning_on(bp_group &group, const bp_collective_request &request,
                       const std::vector<bp_plugin_buffer *> &send, const std::vector<bp_plugin_buffer *> &recv) {
  try {
    return run_spanning_calls(group, request, send, recv);
  } catch (...) {
    // Between exchanges, maybe: the others may wait in one this process left.
    failed_here(*group.span, request, "an exception");
    throw;
  }
}

Status run_spanning_calls(bp_group &group, const bp_collective_request &request,
                          const std::vector<bp_plugin_buffer *> &send, const std::vector<bp_plugin_buffer *> &recv) {
  Span &span = *group.span;
  if (span.broken.load(std::memory_order_acquire)) return broken_group(group);
  // The mpi transport reduces at most INT_MAX elements per exchange (MPI's
  // counts are ints); refused alike on every process, before anything moves.
  if (collective_reduces(request.collective)) {
    const uint64_t elements = request.count * (request.collective == BP_REDUCE_SCATTER ? span.global_size : 1);
    if (elements > static_cast<uint64_t>(INT32_MAX))
      return Error(BP_INVALID_ARGUMENT, operation_of(request) + ": " + std::to_string(elements) +
                                            " elements in one reduction across processes, more than the 2147483647 "
                                            "MPI counts")
          .hint("split the call into parts of at most 2147483647 elements");
  }
  LocalSide side = local_side(group, send, recv);
  StagedRanks staged(group, request, send, recv, side);
  if (span.staged && request.collective != BP_BARRIER && request.count != 0) {
    if (Status status = staged.up(); !status) {
      // Before its first exchange: the others wait in it for this process.
      failed_here(span, request, status.error().message());
      return status;
    }
  }
  SpanningCall call(group, request, side);
  if (span.guard) {
    if (Status status = call.guard(); !status) return status;
  }
  // Nothing moves on any process (the guard saw the same count everywhere).
  if (request.collective != BP_BARRIER && request.count == 0) return {};
  Status status = call.run();
  // Failed here before or between its exchanges: the others may be waiting
  // in one, which this process's next call would be paired with.
  if (!status) failed_here(span, request, status.error().message());
  if (!status || !staged.copied()) return status;
  // Every exchange completed: a copy back that fails leaves the processes in step.
  return staged.down();
}

}  // namespace

}  // namespace backplane

using namespace backplane;

extern "C" {

bp_error *bp_host_open_transport(bp_host *host, const bp_transport_options *options) {
  return guarded([&]() -> Status {
    if (!host) return null_argument("bp_host_open_transport", "host");
    if (!options) return null_argument("bp_host_open_transport", "options");
    return open_transport(*host, *options);
  });
}

bp_error *bp_host_transport(const bp_host *host, bp_transport_facts *out) {
  return guarded([&]() -> Status {
    if (!host) return null_argument("bp_host_transport", "host");
    bp_transport_facts facts{};
    facts.struct_size = sizeof facts;
    facts.plugin = facts.library = facts.details = "";
    facts.process_count = 1;
    std::shared_lock lock(host->mutex);
    if (const OpenTransport *transport = host->transport.get()) {
      facts.plugin = transport->plugin->transport.c_str();
      facts.library = transport->library.c_str();
      facts.details = transport->details.c_str();
      facts.process_index = transport->process_index;
      facts.process_count = transport->process_count;
      facts.timeout_ns = transport->timeout_ns;
    }
    return write_out("bp_host_transport", out, facts, BP_TRANSPORT_FACTS_SIZE_V1_6);
  });
}

}  // extern "C"
