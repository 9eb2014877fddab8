/* Backplane application C API: create a host, load plugins, enumerate
 * devices and capabilities, create buffers and groups, run collectives, and
 * read structured errors. Stable within a major version (see CHANGELOG.md).
 *
 * Conventions:
 *  - Out-structs: the caller sets struct_size; the library writes the fields
 *    it has and zeroes the rest up to struct_size (since 1.2), at most
 *    BP_OUT_STRUCT_SIZE_MAX bytes (a larger struct_size is
 *    BP_INVALID_ARGUMENT).
 *  - Every fallible call returns bp_error*: NULL on success, else an error
 *    the caller owns and frees with bp_error_destroy. Results go through
 *    out-parameters, which are left untouched on failure.
 *  - Structs start with struct_size (set it with sizeof) and next (NULL).
 *  - Strings returned by the API are NUL-terminated UTF-8 and live as long
 *    as the object they came from (the host for listings, the error for
 *    error fields).
 *  - Listings are count-then-get: bp_host_x_count(), then bp_host_x(i).
 *  - A bp_host is thread-safe. Collectives on one bp_group are started from
 *    one thread at a time: a call while another thread is starting one on
 *    the same group returns BP_INVALID_ARGUMENT.
 *  - In flight (since 1.2): several collectives may be in flight on one
 *    group (each _async call returns once its collective started), and
 *    they complete in start order, as on an in-order queue: collective k's
 *    results are in the buffers before collective k+1 reads them, and
 *    event k+1 is never complete before event k. A blocking call queues
 *    behind the group's collectives in flight and returns when it is done.
 *    Buffers a collective in flight uses must stay alive and untouched
 *    until its event completed.
 *  - Lifetimes (since 1.2), whatever the order of destruction:
 *    bp_event_destroy of an event in flight waits for its collective;
 *    bp_group_destroy waits for the group's collectives in flight (their
 *    events stay valid and keep their outcome); bp_host_destroy releases the
 *    application's reference to the host: its buffers, groups and events
 *    stay usable until each is destroyed, and the plugins are unloaded
 *    when the last of them is. The bp_host pointer itself, and the devices
 *    borrowed from it, must not be used after bp_host_destroy. */
#ifndef BACKPLANE_BACKPLANE_H
#define BACKPLANE_BACKPLANE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backplane/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BP_API_VERSION_MAJOR 1
#define BP_API_VERSION_MINOR 6

/* The largest struct_size an out-struct may claim. */
#define BP_OUT_STRUCT_SIZE_MAX 4096u

#if defined(__GNUC__)
#define BP_API __attribute__((visibility("default")))
#else
#define BP_API
#endif

/* Versions as one number: (major << 16) | minor. */
#define BP_MAKE_API_VERSION(major, minor) ((((uint32_t)(major)) << 16) | ((uint32_t)(minor)))
#define BP_API_VERSION_MAJOR_OF(version) ((uint32_t)(version) >> 16)
#define BP_API_VERSION_MINOR_OF(version) ((uint32_t)(version) & 0xFFFFu)

/* Since 1.2: the version of the library this process runs against, which
 * may be newer than the header it was built with (BP_API_VERSION_*). An
 * application that needs a minor's functions compares the minor.
 * libbackplane.so has a symbol version per minor (BACKPLANE_1.0, 1.1,
 * 1.2, ...): against a library of 1.2 or later, a program that calls a
 * function newer than the library is refused when it loads, naming the
 * version; a 1.0/1.1 library has no versions, so there the loader only
 * warns and the call fails when first made (at load with -z now). */
BP_API uint32_t bp_api_version(void);

typedef struct bp_host bp_host;
typedef struct bp_device bp_device; /* borrowed from its host */
typedef struct bp_buffer bp_buffer;
typedef struct bp_group bp_group;
typedef struct bp_event bp_event;
typedef struct bp_error bp_error;

/* ---- errors ------------------------------------------------------------ */

BP_API bp_code bp_error_code(const bp_error *error);
/* One line naming the thing and the reason. */
BP_API const char *bp_error_message(const bp_error *error);
/* The whole structured error as a JSON object: code, message, and the
 * context fields (operation, dtype, reduce_op, devices, plugin, file,
 * alternatives, hint, ...). */
BP_API const char *bp_error_json(const bp_error *error);
/* One context field: a string field as its text, any other (and always
 * "value") as JSON text; NULL when the error has no such field. "hint" and
 * "alternatives" included. */
BP_API const char *bp_error_field(const bp_error *error, const char *key);
BP_API void bp_error_destroy(bp_error *error);
/* Errors that gather several problems (a fleet that fails to load) list
 * each as an error of its own, borrowed from `error`. */
