/* Backplane: the vocabulary shared by both stable C ABIs (plugin.h for plugin
 * authors, backplane.h for applications). Every value here is frozen once
 * released: new values are appended, none is renumbered or removed. */
#ifndef BACKPLANE_TYPES_H
#define BACKPLANE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Structured error codes. Stable: the numbers are part of the ABI.
 * Every enum ends with a _MAX_ENUM sentinel (as Vulkan's do) so that any
 * 32-bit value is a valid value of its type in C++ too: an application may
 * pass an out-of-range value, and the host must be able to read it to
 * refuse it with BP_INVALID_ARGUMENT. */
typedef enum bp_code {
  BP_OK = 0,
  BP_INVALID_ARGUMENT = 1,
  BP_UNSUPPORTED_DEVICE = 2,
  BP_UNSUPPORTED_COLLECTIVE = 3,
  BP_UNSUPPORTED_DTYPE = 4,
  BP_UNSUPPORTED_REDUCE_OP = 5,
  BP_MIXED_DEVICE_KINDS = 6,
  BP_NESTED_LAYER = 7,
  BP_PLUGIN_NOT_FOUND = 8,
  BP_PLUGIN_LOAD = 9,
  BP_PLUGIN_ABI = 10,
  BP_PLUGIN_INIT = 11,
  BP_PLUGIN_CONFLICT = 12,
  BP_CONFIG = 13,
  BP_DEVICE_FAILURE = 14,
  BP_OUT_OF_MEMORY = 15,
  BP_TIMEOUT = 16,
  BP_INTERNAL = 17,
  BP_CODE_MAX_ENUM = 0x7FFFFFFF
} bp_code;
#define BP_CODE_COUNT 18

/* Element types. Bit (1u << type) of a dtype mask stands for the type. */
typedef enum bp_dtype {
  BP_F16 = 0,
  BP_BF16 = 1,
  BP_F32 = 2,
  BP_F64 = 3,
  BP_I8 = 4,
  BP_U8 = 5,
  BP_I32 = 6,
  BP_U32 = 7,
  BP_I64 = 8,
  BP_U64 = 9,
  BP_DTYPE_MAX_ENUM = 0x7FFFFFFF
} bp_dtype;
#define BP_DTYPE_COUNT 10

/* Reduction operators. Bit (1u << op) of an op mask stands for the op.
 * BP_AVG is the sum divided by the group size. */
typedef enum bp_reduce_op {
  BP_SUM = 0,
  BP_PROD = 1,
  BP_MIN = 2,
  BP_MAX = 3,
  BP_AVG = 4,
  BP_REDUCE_OP_MAX_ENUM = 0x7FFFFFFF
} bp_reduce_op;
#define BP_REDUCE_OP_COUNT 5

/* Collectives. Element counts follow NCCL's conventions, with n ranks:
 *   all_reduce      send: count        recv: count
 *   reduce          send: count        recv: count (root only)
 *   broadcast       send: count (root) recv: count
 *   all_gather      send: count        recv: count * n (rank r's block at r)
 *   reduce_scatter  send: count * n    recv: count (rank r gets block r)
 *   gather          send: count        recv: count * n (root only)
 *   scatter         send: count * n (root only)  recv: count
 *   all_to_all      send: count * n    recv: count * n (block j goes to rank j)
 *   barrier         no buffers
 * In place: send[r] == recv[r], which only a rank passing both can do; for
 * the rooted collectives that is the root alone. For all_gather and gather
 * (at the root) the rank's own contribution is then read from block r of
 * recv; for reduce_scatter and scatter (at the root) the result is written
 * to block r of send. */
typedef enum bp_collective {
  BP_ALL_REDUCE = 0,
  BP_REDUCE = 1,
  BP_BROADCAST = 2,
  BP_ALL_GATHER = 3,
  BP_REDUCE_SCATTER = 4,
  BP_GATHER = 5,
  BP_SCATTER = 6,
  BP_ALL_TO_ALL = 7,
  BP_BARRIER = 8,
  BP_COLLECTIVE_MAX_ENUM = 0x7FFFFFFF
} bp_collective;
#define BP_COLLECTIVE_COUNT 9

/* The table above as code, for the host, plugins and tests alike: which of
 * a rank's buffers a collective uses, and how many blocks of `count`
 * elements each must hold (1, or `ranks` = n). `collective` may be any
 * value: barrier and values out of range use neither buffer. A value type
 * returned by an inline function, never passed across either ABI. */
typedef struct bp_rank_buffers {
  bool uses_send, uses_recv;
  size_t send_blocks, recv_blocks;
} bp_rank_buffers;

static inline bp_rank_buffers bp_rank_buffers_of(uint32_t collective, size_t ranks, bool is_root) {
  bp_rank_buffers use = {false, false, 1, 1};
  switch (collective) {
    case BP_ALL_REDUCE: use.uses_send = use.uses_recv = true; break;
    case BP_REDUCE: use.uses_send = true; use.uses_recv = is_root; break;
    case BP_BROADCAST: use.uses_send = is_root; use.uses_recv = true; break;
    case BP_ALL_GATHER: use.uses_send = use.uses_recv = true; use.recv_blocks = ranks; break;
    case BP_REDUCE_SCATTER: use.uses_send = use.uses_recv = true; use.send_blocks = ranks; break;
    case BP_GATHER: use.uses_send = true; use.uses_recv = is_root; use.recv_blocks = ranks; break;
    case BP_SCATTER: use.uses_send = is_root; use.uses_recv = true; use.send_blocks = ranks; break;
    case BP_ALL_TO_ALL: use.uses_send = use.uses_recv = true; use.send_blocks = use.recv_blocks = ranks; break;
    default: use.send_blocks = use.recv_blocks = 0; break;
  }
  return use;
}

/* Capability flags. */
#define BP_CAPABILITY_IN_PLACE 0x1u     /* send[r] == recv[r] accepted */
#define BP_CAPABILITY_OUT_OF_PLACE 0x2u /* distinct send and recv accepted */

/* Device flags. */
#define BP_DEVICE_HOST_ADDRESSABLE 0x1u /* buffers may wrap host memory */
/* Since plugin ABI 1.5: the device computes on the host's own processors
 * in host memory (an OpenCL or Vulkan device of type CPU: PoCL's pthread
 * device, lavapipe). Work among such devices costs what staging through
 * host memory costs, so a staged group does not run it locally first
 * (bp_local_first). */
#define BP_DEVICE_ON_HOST_CORES 0x2u

/* The most layers one chain over a device may hold (1.3: plugin.h and
 * backplane.h, "layers"). */
#define BP_LAYER_CHAIN_MAX 8

/* Size of a struct up to and including FIELD: what a reader compares
 * struct_size against to know whether FIELD was sent. */
#define BP_STRUCT_SIZE(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* The header of every typed extension (since 1.2): what a `next` points
 * at. `type` is a BP_EXTENSION_* value from the registry below; a reader
 * that does not know it skips the extension (struct_size says how long it
 * is) and follows its `next`. Chains are short: a host reads at most
 * BP_EXTENSION_CHAIN_MAX links and ignores the rest. */
typedef struct bp_extension_header {
  size_t struct_size;
  void *next;
  uint32_t type;
} bp_extension_header;
#define BP_EXTENSION_HEADER_SIZE_V1_2 BP_STRUCT_SIZE(bp_extension_header, type)
#define BP_EXTENSION_CHAIN_MAX 64

/* Registry of extension type ids, shared by both ABIs (plugin.h and
 * backplane.h chain the same header). Ids are never reused; 0 is no type. New ids are
 * appended here with the minor that introduced them. None is defined by
 * 1.2 itself: the registry exists so that the layer and transport tables
 * (and later extensions) have a place that every reader already skips. */
#define BP_EXTENSION_NONE 0u
/* 1.3: bp_layer_table (plugin.h), hung off bp_plugin_descriptor.next. */
#define BP_EXTENSION_LAYER_TABLE 1u
/* 1.6: bp_transport_table (plugin.h), hung off bp_plugin_descriptor.next. */
#define BP_EXTENSION_TRANSPORT_TABLE 2u

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BACKPLANE_TYPES_H */
