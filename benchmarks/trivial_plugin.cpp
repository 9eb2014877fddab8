// The smallest working plugin: one device kind of four host-memory devices
// and an all_reduce that sums a few floats on the calling thread. Built
// sixteen times with -DTRIVIAL_NAME/-DTRIVIAL_KIND (k0..k15) for the
// host-creation benchmark; k0 is also the "trivial" plugin of the dispatch
// benchmarks, where the plugin's own work must be as small as possible.
#include <cstring>
#include <new>

#include "backplane/plugin.h"

#define TRIVIAL_STRINGIFY2(x) #x
#define TRIVIAL_STRINGIFY(x) TRIVIAL_STRINGIFY2(x)

#ifndef TRIVIAL_NAME
#define TRIVIAL_NAME trivial
#endif
#ifndef TRIVIAL_KIND
#define TRIVIAL_KIND trivial
#endif

namespace {

constexpr uint32_t kDevices = 4;
constexpr uint32_t kBothPlacements = BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE;
constexpr uint32_t bit(uint32_t value) { return 1u << value; }

const bp_capability kRows[] = {
    {sizeof(bp_capability), nullptr, 0, BP_ALL_REDUCE, bit(BP_F32), bit(BP_SUM), kBothPlacements, 0},
    {sizeof(bp_capability), nullptr, 0, BP_BARRIER, 0, 0, kBothPlacements, 0},
};
const char *const kKinds[] = {TRIVIAL_STRINGIFY(TRIVIAL_KIND)};
const char *const kDeviceNames[kDevices] = {"trivial device 0", "trivial device 1", "trivial device 2",
                                            "trivial device 3"};

}  // namespace

struct bp_plugin_state {
  const bp_host_services *services;
};

struct bp_plugin_buffer {
  unsigned char *data;
  size_t bytes;
  bool owned;
};

struct bp_plugin_comm {
  size_t ranks;
};

