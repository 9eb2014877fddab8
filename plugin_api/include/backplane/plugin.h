/* Backplane plugin ABI: everything a backend plugin (libbackplane_<name>.so)
 * and the host agree on. C99, stable within a major version.
 *
 * Compatibility rule (tested in tests/abi_test.cpp):
 *  - A plugin built against ABI major M loads in every host of major M,
 *    whatever the minors on either side. Any other major is refused with
 *    BP_PLUGIN_ABI naming both versions.
 *  - Every struct starts with `size_t struct_size` and `const void *next`
 *    (`void *next` in out-structs): NULL, or a chain of typed extensions
 *    (bp_extension_header, types.h). A reader accepts any struct_size at
 *    least the struct's first-release size (BP_..._SIZE_V1_0) and reads the
 *    fields beyond what the writer sent as zero. Structs only grow at the end.
 *  - Arrays of structs are strided by the first element's struct_size. A
 *    1.0-sized bp_capability is 36 bytes, so the elements of such an array
 *    may be misaligned: readers copy each element out (memcpy) first.
 *  - Out-structs are allocated by the caller, who sets struct_size; the
 *    callee writes only the fields that fit in it.
 *
 * Ownership: strings and arrays a plugin hands the host (descriptor,
 * capability rows, device info) stay valid until the plugin's destroy
 * returns. Strings are NUL-terminated UTF-8. Memory is freed by the side
 * that allocated it.
 *
 * Errors: every fallible function returns a bp_code (BP_OK on success); on
 * failure it first calls services->report_error(sink, code, message) with a
 * one-line message naming the thing and the reason. No C++ exception may
 * leave a plugin function (the host survives one, but marks the plugin
 * failed).
 *
 * Frozen across every major version, so that a plugin can always refuse a
 * host it does not speak with a reason: bp_plugin_entry_args up to and
 * including `sink`, and bp_host_services up to and including
 * `report_error`. (If args->struct_size does not even reach `sink`, the
 * plugin returns BP_PLUGIN_ABI without a message.)
 *
 * Extending this ABI (the rule for everything added from 1.2 on):
 *  - A new function takes one argument struct (struct_size, next, fields).
 *  - A new family of functions (layers, transports) is a table of its own
 *    hung off the descriptor through a typed extension, never new required
 *    entries in bp_plugin_functions: a plugin of one family implements only
 *    its own table.
 *  - Every `next` is NULL or points at a chain of typed extensions, each
 *    beginning with bp_extension_header; a reader skips (and never writes)
 *    types it does not know. Out-structs have a writable `next`, so the
 *    caller can chain extensions for the callee to fill.
 *  - A plugin declares only values (collectives, element types, ops, flag
 *    bits, extension types) that exist in the host's minor
 *    (bp_plugin_entry_args.host_abi_minor). A host tolerates the future all
 *    the same: it skips a capability row whose collective it does not know,
 *    masks dtype, op and flag bits it does not know, keeps the rest of the
 *    plugin and logs what it ignored at info.
 *
 * Threads: every function may be called concurrently on one state, and the
 * plugin synchronises what it shares; the one exception is collective_start
 * on one comm, which the host never calls from two threads at once. What a
 * comm may have in flight is the in-flight contract at collective_start. */
#ifndef BACKPLANE_PLUGIN_H
#define BACKPLANE_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backplane/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BP_PLUGIN_ABI_MAJOR 1
#define BP_PLUGIN_ABI_MINOR 6

#if defined(__GNUC__)
#define BP_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define BP_PLUGIN_EXPORT
#endif

/* Handles the plugin defines; the host only passes them back. */
typedef struct bp_plugin_state bp_plugin_state;     /* one per bp_plugin_entry call */
typedef struct bp_plugin_buffer bp_plugin_buffer;   /* memory on one device */
typedef struct bp_plugin_comm bp_plugin_comm;       /* the plugin's side of a group */
typedef struct bp_plugin_request bp_plugin_request; /* a started collective */

/* Handle the host defines: where a failing call reports its error. */
typedef struct bp_error_sink bp_error_sink;

/* Since 1.3: one layer over one device, the layer plugin's. */
typedef struct bp_layer_instance bp_layer_instance;
/* The application's handles (backplane.h), which the host hands a layer's
 * hooks as they are; a layer learns about them through the services below
 * (describe_device, describe_buffer, read_buffer) and never looks inside. */
struct bp_device;
struct bp_buffer;

/* Out-struct of bp_host_services.describe_device (since 1.3). */
typedef struct bp_layer_device_facts {
  size_t struct_size;
  void *next;
  const char *name;        /* the device's name: "cpu:0", or a layered one's, e.g. "t0" */
  const char *kind;        /* its base device's kind */
  const char *plugin;      /* the plugin that computes on it (its base's) */
  const struct bp_device *base; /* through every layer; the device itself when it has none */
  const char *base_name;
  size_t layer_count;      /* the layers over the base, this device's own and those under it */
} bp_layer_device_facts;
#define BP_LAYER_DEVICE_FACTS_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_device_facts, layer_count)

