/* The layouts of the structs of every released minor (1.0, 1.1, 1.2, 1.3, 1.4),
 * frozen as literal numbers for x86-64 (LP64): a change to a released
 * struct must break this list. One X-macro, expanded by frozen_layout.c
 * (checked by the C compiler) and by abi_test.cpp (checked by the C++
 * compiler). Never edit a SIZE_V1_x or FIELD number here; a later minor
 * appends its fields and its SIZE_V1_x macro as new lines, and only updates
 * the SIZEOF line of a struct it grew. (abi_guard.sh checks the same against
 * the release's own headers, with abidiff.) */
#ifndef BACKPLANE_TESTS_FROZEN_LAYOUT_H
#define BACKPLANE_TESTS_FROZEN_LAYOUT_H

#include <stddef.h>

/* SIZE_V1_0(macro, bytes)  a BP_*_SIZE_V1_x macro (of any minor)
 * SIZEOF(type, bytes)      sizeof(type)
 * FIELD(type, field, byte) offsetof(type, field) */
#define BP_FROZEN_LAYOUT(SIZE_V1_0, SIZEOF, FIELD)        \
  /* ---- plugin.h ---- */                                \
  SIZE_V1_0(BP_HOST_SERVICES_SIZE_V1_0, 40)               \
  SIZEOF(bp_host_services, 64)                            \
  FIELD(bp_host_services, struct_size, 0)                 \
  FIELD(bp_host_services, next, 8)                        \
  FIELD(bp_host_services, report_error, 16)               \
  FIELD(bp_host_services, log, 24)                        \
  FIELD(bp_host_services, host_context, 32)               \
  SIZE_V1_0(BP_HOST_SERVICES_SIZE_V1_3, 64)               \
  FIELD(bp_host_services, describe_device, 40)            \
  FIELD(bp_host_services, describe_buffer, 48)            \
  FIELD(bp_host_services, read_buffer, 56)                \
  SIZE_V1_0(BP_CAPABILITY_SIZE_V1_0, 36)                  \
  SIZEOF(bp_capability, 48)                               \
  FIELD(bp_capability, struct_size, 0)                    \
  FIELD(bp_capability, next, 8)                           \
  FIELD(bp_capability, device_kind, 16)                   \
  FIELD(bp_capability, collective, 20)                    \
  FIELD(bp_capability, dtypes, 24)                        \
  FIELD(bp_capability, reduce_ops, 28)                    \
  FIELD(bp_capability, flags, 32)                         \
  SIZE_V1_0(BP_CAPABILITY_SIZE_V1_2, 48)                  \
  FIELD(bp_capability, max_bytes, 40)                     \
  SIZE_V1_0(BP_PLUGIN_DEVICE_INFO_SIZE_V1_0, 64)          \
  SIZEOF(bp_plugin_device_info, 88)                       \
  FIELD(bp_plugin_device_info, struct_size, 0)            \
  FIELD(bp_plugin_device_info, next, 8)                   \
  FIELD(bp_plugin_device_info, name, 16)                  \
  FIELD(bp_plugin_device_info, description, 24)           \
  FIELD(bp_plugin_device_info, flags, 32)                 \
  FIELD(bp_plugin_device_info, memory_bytes, 40)          \
  FIELD(bp_plugin_device_info, capabilities, 48)          \
  FIELD(bp_plugin_device_info, capability_count, 56)      \
  SIZE_V1_0(BP_PLUGIN_DEVICE_INFO_SIZE_V1_1, 88)          \
  FIELD(bp_plugin_device_info, property_keys, 64)         \
  FIELD(bp_plugin_device_info, property_values, 72)       \
  FIELD(bp_plugin_device_info, property_count, 80)        \
  SIZE_V1_0(BP_PLUGIN_KIND_INFO_SIZE_V1_1, 24)            \
  SIZEOF(bp_plugin_kind_info, 24)                         \
  FIELD(bp_plugin_kind_info, status, 16)                  \
  SIZE_V1_0(BP_PLUGIN_COMM_INFO_SIZE_V1_1, 24)            \
  SIZEOF(bp_plugin_comm_info, 24)                         \
  FIELD(bp_plugin_comm_info, route, 16)                   \
  SIZE_V1_0(BP_COLLECTIVE_ARGS_SIZE_V1_0, 64)             \
  SIZEOF(bp_collective_args, 72)                          \
  FIELD(bp_collective_args, struct_size, 0)               \
  FIELD(bp_collective_args, next, 8)                      \
  FIELD(bp_collective_args, collective, 16)               \
  FIELD(bp_collective_args, dtype, 20)                    \
  FIELD(bp_collective_args, reduce_op, 24)                \
  FIELD(bp_collective_args, root, 28)                     \
  FIELD(bp_collective_args, count, 32)                    \
  FIELD(bp_collective_args, rank_count, 40)               \
  FIELD(bp_collective_args, send, 48)                     \
  FIELD(bp_collective_args, recv, 56)                     \
  SIZE_V1_0(BP_COLLECTIVE_ARGS_SIZE_V1_2, 68)             \
  FIELD(bp_collective_args, flags, 64)                    \
  SIZE_V1_0(BP_PLUGIN_FUNCTIONS_SIZE_V1_0, 136)           \
  SIZEOF(bp_plugin_functions, 160)                        \
  FIELD(bp_plugin_functions, struct_size, 0)              \
  FIELD(bp_plugin_functions, next, 8)                     \
  FIELD(bp_plugin_functions, destroy, 16)                 \
  FIELD(bp_plugin_functions, configure, 24)               \
  FIELD(bp_plugin_functions, device_count, 32)            \
  FIELD(bp_plugin_functions, device_info, 40)             \
  FIELD(bp_plugin_functions, buffer_create, 48)           \
  FIELD(bp_plugin_functions, buffer_wrap_host, 56)        \
  FIELD(bp_plugin_functions, buffer_destroy, 64)          \
  FIELD(bp_plugin_functions, buffer_write, 72)            \
  FIELD(bp_plugin_functions, buffer_read, 80)             \
  FIELD(bp_plugin_functions, comm_create, 88)             \
  FIELD(bp_plugin_functions, comm_destroy, 96)            \
  FIELD(bp_plugin_functions, collective_start, 104)       \
  FIELD(bp_plugin_functions, request_test, 112)           \
  FIELD(bp_plugin_functions, request_wait, 120)           \
  FIELD(bp_plugin_functions, request_release, 128)        \
  SIZE_V1_0(BP_PLUGIN_FUNCTIONS_SIZE_V1_1, 152)           \
  FIELD(bp_plugin_functions, kind_info, 136)              \
  FIELD(bp_plugin_functions, comm_info, 144)              \
  SIZE_V1_0(BP_PLUGIN_FUNCTIONS_SIZE_V1_4, 160)           \
  FIELD(bp_plugin_functions, buffer_host_memory, 152)     \
  SIZE_V1_0(BP_PLUGIN_DESCRIPTOR_SIZE_V1_0, 80)           \
  SIZEOF(bp_plugin_descriptor, 80)                        \
  FIELD(bp_plugin_descriptor, struct_size, 0)             \
  FIELD(bp_plugin_descriptor, next, 8)                    \
  FIELD(bp_plugin_descriptor, abi_major, 16)              \
  FIELD(bp_plugin_descriptor, abi_minor, 20)              \
  FIELD(bp_plugin_descriptor, name, 24)                   \
  FIELD(bp_plugin_descriptor, version, 32)                \
  FIELD(bp_plugin_descriptor, device_kinds, 40)           \
  FIELD(bp_plugin_descriptor, device_kind_count, 48)      \
  FIELD(bp_plugin_descriptor, capabilities, 56)           \
  FIELD(bp_plugin_descriptor, capability_count, 64)       \
  FIELD(bp_plugin_descriptor, functions, 72)              \
  SIZE_V1_0(BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0, 56)           \
  SIZEOF(bp_plugin_entry_args, 64)                        \
  FIELD(bp_plugin_entry_args, struct_size, 0)             \
  FIELD(bp_plugin_entry_args, next, 8)                    \
  FIELD(bp_plugin_entry_args, host_abi_major, 16)         \
  FIELD(bp_plugin_entry_args, host_abi_minor, 20)         \
  FIELD(bp_plugin_entry_args, services, 24)               \
  FIELD(bp_plugin_entry_args, sink, 32)                   \
  FIELD(bp_plugin_entry_args, descriptor, 40)             \
  FIELD(bp_plugin_entry_args, state, 48)                  \
  SIZE_V1_0(BP_PLUGIN_ENTRY_ARGS_SIZE_V1_2, 64)           \
  FIELD(bp_plugin_entry_args, options_json, 56)           \
  /* ---- types.h ---- */                                 \
  SIZE_V1_0(BP_EXTENSION_HEADER_SIZE_V1_2, 20)            \
  SIZEOF(bp_extension_header, 24)                         \
  FIELD(bp_extension_header, struct_size, 0)              \
  FIELD(bp_extension_header, next, 8)                     \
  FIELD(bp_extension_header, type, 16)                    \
  /* ---- backplane.h ---- */                             \
  SIZE_V1_0(BP_HOST_OPTIONS_SIZE_V1_0, 48)                \
  SIZEOF(bp_host_options, 56)                             \
  FIELD(bp_host_options, struct_size, 0)                  \
  FIELD(bp_host_options, next, 8)                         \
  FIELD(bp_host_options, plugin_dirs, 16)                 \
  FIELD(bp_host_options, plugin_dir_count, 24)            \
  FIELD(bp_host_options, flags, 32)                       \
  FIELD(bp_host_options, plugin_options_json, 40)         \
  SIZE_V1_0(BP_HOST_OPTIONS_SIZE_V1_2, 56)                \
  FIELD(bp_host_options, plugin_pins_json, 48)            \
  SIZE_V1_0(BP_PLUGIN_INFO_SIZE_V1_0, 64)                 \
  SIZEOF(bp_plugin_info, 104)                             \
  FIELD(bp_plugin_info, struct_size, 0)                   \
  FIELD(bp_plugin_info, next, 8)                          \
  FIELD(bp_plugin_info, name, 16)                         \
  FIELD(bp_plugin_info, version, 24)                      \
  FIELD(bp_plugin_info, abi_major, 32)                    \
  FIELD(bp_plugin_info, abi_minor, 36)                    \
  FIELD(bp_plugin_info, file, 40)                         \
  FIELD(bp_plugin_info, device_kinds, 48)                 \
  FIELD(bp_plugin_info, device_kind_count, 56)            \
  SIZE_V1_0(BP_PLUGIN_INFO_SIZE_V1_1, 72)                 \
  FIELD(bp_plugin_info, kind_status, 64)                  \
  SIZE_V1_0(BP_PLUGIN_INFO_SIZE_V1_2, 80)                 \
  FIELD(bp_plugin_info, sha256, 72)                       \
  SIZE_V1_0(BP_PLUGIN_INFO_SIZE_V1_3, 96)                 \
  FIELD(bp_plugin_info, layer_kinds, 80)                  \
  FIELD(bp_plugin_info, layer_kind_count, 88)             \
  SIZE_V1_0(BP_PLUGIN_INFO_SIZE_V1_6, 104)                \
  FIELD(bp_plugin_info, transport, 96)                    \
  SIZE_V1_0(BP_DEVICE_INFO_SIZE_V1_0, 72)                 \
  SIZEOF(bp_device_info, 136)                             \
  FIELD(bp_device_info, struct_size, 0)                   \
  FIELD(bp_device_info, next, 8)                          \
  FIELD(bp_device_info, name, 16)                         \
  FIELD(bp_device_info, kind, 24)                         \
  FIELD(bp_device_info, index, 32)                        \
  FIELD(bp_device_info, plugin, 40)                       \
  FIELD(bp_device_info, description, 48)                  \
  FIELD(bp_device_info, flags, 56)                        \
  FIELD(bp_device_info, memory_bytes, 64)                 \
  SIZE_V1_0(BP_DEVICE_INFO_SIZE_V1_1, 96)                 \
  FIELD(bp_device_info, property_keys, 72)                \
  FIELD(bp_device_info, property_values, 80)              \
  FIELD(bp_device_info, property_count, 88)               \
  SIZE_V1_0(BP_DEVICE_INFO_SIZE_V1_3, 136)                \
  FIELD(bp_device_info, layers, 96)                       \
  FIELD(bp_device_info, layer_count, 104)                 \
  FIELD(bp_device_info, over, 112)                        \
  FIELD(bp_device_info, base, 120)                        \
  FIELD(bp_device_info, chain, 128)                       \
  SIZE_V1_0(BP_CAPABILITY_INFO_SIZE_V1_0, 48)             \
  SIZEOF(bp_capability_info, 56)                          \
  FIELD(bp_capability_info, struct_size, 0)               \
  FIELD(bp_capability_info, next, 8)                      \
  FIELD(bp_capability_info, device_kind, 16)              \
  FIELD(bp_capability_info, plugin, 24)                   \
  FIELD(bp_capability_info, collective, 32)               \
  FIELD(bp_capability_info, dtypes, 36)                   \
  FIELD(bp_capability_info, reduce_ops, 40)               \
  FIELD(bp_capability_info, flags, 44)                    \
  SIZE_V1_0(BP_CAPABILITY_INFO_SIZE_V1_2, 56)             \
  FIELD(bp_capability_info, max_bytes, 48)                \
  SIZE_V1_0(BP_GROUP_OPTIONS_SIZE_V1_0, 28)               \
  SIZEOF(bp_group_options, 64)                            \
  FIELD(bp_group_options, struct_size, 0)                 \
  FIELD(bp_group_options, next, 8)                        \
  FIELD(bp_group_options, name, 16)                       \
  FIELD(bp_group_options, policy, 24)                     \
  SIZE_V1_0(BP_GROUP_OPTIONS_SIZE_V1_4, 40)               \
  FIELD(bp_group_options, on_unsupported, 32)             \
  SIZE_V1_0(BP_GROUP_OPTIONS_SIZE_V1_5, 48)               \
  FIELD(bp_group_options, local_first, 40)                \
  SIZE_V1_0(BP_GROUP_OPTIONS_SIZE_V1_6, 64)               \
  FIELD(bp_group_options, span, 48)                       \
  FIELD(bp_group_options, guard, 56)                      \
  SIZEOF(bp_transport_options, 56)                        \
  SIZE_V1_0(BP_TRANSPORT_OPTIONS_SIZE_V1_6, 56)           \
  FIELD(bp_transport_options, plugin, 16)                 \
  FIELD(bp_transport_options, options_json, 24)           \
  FIELD(bp_transport_options, timeout_ns, 32)             \
  FIELD(bp_transport_options, flags, 40)                  \
  FIELD(bp_transport_options, handle, 48)                 \
  SIZEOF(bp_transport_facts, 56)                          \
  SIZE_V1_0(BP_TRANSPORT_FACTS_SIZE_V1_6, 56)             \
  FIELD(bp_transport_facts, plugin, 16)                   \
  FIELD(bp_transport_facts, library, 24)                  \
  FIELD(bp_transport_facts, details, 32)                  \
  FIELD(bp_transport_facts, process_index, 40)            \
  FIELD(bp_transport_facts, process_count, 44)            \
  FIELD(bp_transport_facts, timeout_ns, 48)               \
  SIZEOF(bp_group_span_info, 56)                          \
  SIZE_V1_0(BP_GROUP_SPAN_INFO_SIZE_V1_6, 56)             \
  FIELD(bp_group_span_info, global_size, 16)              \
  FIELD(bp_group_span_info, first_rank, 24)               \
  FIELD(bp_group_span_info, local_size, 32)               \
  FIELD(bp_group_span_info, process_index, 40)            \
  FIELD(bp_group_span_info, process_count, 44)            \
  FIELD(bp_group_span_info, broken, 48)                   \
  FIELD(bp_group_span_info, guard, 52)                    \
  SIZE_V1_0(BP_GROUP_COUNTERS_SIZE_V1_4, 48)              \
  SIZEOF(bp_group_counters, 48)                           \
  FIELD(bp_group_counters, struct_size, 0)                \
  FIELD(bp_group_counters, next, 8)                       \
  FIELD(bp_group_counters, native_calls, 16)              \
  FIELD(bp_group_counters, staged_calls, 24)              \
  FIELD(bp_group_counters, refused_calls, 32)             \
  FIELD(bp_group_counters, staged_bytes, 40)              \
  SIZE_V1_0(BP_WORKLOAD_INFO_SIZE_V1_0, 69)               \
  SIZEOF(bp_workload_info, 72)                            \
  FIELD(bp_workload_info, struct_size, 0)                 \
  FIELD(bp_workload_info, next, 8)                        \
  FIELD(bp_workload_info, group, 16)                      \
  FIELD(bp_workload_info, collective, 24)                 \
  FIELD(bp_workload_info, dtype, 28)                      \
  FIELD(bp_workload_info, reduce_op, 32)                  \
  FIELD(bp_workload_info, root, 36)                       \
  FIELD(bp_workload_info, sizes, 40)                      \
  FIELD(bp_workload_info, size_count, 48)                 \
  FIELD(bp_workload_info, iterations, 56)                 \
  FIELD(bp_workload_info, warmup, 60)                     \
  FIELD(bp_workload_info, modes, 64)                      \
  FIELD(bp_workload_info, check, 68)                      \
  SIZE_V1_0(BP_COLLECTIVE_REQUEST_SIZE_V1_0, 56)          \
  SIZEOF(bp_collective_request, 56)                       \
  FIELD(bp_collective_request, struct_size, 0)            \
  FIELD(bp_collective_request, next, 8)                   \
  FIELD(bp_collective_request, collective, 16)            \
  FIELD(bp_collective_request, dtype, 20)                 \
  FIELD(bp_collective_request, reduce_op, 24)             \
  FIELD(bp_collective_request, root, 28)                  \
  FIELD(bp_collective_request, count, 32)                 \
  FIELD(bp_collective_request, send, 40)                  \
  FIELD(bp_collective_request, recv, 48)                  \
  /* ---- enums crossing the ABIs as return and argument types ---- */ \
  SIZEOF(bp_code, 4)                                      \
  SIZEOF(bp_dtype, 4)                                     \
  SIZEOF(bp_reduce_op, 4)                                 \
  SIZEOF(bp_collective, 4)                                \
  SIZEOF(bp_log_level, 4)                                 \
  SIZEOF(bp_group_policy, 4)

/* One measured value, as the C compiler saw it (frozen_layout.c). */
typedef struct bp_frozen_entry {
  const char *what;  /* e.g. "offsetof(bp_capability, flags)" */
  size_t measured;
  size_t frozen;
} bp_frozen_entry;

#ifdef __cplusplus
extern "C" {
#endif
extern const bp_frozen_entry bp_frozen_layout_from_c[];
extern const size_t bp_frozen_layout_from_c_count;
#ifdef __cplusplus
}
#endif

#endif /* BACKPLANE_TESTS_FROZEN_LAYOUT_H */