BP_API size_t bp_error_problem_count(const bp_error *error);
BP_API const bp_error *bp_error_problem(const bp_error *error, size_t index);

/* Stable names ("UNSUPPORTED_DTYPE", "f32", "sum", "all_reduce") and their
 * inverses (false when the name is unknown). */
BP_API const char *bp_code_name(bp_code code);
BP_API const char *bp_dtype_name(bp_dtype dtype);
BP_API const char *bp_reduce_op_name(bp_reduce_op op);
BP_API const char *bp_collective_name(bp_collective collective);
BP_API size_t bp_dtype_size(bp_dtype dtype); /* 0 for a value out of range */
BP_API bool bp_dtype_from_name(const char *name, bp_dtype *out);
BP_API bool bp_reduce_op_from_name(const char *name, bp_reduce_op *out);
BP_API bool bp_collective_from_name(const char *name, bp_collective *out);

/* ---- host -------------------------------------------------------------- */

/* host flags */
#define BP_HOST_IGNORE_ENV_PATH 0x1u     /* skip BACKPLANE_PLUGIN_PATH */
#define BP_HOST_IGNORE_INSTALL_PATH 0x2u /* skip the install directory */
/* Since 1.2: load each plugin file first in a probe process of its own
 * (backplane-probe, installed beside this library), so that a plugin that
 * crashes, exits or hangs while loading is refused (BP_PLUGIN_LOAD when it
 * died in its constructors, BP_PLUGIN_INIT after) instead of taking the
 * process down. BACKPLANE_PROBE=1 turns it on as well; the wait is
 * BACKPLANE_PROBE_TIMEOUT_MS (default 5000). Files that passed are
 * remembered in the cache folder, so later starts skip them. */
#define BP_HOST_PROBE 0x4u

typedef struct bp_host_options {
  size_t struct_size;
  const void *next;
  /* Directories searched first, in order; borrowed for the call. */
  const char *const *plugin_dirs;
  size_t plugin_dir_count;
  uint32_t flags; /* BP_HOST_* */
  /* Options per device kind, a JSON object such as {"cpu": {"devices": 8}};
   * passed to the owning plugin before its devices are enumerated. May be NULL. */
  const char *plugin_options_json;
  /* Since 1.2: plugin files pinned to their content, a JSON object from a
   * plugin file name to the SHA-256 of its bytes in hex, e.g.
   * {"libbackplane_cpu.so": "9f86d0..."}. A file of a pinned name whose
   * content differs, wherever it is found, is refused (BP_PLUGIN_LOAD,
   * naming both hashes) before any of its code runs. May be NULL. */
  const char *plugin_pins_json;
} bp_host_options;
#define BP_HOST_OPTIONS_SIZE_V1_0 BP_STRUCT_SIZE(bp_host_options, plugin_options_json)
#define BP_HOST_OPTIONS_SIZE_V1_2 BP_STRUCT_SIZE(bp_host_options, plugin_pins_json)

/* Create a host and load every plugin found in the search order: the
 * options' plugin_dirs, then BACKPLANE_PLUGIN_PATH (colon-separated, read
 * with secure_getenv), then the install directory next to this library.
 * A plugin that fails to load does not fail the host: it is listed by
 * bp_host_refused. `options` may be NULL. */
BP_API bp_error *bp_host_create(const bp_host_options *options, bp_host **out);
/* Releases the application's reference to the host. Its buffers, groups
 * and events (any still alive) keep working until each is destroyed; the
 * groups a fleet created, the devices and the plugins go with the last of
 * them. NULL is ignored. */
BP_API void bp_host_destroy(bp_host *host);
/* Load one more plugin file, outside the search path. A refusal is both
 * returned and listed by bp_host_refused. */
BP_API bp_error *bp_host_load_plugin(bp_host *host, const char *path);