/* Out-struct of bp_host_services.describe_buffer (since 1.3). */
typedef struct bp_layer_buffer_facts {
  size_t struct_size;
  void *next;
  const struct bp_device *device; /* the device it was made on (layered or not) */
  size_t bytes;
  const void *host_memory; /* the caller's memory of bp_buffer_wrap_host, else NULL */
  uint64_t serial;         /* never reused in the process: a buffer made where a freed one was is another */
} bp_layer_buffer_facts;
#define BP_LAYER_BUFFER_FACTS_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_buffer_facts, serial)

typedef enum bp_log_level {
  BP_LOG_ERROR = 0,
  BP_LOG_WARN = 1,
  BP_LOG_INFO = 2,
  BP_LOG_DEBUG = 3,
  BP_LOG_LEVEL_MAX_ENUM = 0x7FFFFFFF
} bp_log_level;

/* Services the host lends a plugin. Valid until the plugin's destroy returns. */
typedef struct bp_host_services {
  size_t struct_size;
  const void *next;
  /* Record the error of the failing call that was given `sink`. `code` is a
   * bp_code other than BP_OK; `message` is copied. */
  void (*report_error)(bp_error_sink *sink, int32_t code, const char *message);
  /* Write one log line; the host filters by level and category
   * (BACKPLANE_LOG). `context` is host_context below. Never NULL from this
   * host, but a plugin should tolerate NULL (treat as "no logging"). */
  void (*log)(void *context, int32_t level, const char *category, const char *message);
  void *host_context;
  /* Since 1.3, for layers: facts about a device or buffer the host handed a
   * hook, and the bytes of a buffer, read through its base device's plugin
   * (no layer sees that read). Valid for handles of the call being hooked;
   * BP_INVALID_ARGUMENT for NULL. */
  int32_t (*describe_device)(const struct bp_device *device, bp_layer_device_facts *out);
  int32_t (*describe_buffer)(const struct bp_buffer *buffer, bp_layer_buffer_facts *out);
  int32_t (*read_buffer)(const struct bp_buffer *buffer, size_t offset, void *destination, size_t bytes,
                         bp_error_sink *sink);
} bp_host_services;
#define BP_HOST_SERVICES_SIZE_V1_0 BP_STRUCT_SIZE(bp_host_services, host_context)
#define BP_HOST_SERVICES_SIZE_V1_3 BP_STRUCT_SIZE(bp_host_services, read_buffer)

/* One row of the capability table: on every device of `device_kind`,
 * `collective` runs for every element type in `dtypes` combined with every
 * op in `reduce_ops`, in the modes `flags` names. Several rows may name the
 * same (kind, collective); the host takes their union, so "avg for float
 * types only" is two rows. Flags and max_bytes hold for the row's element
 * types only (since 1.2; a 1.0/1.1 host kept flags per collective). For
 * collectives that do not reduce, reduce_ops is 0 and the op is ignored;
 * barrier's dtypes is 0. Values the host's minor does not know are
 * ignored (see "Extending this ABI" above). */
typedef struct bp_capability {
  size_t struct_size;
  const void *next;
  uint32_t device_kind; /* index into bp_plugin_descriptor.device_kinds */
  uint32_t collective;  /* bp_collective */
  uint32_t dtypes;      /* mask of (1u << bp_dtype) */
  uint32_t reduce_ops;  /* mask of (1u << bp_reduce_op) */
  uint32_t flags;       /* BP_CAPABILITY_* */
  /* Since 1.2: the most bytes one buffer of a call may span on this device
   * (count x element size x blocks, types.h), e.g. OpenCL's largest
   * allocation or Vulkan's maxStorageBufferRange; 0 = no limit. The host
   * refuses a larger call before it reaches the plugin, naming the limit.
   * Where rows overlap, the largest limit holds. */
  uint64_t max_bytes;
} bp_capability;
#define BP_CAPABILITY_SIZE_V1_0 BP_STRUCT_SIZE(bp_capability, flags)
#define BP_CAPABILITY_SIZE_V1_2 BP_STRUCT_SIZE(bp_capability, max_bytes)

/* Out-struct of device_info. */
typedef struct bp_plugin_device_info {
  size_t struct_size;
  void *next; /* writable: the caller's chain, for the callee to fill (1.2) */
  const char *name;        /* out: the device's own name, e.g. "cpu logical device 3" */
  const char *description; /* out: one line (vendor, driver, memory); may be NULL */
  uint32_t flags;          /* out: BP_DEVICE_* */
  uint64_t memory_bytes;   /* out: memory usable for buffers; 0 if unknown */
  /* out: this device's own rows when it supports less than its kind
   * declares (a subset of the kind's rows); NULL and 0 mean the kind's rows. */
  const bp_capability *capabilities;
  size_t capability_count;
  /* Since 1.1. out: named facts about the device, in the order to show
   * them (e.g. "platform", "vendor", "version", "compute_units",
   * "extensions"): property_keys[i] names property_values[i]. Keys are
   * [a-z0-9_]+ and unique; values are one line. NULL and 0 when none.
   * One key the host reads: "dtypes_missing", for a device that declares
   * fewer element types than its kind, lists each with what it would need,
   * as "f64 (needs shaderFloat64), i8 (needs shaderInt8 + ...)"; a refusal
   * of that element type on the device quotes its entry. */
  const char *const *property_keys;
  const char *const *property_values;
  size_t property_count;
} bp_plugin_device_info;
#define BP_PLUGIN_DEVICE_INFO_SIZE_V1_0 BP_STRUCT_SIZE(bp_plugin_device_info, capability_count)
#define BP_PLUGIN_DEVICE_INFO_SIZE_V1_1 BP_STRUCT_SIZE(bp_plugin_device_info, property_count)