namespace {

int32_t fail(bp_plugin_state *state, bp_error_sink *sink, int32_t code, const char *message) {
  state->services->report_error(sink, code, message);
  return code;
}

void trivial_destroy(bp_plugin_state *state) { delete state; }

int32_t trivial_device_count(bp_plugin_state *state, uint32_t kind, uint32_t *count, bp_error_sink *sink) {
  if (kind != 0) return fail(state, sink, BP_INVALID_ARGUMENT, "trivial: unknown kind index");
  *count = kDevices;
  return BP_OK;
}

int32_t trivial_device_info(bp_plugin_state *state, uint32_t kind, uint32_t device, bp_plugin_device_info *info,
                            bp_error_sink *sink) {
  if (kind != 0 || device >= kDevices) return fail(state, sink, BP_INVALID_ARGUMENT, "trivial: unknown device");
  // The host's struct may be older than ours: write only what fits.
  if (info->struct_size >= BP_STRUCT_SIZE(bp_plugin_device_info, name)) info->name = kDeviceNames[device];
  if (info->struct_size >= BP_STRUCT_SIZE(bp_plugin_device_info, description)) info->description = nullptr;
  if (info->struct_size >= BP_STRUCT_SIZE(bp_plugin_device_info, flags)) info->flags = BP_DEVICE_HOST_ADDRESSABLE;
  if (info->struct_size >= BP_STRUCT_SIZE(bp_plugin_device_info, memory_bytes)) info->memory_bytes = 0;
  if (info->struct_size >= BP_STRUCT_SIZE(bp_plugin_device_info, capability_count)) {
    info->capabilities = nullptr;
    info->capability_count = 0;
  }
  return BP_OK;
}

int32_t make_buffer(bp_plugin_state *state, unsigned char *data, size_t bytes, bool owned, bp_plugin_buffer **out,
                    bp_error_sink *sink) {
  auto *buffer = new (std::nothrow) bp_plugin_buffer{data, bytes, owned};
  if (!buffer) {
    if (owned) delete[] data;
    return fail(state, sink, BP_OUT_OF_MEMORY, "trivial: cannot allocate a buffer");
  }
  *out = buffer;
  return BP_OK;
}

int32_t trivial_buffer_create(bp_plugin_state *state, uint32_t, uint32_t, size_t bytes, bp_plugin_buffer **out,
                              bp_error_sink *sink) {
  auto *data = new (std::nothrow) unsigned char[bytes ? bytes : 1]();
  if (!data) return fail(state, sink, BP_OUT_OF_MEMORY, "trivial: cannot allocate buffer memory");
  return make_buffer(state, data, bytes, true, out, sink);
}

int32_t trivial_buffer_wrap_host(bp_plugin_state *state, uint32_t, uint32_t, void *memory, size_t bytes,
                                 bp_plugin_buffer **out, bp_error_sink *sink) {
  return make_buffer(state, static_cast<unsigned char *>(memory), bytes, false, out, sink);
}

void trivial_buffer_destroy(bp_plugin_state *, bp_plugin_buffer *buffer) {
  if (buffer && buffer->owned) delete[] buffer->data;
  delete buffer;
}

// The host checks offset + bytes against the buffer before calling these.
int32_t trivial_buffer_write(bp_plugin_state *, bp_plugin_buffer *buffer, size_t offset, const void *source,
                             size_t bytes, bp_error_sink *) {
  if (bytes) std::memcpy(buffer->data + offset, source, bytes);
  return BP_OK;
}

int32_t trivial_buffer_read(bp_plugin_state *, const bp_plugin_buffer *buffer, size_t offset, void *destination,
                            size_t bytes, bp_error_sink *) {
  if (bytes) std::memcpy(destination, buffer->data + offset, bytes);
  return BP_OK;
}

int32_t trivial_comm_create(bp_plugin_state *state, uint32_t kind, const uint32_t *devices, size_t device_count,
                            bp_plugin_comm **out, bp_error_sink *sink) {
  if (kind != 0 || device_count == 0) return fail(state, sink, BP_INVALID_ARGUMENT, "trivial: empty comm");
  for (size_t r = 0; r < device_count; ++r) {
    if (devices[r] >= kDevices) return fail(state, sink, BP_INVALID_ARGUMENT, "trivial: unknown device");
  }
  auto *comm = new (std::nothrow) bp_plugin_comm{device_count};
  if (!comm) return fail(state, sink, BP_OUT_OF_MEMORY, "trivial: cannot allocate a comm");
  *out = comm;
  return BP_OK;
}

void trivial_comm_destroy(bp_plugin_state *, bp_plugin_comm *comm) { delete comm; }

// all_reduce f32 sum, and barrier; the host only sends what kRows declares.
int32_t trivial_collective_start(bp_plugin_state *state, bp_plugin_comm *comm, const bp_collective_args *args,
                                 bp_plugin_request **out, bp_error_sink *sink) {
  *out = nullptr;  // everything completes before returning
  if (args->rank_count != comm->ranks) return fail(state, sink, BP_INTERNAL, "trivial: wrong rank count");
  if (args->collective == BP_BARRIER) return BP_OK;
  if (args->collective != BP_ALL_REDUCE || args->dtype != BP_F32 || args->reduce_op != BP_SUM)
    return fail(state, sink, BP_INTERNAL, "trivial: host dispatched what was never declared");
  for (size_t i = 0; i < args->count; ++i) {
    float sum = 0, value;
    for (size_t r = 0; r < args->rank_count; ++r) {
      std::memcpy(&value, args->send[r]->data + i * sizeof value, sizeof value);
      sum += value;
    }
    for (size_t r = 0; r < args->rank_count; ++r) std::memcpy(args->recv[r]->data + i * sizeof sum, &sum, sizeof sum);
  }
  return BP_OK;
}

// No request is ever handed out, so the host never calls these.
int32_t trivial_request_test(bp_plugin_state *state, bp_plugin_request *, bool *, bp_error_sink *sink) {
  return fail(state, sink, BP_INTERNAL, "trivial: no request was handed out");
}

int32_t trivial_request_wait(bp_plugin_state *state, bp_plugin_request *, int64_t, bp_error_sink *sink) {
  return fail(state, sink, BP_INTERNAL, "trivial: no request was handed out");
}

void trivial_request_release(bp_plugin_state *, bp_plugin_request *) {}

const bp_plugin_functions kFunctions = {
    .struct_size = sizeof(bp_plugin_functions),
    .next = nullptr,
    .destroy = trivial_destroy,
    .configure = nullptr,  // takes no options
    .device_count = trivial_device_count,
    .device_info = trivial_device_info,
    .buffer_create = trivial_buffer_create,
    .buffer_wrap_host = trivial_buffer_wrap_host,
    .buffer_destroy = trivial_buffer_destroy,
    .buffer_write = trivial_buffer_write,
    .buffer_read = trivial_buffer_read,
    .comm_create = trivial_comm_create,
    .comm_destroy = trivial_comm_destroy,
    .collective_start = trivial_collective_start,
    .request_test = trivial_request_test,
    .request_wait = trivial_request_wait,
    .request_release = trivial_request_release,
    .kind_info = nullptr,
    .comm_info = nullptr,
    .buffer_host_memory = nullptr,
};

const bp_plugin_descriptor kDescriptor = {
    .struct_size = sizeof(bp_plugin_descriptor),
    .next = nullptr,
    .abi_major = BP_PLUGIN_ABI_MAJOR,
    .abi_minor = BP_PLUGIN_ABI_MINOR,
    .name = TRIVIAL_STRINGIFY(TRIVIAL_NAME),
    .version = "0.1.0",
    .device_kinds = kKinds,
    .device_kind_count = sizeof kKinds / sizeof kKinds[0],
    .capabilities = kRows,
    .capability_count = sizeof kRows / sizeof kRows[0],
    .functions = &kFunctions,
};

}  // namespace

extern "C" BP_PLUGIN_EXPORT int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  if (!args || args->struct_size < BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0) return BP_PLUGIN_ABI;
  if (args->host_abi_major != BP_PLUGIN_ABI_MAJOR) {
    if (args->services && args->services->report_error)
      args->services->report_error(args->sink, BP_PLUGIN_ABI, "trivial: built for another ABI major");
    return BP_PLUGIN_ABI;
  }
  auto *state = new (std::nothrow) bp_plugin_state{args->services};
  if (!state) return BP_OUT_OF_MEMORY;
  args->descriptor = &kDescriptor;
  args->state = state;
  return BP_OK;
}