typedef struct bp_plugin_info {
  size_t struct_size;
  void *next; /* writable (1.2): the caller's chain of extensions; the library skips unknown types */
  const char *name;
  const char *version;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char *file;
  const char *const *device_kinds;
  size_t device_kind_count;
  /* Since 1.1: per device kind (parallel to device_kinds), the plugin's one
   * line on its state, above all why it has no device; an entry is NULL when
   * the plugin has nothing to say. */
  const char *const *kind_status;
  /* Since 1.2: the SHA-256 of the file's bytes, 64 hex digits: read before loading when pinned
   * (bp_host_options.plugin_pins_json), else at the first bp_host_plugin call; "" if unreadable. */
  const char *sha256;
  /* Since 1.3: the layer kinds it provides (bp_host_layer_kind has their rules). */
  const char *const *layer_kinds;
  size_t layer_kind_count;
  /* Since 1.6: the transport it provides ("mpi"), "" for none. */
  const char *transport;
} bp_plugin_info;
#define BP_PLUGIN_INFO_SIZE_V1_0 BP_STRUCT_SIZE(bp_plugin_info, device_kind_count)
#define BP_PLUGIN_INFO_SIZE_V1_1 BP_STRUCT_SIZE(bp_plugin_info, kind_status)
#define BP_PLUGIN_INFO_SIZE_V1_2 BP_STRUCT_SIZE(bp_plugin_info, sha256)
#define BP_PLUGIN_INFO_SIZE_V1_3 BP_STRUCT_SIZE(bp_plugin_info, layer_kind_count)
#define BP_PLUGIN_INFO_SIZE_V1_6 BP_STRUCT_SIZE(bp_plugin_info, transport)

BP_API size_t bp_host_plugin_count(const bp_host *host);
BP_API bp_error *bp_host_plugin(const bp_host *host, size_t index, bp_plugin_info *out);

/* Files that were found but refused; the error has "file" among its fields.
 * The error is borrowed from the host. */
BP_API size_t bp_host_refused_count(const bp_host *host);
BP_API const bp_error *bp_host_refused(const bp_host *host, size_t index);

/* ---- devices ----------------------------------------------------------- */

typedef struct bp_device_info {
  size_t struct_size;
  void *next; /* writable (1.2): the caller's chain of extensions; the library skips unknown types */
  const char *name;        /* "kind:index", e.g. "cpu:3" */
  const char *kind;
  uint32_t index;          /* within its kind */
  const char *plugin;      /* owning plugin's name */
  const char *description; /* the plugin's name and description of the device */
  uint32_t flags;          /* BP_DEVICE_* */
  uint64_t memory_bytes;
  /* Since 1.1: the plugin's named facts about the device (e.g. "platform",
   * "vendor", "version", "compute_units", "extensions"), in its order:
   * property_keys[i] names property_values[i]. NULL and 0 when none. */
  const char *const *property_keys;
  const char *const *property_values;
  size_t property_count;
  /* Since 1.3: a layered device's chain, outermost first (layers[0] sees a
   * call first), and the device it wraps and its base; kind, index, plugin,
   * flags, memory and properties are then the base's. 0 layers, NULL over
   * and base == the device's own name when it has none. */
  const char *const *layers;
  size_t layer_count;
  const char *over; /* the device directly under its own layers */
  const char *base; /* through every layer */
  const char *chain; /* e.g. "trace → validate → cpu:0"; the name alone without layers */
} bp_device_info;
#define BP_DEVICE_INFO_SIZE_V1_0 BP_STRUCT_SIZE(bp_device_info, memory_bytes)
#define BP_DEVICE_INFO_SIZE_V1_1 BP_STRUCT_SIZE(bp_device_info, property_count)
#define BP_DEVICE_INFO_SIZE_V1_3 BP_STRUCT_SIZE(bp_device_info, chain)

BP_API size_t bp_host_device_count(const bp_host *host);
BP_API bp_device *bp_host_device(const bp_host *host, size_t index); /* NULL when out of range */
/* By name: "kind:index" (e.g. "cpu:0"). */
BP_API bp_error *bp_host_find_device(bp_host *host, const char *name, bp_device **out);
BP_API bp_error *bp_device_get_info(const bp_device *device, bp_device_info *out);
/* Through every layer to the base device (the device itself when it has none). */
BP_API bp_device *bp_device_base(bp_device *device);

/* ---- layers (since 1.3) ------------------------------------------------ */
/* A layered device wraps a device (layered or not) in layers that see every
 * call on it (trace records, validate checks); it runs where its base runs,
 * with its base's capabilities. Buffers of the base and of any device over
 * it are interchangeable at a rank; the host checks the nesting rules when
 * the device is built: BP_NESTED_LAYER for a kind that is not stackable
 * appearing twice in the chain, a chain deeper than 8 layers, a layer over
 * a device kind it does not wrap (and, in fleet files, a cycle through
 * "over"); BP_PLUGIN_NOT_FOUND for a layer no loaded plugin provides; each
 * naming the whole chain ("trace → validate → trace → cpu:0"). */
typedef struct bp_device_wrap_options {
  size_t struct_size;
  const void *next;
  const char *name;  /* the new device's, unique on the host; NULL: the chain's text */
  bp_device *over;   /* the device to wrap */
  const char *const *layers; /* layer kind names, outermost first */
  size_t layer_count;
  /* Per layer, its options: {"trace": {"file": "t.json"}}; NULL or "" for none. */
  const char *options_json;
} bp_device_wrap_options;
#define BP_DEVICE_WRAP_OPTIONS_SIZE_V1_3 BP_STRUCT_SIZE(bp_device_wrap_options, options_json)