/* Out-struct of kind_info (since 1.1). */
typedef struct bp_plugin_kind_info {
  size_t struct_size;
  void *next; /* writable: the caller's chain, for the callee to fill (1.2) */
  /* out: one line on the state of the kind on this machine when there is
   * something a user should know, above all why it has no device (e.g. "no
   * OpenCL platform: clGetPlatformIDs returned CL_PLATFORM_NOT_FOUND_KHR");
   * NULL when there is nothing to say. Valid until the next configure of the
   * kind or destroy. */
  const char *status;
} bp_plugin_kind_info;
#define BP_PLUGIN_KIND_INFO_SIZE_V1_1 BP_STRUCT_SIZE(bp_plugin_kind_info, status)

/* Out-struct of comm_info (since 1.1). */
typedef struct bp_plugin_comm_info {
  size_t struct_size;
  void *next; /* writable: the caller's chain, for the callee to fill (1.2) */
  /* out: how the comm moves data between its ranks, one line (e.g. "one
   * OpenCL context: device to device" or "through host memory: the devices
   * are on different OpenCL platforms"); NULL when there is nothing to say.
   * Valid until comm_destroy. */
  const char *route;
} bp_plugin_comm_info;
#define BP_PLUGIN_COMM_INFO_SIZE_V1_1 BP_STRUCT_SIZE(bp_plugin_comm_info, route)

/* In-struct of collective_start. The host has already checked everything
 * the capability table and the buffer sizes can tell (see types.h for the
 * element counts of each collective): enums in range and declared, root in
 * range, rank_count equal to the comm's size, every used buffer present,
 * on the rank's device and large enough, max_bytes respected. A plugin may
 * trust all of it and keep only the checks its own memory safety needs. */
typedef struct bp_collective_args {
  size_t struct_size;
  const void *next;
  uint32_t collective; /* bp_collective */
  uint32_t dtype;      /* bp_dtype; meaningless for barrier */
  uint32_t reduce_op;  /* bp_reduce_op; meaningless unless the collective reduces */
  uint32_t root;       /* rank of the root for reduce, broadcast, gather, scatter */
  size_t count;        /* elements, per the table in types.h; may be 0 */
  size_t rank_count;   /* the group's size: entries in send and recv */
  /* Per rank, borrowed for the call. An entry is NULL where the collective
   * does not use that rank's buffer (recv off the root for reduce and
   * gather, send off the root for broadcast and scatter); both arrays are
   * NULL for barrier. */
  bp_plugin_buffer *const *send;
  bp_plugin_buffer *const *recv;
  /* Since 1.2: BP_COLLECTIVE_*; 0 from a 1.0/1.1 host. */
  uint32_t flags;
} bp_collective_args;
#define BP_COLLECTIVE_ARGS_SIZE_V1_0 BP_STRUCT_SIZE(bp_collective_args, recv)
#define BP_COLLECTIVE_ARGS_SIZE_V1_2 BP_STRUCT_SIZE(bp_collective_args, flags)

/* bp_collective_args.flags */
/* The caller waits for the request as soon as start returns (a blocking
 * call, or a 1.0/1.1 host): completing it on the calling thread, before
 * returning, costs the caller nothing. Without it (an _async call) the
 * caller's thread goes on with other work, and a plugin that can run the
 * collective apart from it should. */
#define BP_COLLECTIVE_CALLER_WAITS 0x1u

/* The plugin's function table. Devices are addressed by (kind index into
 * the descriptor's device_kinds, device index < device_count). Every entry
 * is required unless it says "may be NULL"; a plugin that declares no
 * device kind (a layer-only plugin, 1.3) may leave every entry but destroy
 * NULL. */
