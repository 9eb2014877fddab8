// Requests of the opencl plugin: a collective started without the caller
// waiting (no BP_COLLECTIVE_CALLER_WAITS) is the cl_event of the last
// command it enqueued on its comm's in-order queue. Testing reads the
// event's execution status; a wait without limit is clWaitForEvents; a wait
// with a limit sleeps on a condition variable that the event's completion
// callback signals, until the deadline.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <thread>

#include "plugin_state.hpp"

namespace backplane::opencl {

// Shared by a request and the callback it registered, which may run (on a
// driver thread) after the request is gone: whichever lets go last frees it.
struct CompletionSignal {
  std::mutex mutex;
  std::condition_variable changed;
  bool fired = false;  // the event reached CL_COMPLETE or failed
};

namespace {

void CL_CALLBACK signal_completion(cl_event, cl_int, void *data) {
  auto *signal = static_cast<std::shared_ptr<CompletionSignal> *>(data);
  {
    std::lock_guard<std::mutex> lock((*signal)->mutex);
    (*signal)->fired = true;
  }
  (*signal)->changed.notify_all();
  delete signal;
}

const char *device_name(const bp_plugin_request &request) { return request.device->name.c_str(); }

// The event's CL_EVENT_COMMAND_EXECUTION_STATUS: CL_QUEUED, CL_SUBMITTED,
// CL_RUNNING, CL_COMPLETE (0), or a negative error of the command.
std::int32_t execution_status(const bp_plugin_state &state, const bp_plugin_request &request, cl_int *status,
                              bp_error_sink *sink) {
  const cl_int queried =
      clGetEventInfo(request.event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof *status, status, nullptr);
  if (queried != CL_SUCCESS) {
    return fail_cl(state.services, sink, queried, "clGetEventInfo", request.collective, device_name(request));
  }
  return BP_OK;
}

// The outcome of a request whose event finished with `status` (CL_COMPLETE
// or negative). On success it waits for the event once more: a completed
// event returns at once, and clWaitForEvents is a synchronisation point, so
// reads on the devices' own queues see the results.
std::int32_t finished(const bp_plugin_state &state, bp_plugin_request &request, cl_int status, bp_error_sink *sink) {
  if (status == CL_COMPLETE) {
    const cl_int waited = clWaitForEvents(1, &request.event);
    if (waited == CL_SUCCESS) {
      request.complete.store(true, std::memory_order_release);
      return BP_OK;
    }
    status = waited;
  }
  return fail(state.services, sink, cl_status_code(status),
              "opencl %s on '%s': its commands failed on the device: %s (%d)", request.collective,
              device_name(request), cl_error_name(status), static_cast<int>(status));
}

std::int32_t timed_out(const bp_plugin_state &state, const bp_plugin_request &request, std::int64_t timeout_ns,
                       bp_error_sink *sink) {
  return fail(state.services, sink, BP_TIMEOUT, "opencl %s on '%s': not complete after %lld ns; still in flight",
              request.collective, device_name(request), static_cast<long long>(timeout_ns));
}

// The request's signal, registered with its event on first use; NULL when
// the driver refuses the callback (then the caller polls).
std::shared_ptr<CompletionSignal> completion_signal(bp_plugin_request &request) {
  std::lock_guard<std::mutex> lock(request.mutex);
  if (request.signal) return request.signal;
  auto signal = std::make_shared<CompletionSignal>();
  auto *held = new std::shared_ptr<CompletionSignal>(signal);
  if (clSetEventCallback(request.event, CL_COMPLETE, signal_completion, held) != CL_SUCCESS) {
    delete held;
    return nullptr;
  }
  request.signal = signal;
  return signal;
}

}  // namespace

}  // namespace backplane::opencl

bp_plugin_request::~bp_plugin_request() {
  if (event != nullptr) clReleaseEvent(event);
}

namespace backplane::opencl {

std::int32_t Backend::request_test(bp_plugin_state &state, bp_plugin_request &request, bool &done,
                                   bp_error_sink *sink) {
  if (request.complete.load(std::memory_order_acquire)) {
    done = true;
    return BP_OK;
  }
  cl_int status = CL_QUEUED;
  BP_OPENCL_CHECK(execution_status(state, request, &status, sink));
  if (status > CL_COMPLETE) {
    done = false;
    return BP_OK;
  }
  const std::int32_t outcome = finished(state, request, status, sink);
  if (outcome == BP_OK) done = true;
  return outcome;
}

std::int32_t Backend::request_wait(bp_plugin_state &state, bp_plugin_request &request, std::int64_t timeout_ns,
                                   bp_error_sink *sink) {
  if (request.complete.load(std::memory_order_acquire)) return BP_OK;
  cl_int status = CL_QUEUED;
  // Waits far beyond any uptime (where now + timeout would overflow the
  // clock) are waits without limit.
  constexpr std::int64_t kForever = std::numeric_limits<std::int64_t>::max() / 4;
  if (timeout_ns < 0 || timeout_ns >= kForever) {
    // Its error, if the command failed, is read from the status below.
    (void)clWaitForEvents(1, &request.event);
    BP_OPENCL_CHECK(execution_status(state, request, &status, sink));
    if (status > CL_COMPLETE) {
      return fail(state.services, sink, BP_DEVICE_FAILURE,
                  "opencl %s on '%s': clWaitForEvents returned before the commands completed (status %d)",
                  request.collective, device_name(request), static_cast<int>(status));
    }
    return finished(state, request, status, sink);
  }

  BP_OPENCL_CHECK(execution_status(state, request, &status, sink));
  if (status <= CL_COMPLETE) return finished(state, request, status, sink);
  if (timeout_ns == 0) return timed_out(state, request, timeout_ns, sink);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
  if (const std::shared_ptr<CompletionSignal> signal = completion_signal(request)) {
    std::unique_lock<std::mutex> lock(signal->mutex);
    signal->changed.wait_until(lock, deadline, [&] { return signal->fired; });
  } else {
    // No callback: poll, sleeping longer each time (up to a millisecond).
    std::chrono::steady_clock::duration pause = std::chrono::microseconds(20);
    for (auto now = std::chrono::steady_clock::now(); now < deadline; now = std::chrono::steady_clock::now()) {
      BP_OPENCL_CHECK(execution_status(state, request, &status, sink));
      if (status <= CL_COMPLETE) break;
      std::this_thread::sleep_for(std::min(pause, deadline - now));
      pause = std::min<std::chrono::steady_clock::duration>(pause * 2, std::chrono::milliseconds(1));
    }
  }
  BP_OPENCL_CHECK(execution_status(state, request, &status, sink));
  if (status <= CL_COMPLETE) return finished(state, request, status, sink);
  return timed_out(state, request, timeout_ns, sink);
}

void Backend::request_release(bp_plugin_state &state, bp_plugin_request *request) {
  // An older host may release a request in flight; nothing may touch the
  // group's buffers once this returns, so it is waited for first.
  if (!request->complete.load(std::memory_order_acquire)) {
    cl_int status = CL_QUEUED;
    clGetEventInfo(request->event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
    if (status > CL_COMPLETE) {
      log(state.services, BP_LOG_DEBUG, "request_release: %s on '%s' is still in flight; waiting for it first",
          request->collective, device_name(*request));
    }
    (void)clWaitForEvents(1, &request->event);
  }
  delete request;
}

}  // namespace backplane::opencl