/* The new device belongs to the host (listed by bp_host_device) and lives
 * as long as it. */
BP_API bp_error *bp_device_wrap(bp_host *host, const bp_device_wrap_options *options, bp_device **out);

/* Asks every layer to write out what it holds (trace files); the first
 * failure is returned, the others logged. Layers also write at the host's
 * destruction. */
BP_API bp_error *bp_host_flush(bp_host *host);

typedef struct bp_layer_kind_info {
  size_t struct_size;
  void *next;
  const char *name;
  const char *plugin;
  const char *description;
  bool stackable;
  const char *const *device_kinds; /* what it wraps; 0 entries: every kind */
  size_t device_kind_count;
  const char *const *option_names; /* the options it takes, with one line each */
  const char *const *option_descriptions;
  size_t option_count;
} bp_layer_kind_info;
#define BP_LAYER_KIND_INFO_SIZE_V1_3 BP_STRUCT_SIZE(bp_layer_kind_info, option_count)

BP_API size_t bp_host_layer_kind_count(const bp_host *host);
BP_API bp_error *bp_host_layer_kind(const bp_host *host, size_t index, bp_layer_kind_info *out);

/* ---- capabilities ------------------------------------------------------ */

typedef struct bp_capability_info {
  size_t struct_size;
  void *next; /* writable (1.2): the caller's chain of extensions; the library skips unknown types */
  const char *device_kind;
  const char *plugin;
  uint32_t collective; /* bp_collective */
  uint32_t dtypes;     /* mask of (1u << bp_dtype) */
  uint32_t reduce_ops; /* mask of (1u << bp_reduce_op) for reducing collectives, 0 else */
  uint32_t flags;      /* BP_CAPABILITY_*, for this element type (1.2; per collective before) */
  /* Since 1.2: the most bytes one buffer of a call may span (the plugin's
   * row limit, e.g. OpenCL's largest allocation); 0 = no limit. */
  uint64_t max_bytes;
} bp_capability_info;
#define BP_CAPABILITY_INFO_SIZE_V1_0 BP_STRUCT_SIZE(bp_capability_info, flags)
#define BP_CAPABILITY_INFO_SIZE_V1_2 BP_STRUCT_SIZE(bp_capability_info, max_bytes)

/* The flattened table, one entry per (kind, collective, dtype) that runs
 * at all, with the ops allowed for that dtype. */
BP_API size_t bp_host_capability_count(const bp_host *host);
BP_API bp_error *bp_host_capability(const bp_host *host, size_t index, bp_capability_info *out);

/* ---- buffers ----------------------------------------------------------- */

BP_API bp_error *bp_buffer_create(bp_device *device, size_t bytes, bp_buffer **out);
/* Zero-copy: the buffer is the caller's memory, which must outlive it.
 * Only on devices with BP_DEVICE_HOST_ADDRESSABLE. */
BP_API bp_error *bp_buffer_wrap_host(bp_device *device, void *memory, size_t bytes, bp_buffer **out);
BP_API bp_error *bp_buffer_write(bp_buffer *buffer, size_t offset, const void *source, size_t bytes);
BP_API bp_error *bp_buffer_read(const bp_buffer *buffer, size_t offset, void *destination, size_t bytes);
BP_API size_t bp_buffer_size(const bp_buffer *buffer);
BP_API bp_device *bp_buffer_device(const bp_buffer *buffer);
BP_API void bp_buffer_destroy(bp_buffer *buffer);

/* ---- groups ------------------------------------------------------------ */

/* A group whose ranks are of several device kinds (since 1.4: staged). */
typedef enum bp_group_policy {
  /* Every collective runs through host memory: each rank's plugin copies its
   * data to the host (a cpu rank's buffers are used as they are), the cpu
   * plugin's kernels compute the collective there, and the results are
   * copied back. Needs the cpu plugin, with a cpu device for each rank. */
  BP_POLICY_STAGE = 0,
  BP_POLICY_REJECT = 1, /* mixed kinds are refused with MIXED_DEVICE_KINDS */
  BP_POLICY_MAX_ENUM = 0x7FFFFFFF
} bp_group_policy;

/* Since 1.4: what a group of one kind does with a request its kind does
 * not declare (an element type, op, collective or mode). */
typedef enum bp_unsupported_action {
  BP_ON_UNSUPPORTED_ERROR = 0, /* refused: UNSUPPORTED_* with alternatives */
  BP_ON_UNSUPPORTED_STAGE = 1, /* run through host memory as a mixed group is, and counted */
  BP_ON_UNSUPPORTED_MAX_ENUM = 0x7FFFFFFF
} bp_unsupported_action;