typedef struct bp_plugin_functions {
  size_t struct_size;
  const void *next;

  /* Release everything the state owns. Called once, last. */
  void (*destroy)(bp_plugin_state *state);

  /* Apply the options of one kind (a JSON object as text, from the host's
   * options or the fleet file). The host calls it before enumerating the
   * kind's devices, and may call it again (with the same or other options)
   * while no buffer or comm of the kind exists; keys left out take their
   * defaults. Refuse what it cannot apply with BP_CONFIG. options_json may
   * be NULL (keep the current options). The entry itself may be NULL when
   * the plugin takes no options. */
  int32_t (*configure)(bp_plugin_state *state, uint32_t kind, const char *options_json,
                       bp_error_sink *sink);

  int32_t (*device_count)(bp_plugin_state *state, uint32_t kind, uint32_t *count,
                          bp_error_sink *sink);
  int32_t (*device_info)(bp_plugin_state *state, uint32_t kind, uint32_t device,
                         bp_plugin_device_info *info, bp_error_sink *sink);

  /* Buffers. The host checks offset + bytes against the buffer's size
   * before calling write and read. */
  int32_t (*buffer_create)(bp_plugin_state *state, uint32_t kind, uint32_t device, size_t bytes,
                           bp_plugin_buffer **out, bp_error_sink *sink);
  /* Wrap the caller's memory without copying; it stays the caller's and
   * must outlive the buffer. May be NULL when no device addresses host memory. */
  int32_t (*buffer_wrap_host)(bp_plugin_state *state, uint32_t kind, uint32_t device,
                              void *memory, size_t bytes, bp_plugin_buffer **out,
                              bp_error_sink *sink);
  void (*buffer_destroy)(bp_plugin_state *state, bp_plugin_buffer *buffer);
  int32_t (*buffer_write)(bp_plugin_state *state, bp_plugin_buffer *buffer, size_t offset,
                          const void *source, size_t bytes, bp_error_sink *sink);
  int32_t (*buffer_read)(bp_plugin_state *state, const bp_plugin_buffer *buffer, size_t offset,
                         void *destination, size_t bytes, bp_error_sink *sink);

  /* Communicators: set up once per group (contexts, scratch, kernels) so
   * that no collective call allocates. devices[r] is rank r's device. */
  int32_t (*comm_create)(bp_plugin_state *state, uint32_t kind, const uint32_t *devices,
                         size_t device_count, bp_plugin_comm **out, bp_error_sink *sink);
  void (*comm_destroy)(bp_plugin_state *state, bp_plugin_comm *comm);

  /* Start a collective. On BP_OK, *out is a request to test or wait on, or
   * NULL when the collective already completed. In place may differ from
   * rank to rank (types.h); a recv buffer never overlaps another rank's
   * buffers; in-place reduce_scatter and scatter leave the other blocks of
   * send[r] as they were. `args` and its arrays are borrowed for this call
   * only: a request that outlives it keeps its own copy of what it needs.
   *
   * The in-flight contract (since 1.2):
   *  - The host never calls collective_start on one comm from two threads
   *    at once.
   *  - A plugin of minor >= 2 may have several requests in flight on one
   *    comm: a start may come while earlier requests of the comm are still
   *    in flight, and the plugin completes them in start order: request k's
   *    effects on the buffers happen before request k+1 reads or writes
   *    them (as on an in-order queue), and k+1 is never complete before k.
   *  - A plugin of minor 0 or 1 is never given a second request on a comm
   *    while one is in flight: the host waits for the first itself.
   *  - The host releases a request only once it completed (it waits first),
   *    and destroys a comm only once every request of it was released; a
   *    buffer is destroyed only while no request in flight uses it. */
  int32_t (*collective_start)(bp_plugin_state *state, bp_plugin_comm *comm,
                              const bp_collective_args *args, bp_plugin_request **out,
                              bp_error_sink *sink);
  /* *done = true once the request completed; its error, if it failed, is
   * returned (with report_error) by the call that sees it complete, and
   * *done is then left unwritten. The host never passes the NULL "already
   * complete" request to test, wait or release. */
  int32_t (*request_test)(bp_plugin_state *state, bp_plugin_request *request, bool *done,
                          bp_error_sink *sink);
  /* Block until done or timeout_ns passed (negative: no limit). BP_TIMEOUT
   * leaves the request in flight and valid. */
  int32_t (*request_wait)(bp_plugin_state *state, bp_plugin_request *request,
                          int64_t timeout_ns, bp_error_sink *sink);
  /* Forget the request. A 1.2 host calls it only on a completed request; a
   * plugin that is handed one still in flight (an older host) finishes it
   * first, so that nothing touches the group's buffers afterwards. */
  void (*request_release)(bp_plugin_state *state, bp_plugin_request *request);

  /* Since 1.1; each may be NULL (nothing to say). */
  /* What a user should know about a kind, above all why it has no device.
   * Called after configure, before and after device_count. */
  int32_t (*kind_info)(bp_plugin_state *state, uint32_t kind, bp_plugin_kind_info *info,
                       bp_error_sink *sink);
  /* How a comm moves data between its ranks. */
  int32_t (*comm_info)(bp_plugin_state *state, bp_plugin_comm *comm, bp_plugin_comm_info *info,
                       bp_error_sink *sink);

  /* Since 1.4; may be NULL (a kind whose buffers are not host memory).
   * *memory = the address of the buffer's first byte, for a buffer whose
   * bytes are host memory the host may read and write in place (a cpu
   * buffer, allocated or wrapped); valid while the buffer lives. The host
   * wraps parts of it (buffer_wrap_host) to stage a large call in chunks
   * without copying this rank's data. */
  int32_t (*buffer_host_memory)(bp_plugin_state *state, const bp_plugin_buffer *buffer, void **memory,
                                bp_error_sink *sink);
} bp_plugin_functions;
#define BP_PLUGIN_FUNCTIONS_SIZE_V1_0 BP_STRUCT_SIZE(bp_plugin_functions, request_release)
#define BP_PLUGIN_FUNCTIONS_SIZE_V1_1 BP_STRUCT_SIZE(bp_plugin_functions, comm_info)
#define BP_PLUGIN_FUNCTIONS_SIZE_V1_4 BP_STRUCT_SIZE(bp_plugin_functions, buffer_host_memory)

/* ---- layers (since 1.3) -------------------------------------------------
 * A layer wraps one device and sees every call on it: the host calls its
 * `before` hook with the call's arguments (it may refuse the call, which
 * then never runs) and its `after` hook with the outcome and timing. A
 * layer never changes which plugin computes nor what the capability table
 * says: dispatch and bp_group_check look at the base device. The rules of
 * nesting (a kind not stackable appearing twice in one chain, chains deeper
 * than BP_LAYER_CHAIN_MAX, kinds it does not wrap) are the host's, checked
 * when a layered device is built. A device without layers pays nothing.
 *
 * A plugin declares layer kinds through a bp_layer_table hung off its
 * descriptor's `next` (type BP_EXTENSION_LAYER_TABLE), beside device kinds
 * or instead of them: a plugin with no device kind implements only `destroy`
 * of bp_plugin_functions. */

/* bp_layer_kind.flags */
#define BP_LAYER_STACKABLE 0x1u /* may appear more than once in one chain */
#define BP_LAYER_TIMED 0x2u     /* wants start_ns and end_ns in its outcomes (two clock reads a call) */

/* bp_layer_option.flags */
#define BP_LAYER_OPTION_PATH 0x1u /* a file name: a relative one resolves against the fleet file's folder */

/* One option a layer kind takes: the host refuses any other key. */
typedef struct bp_layer_option {
  size_t struct_size;
  const void *next;
  const char *name; /* [a-z0-9_]+ */
  const char *description; /* one line, e.g. "the trace file (Chrome trace-event JSON)" */
  uint32_t flags;          /* BP_LAYER_OPTION_* */
} bp_layer_option;
#define BP_LAYER_OPTION_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_option, flags)

typedef struct bp_layer_kind {
  size_t struct_size;
  const void *next;
  const char *name;        /* [a-z0-9_]+, unique among loaded layer kinds */
  const char *description; /* one line */
  uint32_t flags;          /* BP_LAYER_* */
  /* The device kinds it may wrap; 0 entries: every kind. */
  const char *const *device_kinds;
  size_t device_kind_count;
  const bp_layer_option *options;
  size_t option_count;
} bp_layer_kind;
#define BP_LAYER_KIND_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_kind, option_count)

/* What a hooked call does. */
typedef enum bp_layer_operation {
  BP_LAYER_BUFFER_CREATE = 0,
  BP_LAYER_BUFFER_WRAP_HOST = 1,
  BP_LAYER_BUFFER_WRITE = 2,
  BP_LAYER_BUFFER_READ = 3,
  BP_LAYER_BUFFER_DESTROY = 4,
  BP_LAYER_COLLECTIVE = 5,
  BP_LAYER_OPERATION_COUNT = 6,
  BP_LAYER_OPERATION_MAX_ENUM = 0x7FFFFFFF
} bp_layer_operation;

/* bp_layer_call.flags */
#define BP_LAYER_CALL_IN_PLACE 0x1u /* this rank's send and recv are one buffer */
#define BP_LAYER_CALL_ASYNC 0x2u    /* an _async call: `after` comes when its event completes */

/* A call on a layered device, as its hooks see it; borrowed for the hook. */
typedef struct bp_layer_call {
  size_t struct_size;
  const void *next;
  uint32_t operation; /* bp_layer_operation */
  uint32_t flags;     /* BP_LAYER_CALL_* */
  const struct bp_device *device; /* the layered device the call is on */
  /* Buffer operations: the buffer (NULL before create and wrap_host), the
   * byte range (offset, bytes), and the caller's memory (wrap_host: what is
   * wrapped; write: the source; read: the destination). */
  const struct bp_buffer *buffer;
  size_t offset;
  size_t bytes; /* collectives: this rank's largest buffer, as nccl-tests counts */
  const void *host_memory;
  /* Collectives: the request and this device's place in the group. */
  uint32_t collective; /* bp_collective */
  uint32_t dtype;      /* bp_dtype; meaningless for barrier */
  uint32_t reduce_op;  /* bp_reduce_op; meaningless unless it reduces */
  uint32_t root;
  size_t count;
  uint32_t rank;       /* this device's rank */
  size_t rank_count;
  /* Per rank, the caller's arrays as given (NULL for barrier; an entry the
   * collective does not use may be anything but is never dereferenced by
   * the host), and each rank's device. */
  const struct bp_buffer *const *send;
  const struct bp_buffer *const *recv;
  const struct bp_device *const *ranks;
  uint64_t group_serial;  /* never reused in the process */
  const char *group_name; /* "" when unnamed */
  uint64_t call_serial;   /* the collective's number on its group, from 1, the same on every rank */
} bp_layer_call;
#define BP_LAYER_CALL_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_call, call_serial)