/* Since 1.6: which processes a group's ranks are in. */
typedef enum bp_group_span {
  BP_SPAN_PROCESS = 0, /* this process's devices only */
  /* The ranks given, in every process of the host's transport: each
   * process passes its own local devices, and the group's ranks are
   * numbered process-major (process 0's first, in the order it gave them,
   * then process 1's, ...). Needs bp_host_open_transport first; creating
   * it is a call every process of the transport makes. */
  BP_SPAN_WORLD = 1,
  BP_SPAN_MAX_ENUM = 0x7FFFFFFF
} bp_group_span;

/* Since 1.5: whether the ranks of one kind other than cpu in a staged
 * group work among themselves on their own plugin first in an all_reduce,
 * reduce (a local reduce to one leader per kind) or broadcast (the leader
 * broadcasts to the others), so that only the leader's data crosses host
 * memory. Never for avg (a mean of the kinds' means is not the mean), nor
 * where the kind does not run that part natively. */
typedef enum bp_local_first {
  BP_LOCAL_FIRST_AUTO = 0,   /* unless every device of the kind is BP_DEVICE_ON_HOST_CORES */
  BP_LOCAL_FIRST_ALWAYS = 1, /* every kind with several ranks */
  BP_LOCAL_FIRST_NEVER = 2,  /* every rank is staged */
  BP_LOCAL_FIRST_MAX_ENUM = 0x7FFFFFFF
} bp_local_first;

typedef struct bp_group_options {
  size_t struct_size;
  const void *next;
  const char *name;  /* may be NULL */
  uint32_t policy;   /* bp_group_policy */
  /* Since 1.4: bp_unsupported_action. 64 bits wide so that it starts past
   * the 1.0 struct's tail padding (offset 32): an older application may
   * leave that padding unset and still pass sizeof as struct_size. */
  uint64_t on_unsupported;
  uint64_t local_first; /* since 1.5: bp_local_first */
  uint64_t span;        /* since 1.6: bp_group_span */
  /* Since 1.6, for a group that spans processes: 1 compares every call's
   * fingerprint across processes before its data moves (the mismatch
   * guard, "transports" below); 0 does not. */
  uint64_t guard;
} bp_group_options;
#define BP_GROUP_OPTIONS_SIZE_V1_0 BP_STRUCT_SIZE(bp_group_options, policy)
#define BP_GROUP_OPTIONS_SIZE_V1_4 BP_STRUCT_SIZE(bp_group_options, on_unsupported)
#define BP_GROUP_OPTIONS_SIZE_V1_5 BP_STRUCT_SIZE(bp_group_options, local_first)
#define BP_GROUP_OPTIONS_SIZE_V1_6 BP_STRUCT_SIZE(bp_group_options, guard)

/* Since 1.5: how many kinds of a staged group run locally first
 * (bp_local_first): 0 when every rank is staged, or for NULL. */
BP_API size_t bp_group_local_kinds(const bp_group *group);

/* ranks[r] is rank r; a device may appear once. `options` may be NULL. */
BP_API bp_error *bp_group_create(bp_host *host, bp_device *const *ranks, size_t rank_count,
                                 const bp_group_options *options, bp_group **out);
BP_API size_t bp_group_size(const bp_group *group);
/* Waits for the group's collectives in flight (their events stay valid,
 * complete, with their outcome), then destroys it. Must not race with
 * another call on the same group. */
BP_API void bp_group_destroy(bp_group *group);

/* Would this run? NULL if yes, else exactly the error the call would
 * return for arguments that are otherwise valid. */
BP_API bp_error *bp_group_check(bp_group *group, bp_collective collective, bp_dtype dtype,
                                bp_reduce_op op);

/* ---- transports (since 1.6) ------------------------------------------- */
/* A transport plugin (the mpi plugin, on Open MPI) carries groups across
 * processes and machines. A group with span BP_SPAN_WORLD runs each
 * collective hierarchically: the ranks in one process work on their own
 * plugin, one exchange per process crosses through the transport on host
 * memory, and the result goes back to the local ranks. Every process must
 * make the same calls on a spanning group in the same order; a process
 * that does not arrive within the transport's timeout makes the others'
 * call return BP_TIMEOUT, and the group is broken from then on (every later
 * call says so). MPI cannot cancel a collective: the exchange that timed
 * out stays in flight, and if the late process calls after all it writes
 * the timed-out call's memory, which must stay allocated until the job ends
 * (or the late process is known to have called). Buffer arrays of a spanning group are indexed by this
 * process's ranks (bp_group_size); a root is a rank of the whole group. */

/* bp_transport_options.flags */
#define BP_TRANSPORT_OPTION_HANDLE 0x1u /* `handle` is the application's communicator */

typedef struct bp_transport_options {
  size_t struct_size;
  const void *next;
  const char *plugin;       /* the transport's name, e.g. "mpi" */
  const char *options_json; /* the transport's own options as a JSON object; NULL: {} */
  /* How long a call waits for the other processes; 0: 60 s; negative: no limit. */
  int64_t timeout_ns;
  uint32_t flags; /* BP_TRANSPORT_OPTION_* */
  /* With BP_TRANSPORT_OPTION_HANDLE: the communicator an application that
   * initialised MPI itself hands over, as MPI_Comm_c2f(comm); else the
   * transport uses its whole world (MPI_COMM_WORLD). Either way it works on
   * its own duplicate. */
  int64_t handle;
} bp_transport_options;
#define BP_TRANSPORT_OPTIONS_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_options, handle)

/* Open the host's transport (one per host): PLUGIN_NOT_FOUND when no
 * loaded plugin provides it, PLUGIN_INIT when its library cannot start,
 * INVALID_ARGUMENT when the host has one open already. */
BP_API bp_error *bp_host_open_transport(bp_host *host, const bp_transport_options *options);

typedef struct bp_transport_facts {
  size_t struct_size;
  void *next;
  const char *plugin;  /* "" when the host has no transport */
  const char *library; /* e.g. "Open MPI v4.1.4, package: Debian OpenMPI, ..." */
  const char *details; /* e.g. "thread level MPI_THREAD_MULTIPLE, initialised by the mpi plugin" */
  uint32_t process_index;
  uint32_t process_count; /* 1 when the host has no transport */
  int64_t timeout_ns;
} bp_transport_facts;
#define BP_TRANSPORT_FACTS_SIZE_V1_6 BP_STRUCT_SIZE(bp_transport_facts, timeout_ns)
/* Strings live as long as the host. */
BP_API bp_error *bp_host_transport(const bp_host *host, bp_transport_facts *out);

typedef struct bp_group_span_info {
  size_t struct_size;
  void *next;
  uint64_t global_size;   /* ranks in every process; bp_group_size for a group of one process */
  uint64_t first_rank;    /* this process's first rank: its ranks are first_rank .. + local_size - 1 */
  uint64_t local_size;    /* bp_group_size */
  uint32_t process_index; /* 0 for a group of one process */
  uint32_t process_count; /* 1 for a group of one process */
  uint32_t broken;        /* 1 once a call timed out: every later call is refused */
  uint32_t guard;         /* the mismatch guard is on */
} bp_group_span_info;
#define BP_GROUP_SPAN_INFO_SIZE_V1_6 BP_STRUCT_SIZE(bp_group_span_info, guard)
BP_API bp_error *bp_group_get_span(const bp_group *group, bp_group_span_info *out);

/* ---- fleets ------------------------------------------------------------ */
/* A fleet file (JSON, configs/schema.json) names devices, groups them and
 * describes a workload. Loading one is all or nothing: it is validated in
 * two stages, each reporting every problem it finds — (a) the JSON Schema,
 * (b) meaning (unknown or duplicate names, indices past what a plugin
 * enumerates, kinds no plugin provides, workloads a group cannot run) —
 * and on any problem the host is left as it was (plugins found in the
 * fleet's plugin_dirs stay loaded). The error's code is the first
 * problem's; every problem is a bp_error of its own (bp_error_problem),
 * with fields "file", "pointer" (a JSON pointer such as /devices/2/kind),
 * "value" (the offending value, as JSON) and "reason", and "hint" where
 * there is one ("did you mean 'cpu'?"). Relative paths resolve against
 * the fleet file's own folder. */

/* Create a host for a fleet file: the fleet's plugin_dirs are searched
 * first, the devices' options reach their plugins before devices are
 * enumerated, then the fleet is loaded. `options` may be NULL. */
BP_API bp_error *bp_host_create_from_fleet_file(const char *path, const bp_host_options *options,
                                                bp_host **out);
/* Load a fleet into an existing host. A device entry's options must match
 * what its kind was configured with (else use bp_host_create_from_fleet_file). */
BP_API bp_error *bp_host_load_fleet_file(bp_host *host, const char *path);
/* The same from text; relative paths resolve against the working directory
 * and messages call the text "<text>". */
BP_API bp_error *bp_host_load_fleet_text(bp_host *host, const char *json, size_t length);