typedef struct bp_layer_outcome {
  size_t struct_size;
  const void *next;
  int32_t code;        /* BP_OK, or the code the call failed with */
  const char *message; /* the failure's message, else NULL */
  /* Steady-clock nanoseconds (CLOCK_MONOTONIC) when the call started and
   * when it was seen complete; 0 unless the layer kind is BP_LAYER_TIMED. */
  int64_t start_ns;
  int64_t end_ns;
  const struct bp_buffer *buffer; /* create and wrap_host: the new buffer (NULL on failure) */
} bp_layer_outcome;
#define BP_LAYER_OUTCOME_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_outcome, buffer)

/* In-struct of instance_create. */
typedef struct bp_layer_create_args {
  size_t struct_size;
  const void *next;
  uint32_t layer_kind;            /* index into bp_layer_table.kinds */
  const struct bp_device *device; /* the layered device being built (describe_device works on it) */
  const char *device_name;
  const char *chain;        /* the whole chain, outermost first, e.g. "trace → validate → cpu:0" */
  const char *options_json; /* this layer's options, a JSON object checked against its declared keys; "{}" */
} bp_layer_create_args;
#define BP_LAYER_CREATE_ARGS_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_create_args, options_json)

/* A layer plugin's functions. Hooks are called on the thread that makes
 * the call (an _async collective's `after`: the thread that sees its event
 * complete), concurrently across devices and groups; a hook must not call
 * back into the application API. */
typedef struct bp_layer_functions {
  size_t struct_size;
  const void *next;
  int32_t (*instance_create)(bp_plugin_state *state, const bp_layer_create_args *args, bp_layer_instance **out,
                             bp_error_sink *sink);
  /* At the layered device's end (its host's destruction): a layer that
   * writes a file writes what it holds. */
  void (*instance_destroy)(bp_plugin_state *state, bp_layer_instance *instance);
  /* Before the call: BP_OK lets it run; any other code a plugin function
   * may return refuses it, and the caller gets that code with the layer's
   * own message (begin it with what the caller must know first, e.g. the
   * rank). May be NULL. */
  int32_t (*before)(bp_plugin_state *state, bp_layer_instance *instance, const bp_layer_call *call,
                    bp_error_sink *sink);
  /* After the call, with its outcome: also when it never ran because a
   * layer inside this one (nearer the base) or a layer on another rank of
   * the group refused it, with that code. Every layered rank's `before`
   * runs before the call starts, every `after` once it completed. A failure
   * turns a successful call's outcome into that error; the call has run.
   * May be NULL. */
  int32_t (*after)(bp_plugin_state *state, bp_layer_instance *instance, const bp_layer_call *call,
                   const bp_layer_outcome *outcome, bp_error_sink *sink);
  /* Write out what it holds (bp_host_flush). May be NULL. */
  int32_t (*flush)(bp_plugin_state *state, bp_layer_instance *instance, bp_error_sink *sink);
} bp_layer_functions;
#define BP_LAYER_FUNCTIONS_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_functions, flush)

/* The layer family's table: a typed extension (its first three fields are
 * bp_extension_header's) on bp_plugin_descriptor.next. */
typedef struct bp_layer_table {
  size_t struct_size;
  void *next;
  uint32_t type; /* BP_EXTENSION_LAYER_TABLE */
  const bp_layer_kind *kinds;
  size_t kind_count;
  const bp_layer_functions *functions;
} bp_layer_table;
#define BP_LAYER_TABLE_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_table, functions)

/* ---- transports (since 1.6) ---------------------------------------------
 * A transport moves host memory between processes (the mpi plugin, on Open
 * MPI). A group that spans processes runs hierarchically: its ranks in one
 * process work on their own plugin, and one exchange per process crosses
 * through the transport on host memory. The host drives both phases; the
 * transport sees only processes, never devices.
 *
 * A plugin declares a transport through a bp_transport_table hung off its
 * descriptor's `next` (type BP_EXTENSION_TRANSPORT_TABLE). Its rows say what
 * it carries across processes, as a device plugin's do (bp_capability with
 * device_kind 0, ignored), so the capability check, bp_group_check and the
 * refusals cover the cross-process part too.
 *
 * Exchanges, per collective (P processes; process p holds blocks[p] blocks
 * of `count` elements: its ranks in the group, or 1 each with
 * BP_EXCHANGE_ONE_BLOCK_PER_PROCESS; B = the sum of blocks; my = this
 * process's blocks; off = the blocks of the processes before it; `root` is
 * a process index):
 *   all_reduce      send: count      recv: count
 *   reduce          send: count      recv: count (root only)
 *   broadcast       send: count (root only; NULL elsewhere)  recv: count (NULL at the root)
 *   all_gather      send: count x my recv: count x B (process p's part at its off)
 *   reduce_scatter  send: count x B  recv: count x my (this process's part)
 *   gather          send: count x my recv: count x B (root only)
 *   scatter         send: count x B (root only)  recv: count x my
 *   all_to_all      send: the blocks for process 0, then 1, ... (count x my x blocks[q] for q)
 *                   recv: what process 0 sent, then 1, ... (count x blocks[q] x my from q)
 *   barrier         no memory
 * In place is send == recv, the larger of the two buffers: for all_gather
 * and gather the process's own part is already at its offset of recv; for
 * reduce_scatter and scatter its part is written there (at off); for
 * all_to_all the buffer is both layouts at once. BP_AVG is the sum divided
 * by `average_over` (the group's rank count, not the process count).
 *
 * Every process makes the same calls on a transport in the same order
 * (open, comm_create, each comm's exchanges): they are collective across
 * the processes. After BP_TIMEOUT the exchange stays in flight, and the
 * memory it was given may still be written if a late process calls after
 * all: the host keeps no promise about that memory (backplane.h says so to
 * applications). */