/* A group the fleet created, by name. The group belongs to the host:
 * bp_group_destroy on it does nothing. */
BP_API bp_error *bp_host_find_group(bp_host *host, const char *name, bp_group **out);
BP_API size_t bp_host_group_count(const bp_host *host);
BP_API bp_group *bp_host_group(const bp_host *host, size_t index); /* NULL when out of range */
BP_API const char *bp_group_name(const bp_group *group);           /* "" when unnamed */
BP_API bp_device *bp_group_device(const bp_group *group, size_t rank); /* NULL when out of range */
/* Since 1.1: how the group's plugin moves data between its ranks, one line
 * (e.g. "through host memory: the devices are on different OpenCL
 * platforms"); "" when the plugin says nothing. Valid while the group lives. */
BP_API const char *bp_group_route(const bp_group *group);

/* Since 1.4: how a group's collectives ran. Each count only grows; a call
 * is counted once it started (native, staged) or was refused for what the
 * group cannot run (UNSUPPORTED_*, MIXED_DEVICE_KINDS, a size over a
 * limit); calls refused for their arguments are not counted. */
typedef struct bp_group_counters {
  size_t struct_size;
  void *next;            /* writable: the caller's chain of extensions */
  uint64_t native_calls; /* run by the group's own plugin */
  uint64_t staged_calls; /* run through host memory (a mixed group, or on_unsupported "stage") */
  uint64_t refused_calls;
  uint64_t staged_bytes; /* copied between the devices and host memory by staged calls */
} bp_group_counters;
#define BP_GROUP_COUNTERS_SIZE_V1_4 BP_STRUCT_SIZE(bp_group_counters, staged_bytes)
BP_API bp_error *bp_group_get_counters(const bp_group *group, bp_group_counters *out);

/* Since 1.4: which way a request would run on the group, or the error the
 * call would return (as bp_group_check). */
typedef enum bp_group_path {
  BP_PATH_NATIVE = 0, /* the group's plugin runs it */
  BP_PATH_STAGED = 1, /* through host memory */
  /* Since 1.6: across processes, the local ranks on the group's plugin and
   * one exchange per process through the host's transport */
  BP_PATH_ACROSS_PROCESSES = 2,
  BP_PATH_MAX_ENUM = 0x7FFFFFFF
} bp_group_path;
BP_API bp_error *bp_group_plan(bp_group *group, bp_collective collective, bp_dtype dtype, bp_reduce_op op,
                               bp_group_path *out);

/* in_place of a workload */
#define BP_WORKLOAD_OUT_OF_PLACE 0x1u
#define BP_WORKLOAD_IN_PLACE 0x2u

/* One entry of the fleet's workload, with sizes expanded. */
typedef struct bp_workload_info {
  size_t struct_size;
  void *next; /* writable (1.2): the caller's chain of extensions; the library skips unknown types */
  bp_group *group;       /* borrowed from the host */
  uint32_t collective;   /* bp_collective */
  uint32_t dtype;        /* bp_dtype */
  uint32_t reduce_op;    /* bp_reduce_op */
  uint32_t root;
  const uint64_t *sizes; /* bytes, as nccl-tests counts them: a rank's largest buffer */
  size_t size_count;
  uint32_t iterations;
  uint32_t warmup;
  uint32_t modes;        /* BP_WORKLOAD_OUT_OF_PLACE | BP_WORKLOAD_IN_PLACE */
  bool check;            /* verify results against a reference */
} bp_workload_info;
#define BP_WORKLOAD_INFO_SIZE_V1_0 BP_STRUCT_SIZE(bp_workload_info, check)

BP_API size_t bp_host_workload_count(const bp_host *host);
BP_API bp_error *bp_host_workload(const bp_host *host, size_t index, bp_workload_info *out);

/* Parse a size expression of the fleet file: "8B..64MiB x4" (from, to,
 * times 4 each step; "+1MiB" adds instead), or one size "4KiB". Units B,
 * K/KiB, M/MiB, G/GiB are powers of 1024. Writes up to `capacity` sizes and
 * the total count to *count. BP_CONFIG with the reason when it does not parse. */
BP_API bp_error *bp_parse_sizes(const char *text, uint64_t *sizes, size_t capacity, size_t *count);

/* ---- logging ----------------------------------------------------------- */
/* Log lines go to stderr, filtered by BACKPLANE_LOG ("warn", "debug",
 * "loader:debug,dispatch:info"; default warn). Both settings are process-wide. */
typedef void (*bp_log_sink)(void *context, int32_t level, const char *category, const char *message);
/* Send log lines to `sink` instead of stderr (NULL: back to stderr). */
BP_API void bp_log_set_sink(bp_log_sink sink, void *context);
/* Replace the BACKPLANE_LOG setting; false (and no change) if it does not parse. */
BP_API bool bp_log_configure(const char *spec);

/* ---- collectives ------------------------------------------------------- */
/* Buffers are indexed by rank; see types.h for each collective's counts and
 * which entries may be NULL. recv[r] == send[r] means in place. Blocking
 * calls return when the collective completed; _async calls return an event
 * once it started. */

BP_API bp_error *bp_all_reduce(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                               size_t count, bp_dtype dtype, bp_reduce_op op);
BP_API bp_error *bp_reduce(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                           size_t count, bp_dtype dtype, bp_reduce_op op, uint32_t root);
BP_API bp_error *bp_broadcast(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                              size_t count, bp_dtype dtype, uint32_t root);
BP_API bp_error *bp_all_gather(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                               size_t count, bp_dtype dtype);
BP_API bp_error *bp_reduce_scatter(bp_group *group, bp_buffer *const *send,
                                   bp_buffer *const *recv, size_t count, bp_dtype dtype,
                                   bp_reduce_op op);
BP_API bp_error *bp_gather(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                           size_t count, bp_dtype dtype, uint32_t root);
BP_API bp_error *bp_scatter(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                            size_t count, bp_dtype dtype, uint32_t root);
BP_API bp_error *bp_all_to_all(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                               size_t count, bp_dtype dtype);
BP_API bp_error *bp_barrier(bp_group *group);

/* Any collective through one argument struct; the calls above are this. */
typedef struct bp_collective_request {
  size_t struct_size;
  const void *next;
  uint32_t collective; /* bp_collective */
  uint32_t dtype;      /* bp_dtype */
  uint32_t reduce_op;  /* bp_reduce_op */
  uint32_t root;
  size_t count;
  bp_buffer *const *send; /* group-size entries, borrowed for the call */
  bp_buffer *const *recv;
} bp_collective_request;
#define BP_COLLECTIVE_REQUEST_SIZE_V1_0 BP_STRUCT_SIZE(bp_collective_request, recv)

BP_API bp_error *bp_run_collective(bp_group *group, const bp_collective_request *request);
BP_API bp_error *bp_run_collective_async(bp_group *group, const bp_collective_request *request,
                                         bp_event **out);

BP_API bp_error *bp_all_reduce_async(bp_group *group, bp_buffer *const *send,
                                     bp_buffer *const *recv, size_t count, bp_dtype dtype,
                                     bp_reduce_op op, bp_event **out);
BP_API bp_error *bp_reduce_async(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                                 size_t count, bp_dtype dtype, bp_reduce_op op, uint32_t root,
                                 bp_event **out);
BP_API bp_error *bp_broadcast_async(bp_group *group, bp_buffer *const *send,
                                    bp_buffer *const *recv, size_t count, bp_dtype dtype,
                                    uint32_t root, bp_event **out);
BP_API bp_error *bp_all_gather_async(bp_group *group, bp_buffer *const *send,
                                     bp_buffer *const *recv, size_t count, bp_dtype dtype,
                                     bp_event **out);
BP_API bp_error *bp_reduce_scatter_async(bp_group *group, bp_buffer *const *send,
                                         bp_buffer *const *recv, size_t count, bp_dtype dtype,
                                         bp_reduce_op op, bp_event **out);
BP_API bp_error *bp_gather_async(bp_group *group, bp_buffer *const *send, bp_buffer *const *recv,
                                 size_t count, bp_dtype dtype, uint32_t root, bp_event **out);
BP_API bp_error *bp_scatter_async(bp_group *group, bp_buffer *const *send,
                                  bp_buffer *const *recv, size_t count, bp_dtype dtype,
                                  uint32_t root, bp_event **out);
BP_API bp_error *bp_all_to_all_async(bp_group *group, bp_buffer *const *send,
                                     bp_buffer *const *recv, size_t count, bp_dtype dtype,
                                     bp_event **out);
BP_API bp_error *bp_barrier_async(bp_group *group, bp_event **out);

/* Wait up to timeout_ns (negative: no limit). BP_TIMEOUT leaves the event
 * in flight; wait again or destroy it. Waiting on a completed event returns
 * its outcome again. */
BP_API bp_error *bp_event_wait(bp_event *event, int64_t timeout_ns);
/* true once complete (successfully or not); bp_event_wait(e, 0) then gives
 * the outcome. */
BP_API bool bp_event_test(bp_event *event);
/* An event still in flight is waited for first (without limit), so the
 * buffers its collective uses may be freed once this returns. */
BP_API void bp_event_destroy(bp_event *event);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BACKPLANE_BACKPLANE_H */