/* A transport opened by a host (an MPI communicator, the plugin's own
 * duplicate), and one group's side of it. Handles the plugin defines. */
typedef struct bp_transport bp_transport;
typedef struct bp_transport_comm bp_transport_comm;

/* bp_transport_open_args.flags */
#define BP_TRANSPORT_GIVEN_HANDLE 0x1u /* `handle` is the application's communicator */

/* In-struct of open. */
typedef struct bp_transport_open_args {
  size_t struct_size;
  const void *next;
  /* The transport's options, a JSON object as text (the fleet's "transport"
   * object less the host's own keys "plugin" and "timeout_s"); "{}". */
  const char *options_json;
  uint32_t flags; /* BP_TRANSPORT_* */
  /* With BP_TRANSPORT_GIVEN_HANDLE: the application's communicator as an
   * integer handle (MPI: MPI_Comm_c2f, since MPI_Comm is a pointer in Open
   * MPI and an int in MPICH), which the transport duplicates; else the
   * transport's whole world (MPI_COMM_WORLD). */
  int64_t handle;
} bp_transport_open_args;
#define BP_TRANSPORT_OPEN_ARGS_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_open_args, handle)

/* Out-struct of transport_info. Strings valid until close. */
typedef struct bp_transport_info {
  size_t struct_size;
  void *next;
  uint32_t process_index; /* this process, from 0 */
  uint32_t process_count;
  const char *library; /* one line: the library and its version, e.g. "Open MPI v4.1.4, ..." */
  const char *details; /* one line: e.g. "thread level MPI_THREAD_MULTIPLE, initialised by the plugin" */
} bp_transport_info;
#define BP_TRANSPORT_INFO_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_info, details)

/* In-struct of comm_create: one group's side, made by every process of the
 * transport together (a collective call across processes). */
typedef struct bp_transport_comm_args {
  size_t struct_size;
  const void *next;
  uint64_t local_ranks; /* this process's ranks in the group (>= 1) */
  int64_t timeout_ns;   /* how long to wait for the other processes; negative: no limit */
} bp_transport_comm_args;
#define BP_TRANSPORT_COMM_ARGS_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_comm_args, timeout_ns)

/* Out-struct of comm_create. */
typedef struct bp_transport_comm_info {
  size_t struct_size;
  void *next;
  uint32_t process_index;
  uint32_t process_count;
  /* Per process, its local_ranks: process_count entries, plugin-owned,
   * valid until comm_destroy. */
  const uint64_t *process_ranks;
} bp_transport_comm_info;
#define BP_TRANSPORT_COMM_INFO_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_comm_info, process_ranks)

/* bp_transport_exchange.flags */
#define BP_EXCHANGE_ONE_BLOCK_PER_PROCESS 0x1u /* blocks[p] = 1, whatever the group's ranks */

/* In-struct of exchange_start. Memory is host memory, borrowed until the
 * request completed; the host has checked what the rows and sizes tell. */
typedef struct bp_transport_exchange {
  size_t struct_size;
  const void *next;
  uint32_t collective; /* bp_collective */
  uint32_t dtype;
  uint32_t reduce_op;
  uint32_t root;  /* a process index */
  size_t count;   /* elements per block */
  const void *send;
  void *recv;
  uint64_t average_over; /* BP_AVG: the divisor */
  uint32_t flags;        /* BP_EXCHANGE_* */
} bp_transport_exchange;
#define BP_TRANSPORT_EXCHANGE_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_exchange, flags)

/* A transport plugin's functions. Every function may be called from any
 * thread; the host never starts two exchanges on one comm at once, and
 * every process starts a comm's exchanges in the same order. */
typedef struct bp_transport_functions {
  size_t struct_size;
  const void *next;
  /* Open the transport for one host: BP_PLUGIN_INIT when the library
   * cannot be initialised or gives less than the transport needs (say what
   * it got), BP_CONFIG for options it does not take. */
  int32_t (*open)(bp_plugin_state *state, const bp_transport_open_args *args, bp_transport **out,
                  bp_error_sink *sink);
  /* Close it, once its comms are destroyed: a library the plugin
   * initialised is finalised with the last transport it opened. */
  void (*close)(bp_plugin_state *state, bp_transport *transport);
  int32_t (*transport_info)(bp_plugin_state *state, bp_transport *transport, bp_transport_info *out,
                            bp_error_sink *sink);
  /* BP_TIMEOUT when some process did not arrive within the timeout. */
  int32_t (*comm_create)(bp_plugin_state *state, bp_transport *transport, const bp_transport_comm_args *args,
                         bp_transport_comm_info *info, bp_transport_comm **out, bp_error_sink *sink);
  void (*comm_destroy)(bp_plugin_state *state, bp_transport_comm *comm);
  /* Start an exchange; *out is a request to wait on, or NULL when it
   * already completed. A failure names the process and the library's own
   * error text. */
  int32_t (*exchange_start)(bp_plugin_state *state, bp_transport_comm *comm, const bp_transport_exchange *exchange,
                            bp_plugin_request **out, bp_error_sink *sink);
  /* Block until the request completed or timeout_ns passed (negative: no
   * limit). BP_TIMEOUT leaves it in flight: the host then calls the comm
   * broken and never waits on it again, and releases it only at
   * comm_destroy, which must not block on it. */
  int32_t (*exchange_wait)(bp_plugin_state *state, bp_plugin_request *request, int64_t timeout_ns,
                           bp_error_sink *sink);
  void (*exchange_release)(bp_plugin_state *state, bp_plugin_request *request);
} bp_transport_functions;
#define BP_TRANSPORT_FUNCTIONS_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_functions, exchange_release)

/* The transport family's table: a typed extension on
 * bp_plugin_descriptor.next (its first three fields are bp_extension_header's). */
typedef struct bp_transport_table {
  size_t struct_size;
  void *next;
  uint32_t type;    /* BP_EXTENSION_TRANSPORT_TABLE */
  const char *name; /* the transport's name, [a-z0-9_]+, e.g. "mpi" */
  const bp_capability *capabilities; /* what it carries across processes */
  size_t capability_count;
  const bp_transport_functions *functions;
} bp_transport_table;
#define BP_TRANSPORT_TABLE_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_table, functions)

/* What a plugin is. */
typedef struct bp_plugin_descriptor {
  size_t struct_size;
  const void *next;
  uint32_t abi_major; /* BP_PLUGIN_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;
  const char *name;    /* [a-z0-9_]+; by convention the <name> of libbackplane_<name>.so */
  const char *version; /* semantic version, e.g. "0.1.0" */
  const char *const *device_kinds; /* kinds this plugin owns, e.g. "cpu" */
  size_t device_kind_count;
  const bp_capability *capabilities;
  size_t capability_count;
  const bp_plugin_functions *functions;
} bp_plugin_descriptor;
#define BP_PLUGIN_DESCRIPTOR_SIZE_V1_0 BP_STRUCT_SIZE(bp_plugin_descriptor, functions)

/* Argument of bp_plugin_entry. */
typedef struct bp_plugin_entry_args {
  size_t struct_size; /* in: set by the host */
  const void *next;
  uint32_t host_abi_major; /* in */
  uint32_t host_abi_minor; /* in */
  const bp_host_services *services; /* in: valid until destroy returns */
  bp_error_sink *sink;              /* in: where a refusal reports why */
  const bp_plugin_descriptor *descriptor; /* out: plugin-owned, valid until destroy */
  bp_plugin_state *state;                 /* out: passed to every function */
  /* Since 1.2. in: every option the host was given for device kinds, one
   * JSON object keyed by kind as text (e.g. {"cpu": {"threads": 2},
   * "vulkan": {"ranks_per_device": 4}}, from bp_host_options and the fleet
   * file); "{}" when there are none; borrowed for the call. A plugin reads
   * the entries of its own kinds here when they shape what it declares
   * (its kinds, rows, limits); configure() still follows per kind. */
  const char *options_json;
} bp_plugin_entry_args;
#define BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0 BP_STRUCT_SIZE(bp_plugin_entry_args, state)
#define BP_PLUGIN_ENTRY_ARGS_SIZE_V1_2 BP_STRUCT_SIZE(bp_plugin_entry_args, options_json)

/* The one symbol a plugin exports. Returns BP_OK with descriptor and state
 * set, or a refusal code (BP_PLUGIN_INIT, BP_PLUGIN_ABI, ...) after
 * reporting why through args->sink. Called once per host that loads the
 * plugin, so two hosts in one process get two states. */
typedef int32_t (*bp_plugin_entry_fn)(bp_plugin_entry_args *args);
#define BP_PLUGIN_ENTRY_SYMBOL "bp_plugin_entry"

BP_PLUGIN_EXPORT int32_t bp_plugin_entry(bp_plugin_entry_args *args);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BACKPLANE_PLUGIN_H */
