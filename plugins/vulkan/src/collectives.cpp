// Communicators, the nine collectives and their requests, in the vulkan
// plugin.
//
// When every rank of a comm is a logical device on one physical device, all
// of a comm's data moves device to device inside one VkDevice. A comm
// across physical devices runs on rank 0's, the other ranks' data copied
// through host memory to stand-in buffers there and back
// (run_across_devices); such calls complete before the start returns. A
// collective is recorded into one command buffer and submitted once (about
// 60 us per submit-and-wait on lavapipe, against ~7 us per recorded
// command): data movement (broadcast, gather, scatter, all_gather,
// all_to_all) is vkCmdCopyBuffer, reductions are dispatches of
// shaders/reduce.comp, which reads every input once and writes every output
// once for any number of ranks, its buffers reached by device address
// through a table in host-visible memory. Where Gpu::texel_buffers says so
// (CPU devices: llvmpipe loads and stores through addresses element by
// element, so a reduction ran at ~0.05x of a copy), the inputs are instead
// uniform texel buffers and the outputs storage texel buffers, four
// elements to a texel, one view per buffer and dispatch, pushed with
// VK_KHR_push_descriptor (the count % 4 elements after the last texel still
// go by address); views live as long as the slot's command buffer
// (destroyed when the slot records its next call). Each submission waits
// for the device's previous one and signals the next value of its timeline
// semaphore (memory.cpp, submit): requests of one comm, and of every comm
// on the device, complete in start order, and each sees what the ones
// before it wrote.
//
// A blocking call (BP_COLLECTIVE_CALLER_WAITS, or a 1.0/1.1 host) waits on
// the timeline once and returns no request. An _async call returns as soon
// as the work is submitted, with a request holding its timeline value:
// request_test reads the counter, request_wait waits on it with the
// timeout. The command buffer and address table of a call in flight stay
// its own ("slots", one per request in flight, created on demand and then
// reused), so several requests may be in flight on one comm. A slot keeps
// what it recorded: a later call of the same shape (collective, element
// type, op, root, count and the same buffers: call_shape) submits it again
// without recording (64 bytes on lavapipe: ~3-5 us less of ~35-60 us).
//
// Cost, with n ranks and B bytes per block (read + written):
//   all_reduce      one dispatch: n*B read, n*B written (CPU devices: a
//                   copy of B, one dispatch of n*B read and B written in
//                   place, and n-1 copies of B; Call::reduce_in_place_and_copy)
//   reduce          one dispatch: n*B read, B written (CPU devices: a copy
//                   of B first, unless the root is in place)
//   reduce_scatter  n dispatches, one per block: n*n*B read, n*B written
//   broadcast, gather, scatter   n copies of B
//   all_gather, all_to_all       n*n copies of B; a rank in place in
//                                all_to_all first copies its n blocks to
//                                scratch (n*B more each way)
// A dispatch covers at most 2^30 elements (with texel inputs, at most the
// largest power of two within maxTexelBufferElements; more go in several), with at
// most min(65535, maxComputeWorkGroupCount[0]) work groups of 256, each
// invocation striding over the elements: nothing is truncated.
#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>
#include <memory>

#include "capabilities.hpp"
#include "plugin_state.hpp"

namespace backplane::vulkan {
namespace {

constexpr std::uint32_t kWorkGroupSize = 256;  // local_size_x of reduce.comp
constexpr std::size_t kMaxDispatchElements = std::size_t{1} << 30;
constexpr std::uint32_t kMaxWorkGroups = 65535;
// On a CPU device each work group costs a task of the driver's thread pool:
// llvmpipe spent ~70 ms of a 64 MiB all_reduce's 183 ms starting 65535
// groups; 256 keep any thread count busy.
constexpr std::uint32_t kCpuDeviceWorkGroups = 256;
constexpr std::size_t kTexelElements = 4;  // elements per texel of the texel-buffer views

const std::size_t kDtypeSizes[BP_DTYPE_COUNT] = {2, 2, 4, 8, 1, 1, 4, 4, 8, 8};
const char *const kCollectiveNames[BP_COLLECTIVE_COUNT] = {
    "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "scatter", "all_to_all", "barrier"};

}  // namespace

// What one call in flight owns: its command buffer, the address table its
// dispatches read, and the texel-buffer views of its inputs. Once the call
// completed they stay as recorded: a later call of the same shape (`shape`,
// CallShape) submits them again without recording anything.
struct Slot {
  VkCommandBuffer commands = VK_NULL_HANDLE;
  MemoryBlock table;  // host-visible, mapped; VkDeviceAddress entries
  std::vector<VkBufferView> views;  // destroyed when the slot records its next call
  std::vector<std::uint64_t> shape;  // of the call recorded; empty: nothing reusable
  bool recorded = false;  // the recording holds a command (else: an empty submission)
  bool busy = false;  // a call or request holds it
};

// Where a reduction reads or writes element 0: a rank buffer and an offset.
struct Place {
  const MemoryBlock *block = nullptr;
  std::size_t offset = 0;
};

// One dispatch of a reduction: `count` elements, its addresses at
// `first_entry` of the table (inputs, then outputs), with texel buffers its
// views (inputs, then outputs) at `first_view` of the slot's.
struct Dispatch {
  std::size_t first_entry = 0, first_view = 0;
  std::uint32_t count = 0, inputs = 0, outputs = 0;
};

}  // namespace backplane::vulkan

struct bp_plugin_comm {
  bp_plugin_state *state = nullptr;
  backplane::vulkan::Gpu *gpu = nullptr;  // rank 0's: where the collectives run
  std::vector<const backplane::vulkan::Device *> ranks;
  std::uint32_t home_device = 0;  // rank 0's index among the plugin's devices
  std::string route;  // comm_info's line
  VkCommandPool pool = VK_NULL_HANDLE;
  // Slots are taken by collective_start and given back by request_release,
  // which may run on another thread.
  std::mutex slots_mutex;
  std::vector<std::unique_ptr<backplane::vulkan::Slot>> slots;
  // In-place all_to_all's copy of the sends; grown (never shrunk) once the
  // comm's earlier work is done.
  backplane::vulkan::MemoryBlock scratch;
  std::uint64_t scratch_generation = 0;  // counts the times scratch was made, for CallShape
  std::uint64_t last_value = 0;  // the timeline value of the comm's latest submission
  // Per call, kept for their capacity: the table's entries and dispatches.
  std::vector<VkDeviceAddress> entries;
  std::vector<backplane::vulkan::Dispatch> dispatches;
  std::vector<backplane::vulkan::Place> inputs, outputs;
  std::vector<std::uint64_t> shape;  // CallShape of the call being started

  // Ranks on other physical devices than rank 0's ("away"): each has stand-in
  // buffers on rank 0's device, which its data is copied into through host
  // memory before the call and out of after it (run_across_devices). Empty
  // when every rank is on rank 0's device.
  std::vector<backplane::vulkan::Gpu *> away_gpus;  // each once
  std::vector<std::unique_ptr<bp_plugin_buffer>> stand_in_send, stand_in_recv;  // per rank; NULL: not away
  std::vector<bp_plugin_buffer *> send_on_home, recv_on_home;  // a call's arguments with the stand-ins
  std::vector<std::byte> bounce;  // host memory between two staged devices

  ~bp_plugin_comm();
};

struct bp_plugin_request {
  bp_plugin_comm *comm = nullptr;
  backplane::vulkan::Slot *slot = nullptr;
  std::uint64_t value = 0;  // complete once the device's timeline reaches it
  const char *collective = "";
  std::atomic<bool> complete{false};
};

bp_plugin_comm::~bp_plugin_comm() {
  backplane::vulkan::Gpu &device = *gpu;
  // The host destroys a comm only once its requests were released; what a
  // failed call left submitted still ends before its memory goes.
  if (last_value != 0) (void)backplane::vulkan::wait_for(device, last_value, -1);
  for (const auto &slot : slots) {
    backplane::vulkan::destroy_block(device, slot->table);
    for (VkBufferView view : slot->views) device.vk.vkDestroyBufferView(device.device, view, nullptr);
  }
  backplane::vulkan::destroy_block(device, scratch);
  // Frees the slots' command buffers with it.
  if (pool != VK_NULL_HANDLE) device.vk.vkDestroyCommandPool(device.device, pool, nullptr);
}

namespace backplane::vulkan {
namespace {

// A compute pipeline of `shader` with `layout`, specialised with INPUTS and
// OUTPUTS of `texel` when that is not empty (inputs 0: by address). Caller
// holds pipeline_mutex.
std::int32_t create_pipeline(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu,
                             const EmbeddedShader &shader, VkPipelineLayout layout, const Gpu::TexelShape &texel,
                             VkPipeline *out) {
  VkShaderModuleCreateInfo module_info{};
  module_info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  module_info.codeSize = shader.word_count * sizeof(std::uint32_t);
  module_info.pCode = shader.words;
  VkShaderModule module = VK_NULL_HANDLE;
  VkResult result = gpu.vk.vkCreateShaderModule(gpu.device, &module_info, nullptr, &module);
  if (result != VK_SUCCESS) return fail_vk(services, sink, gpu, result, "vkCreateShaderModule", "reduce.comp");
  const std::array<VkSpecializationMapEntry, 2> entries = {
      VkSpecializationMapEntry{0, offsetof(Gpu::TexelShape, inputs), sizeof(std::uint32_t)},
      VkSpecializationMapEntry{1, offsetof(Gpu::TexelShape, outputs), sizeof(std::uint32_t)}};
  const VkSpecializationInfo specialization{static_cast<std::uint32_t>(entries.size()), entries.data(), sizeof texel,
                                            &texel};
  VkComputePipelineCreateInfo pipeline_info{};
  pipeline_info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  pipeline_info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  pipeline_info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pipeline_info.stage.module = module;
  pipeline_info.stage.pName = "main";
  pipeline_info.stage.pSpecializationInfo = texel.inputs != 0 ? &specialization : nullptr;
  pipeline_info.layout = layout;
  if (!gpu.pipeline_cache_opened) open_pipeline_cache(services, gpu);
  result = gpu.vk.vkCreateComputePipelines(gpu.device, gpu.pipeline_cache, 1, &pipeline_info, nullptr, out);
  gpu.vk.vkDestroyShaderModule(gpu.device, module, nullptr);
  if (result != VK_SUCCESS) {
    *out = VK_NULL_HANDLE;
    return fail_vk(services, sink, gpu, result, "vkCreateComputePipelines", "reduce.comp");
  }
  gpu.pipeline_created = true;
  return BP_OK;
}

// The layout of texel-buffer reductions of `shape`: its inputs as uniform
// texel buffers at binding 0, its outputs as storage texel buffers at
// binding 1, pushed per dispatch. Caller holds pipeline_mutex.
std::int32_t texel_layout(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu,
                          const Gpu::TexelShape &shape, Gpu::TexelLayout *out) {
  if (const auto found = gpu.texel_layouts.find(shape); found != gpu.texel_layouts.end()) {
    *out = found->second;
    return BP_OK;
  }
  std::array<VkDescriptorSetLayoutBinding, 2> bindings{};
  bindings[0].binding = 0;
  bindings[0].descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
  bindings[0].descriptorCount = shape.inputs;
  bindings[0].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  bindings[1].binding = 1;
  bindings[1].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER;
  bindings[1].descriptorCount = shape.outputs;
  bindings[1].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  VkDescriptorSetLayoutCreateInfo set_info{};
  set_info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  set_info.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  set_info.bindingCount = static_cast<std::uint32_t>(bindings.size());
  set_info.pBindings = bindings.data();
  Gpu::TexelLayout layout;
  VkResult result = gpu.vk.vkCreateDescriptorSetLayout(gpu.device, &set_info, nullptr, &layout.set_layout);
  if (result != VK_SUCCESS) return fail_vk(services, sink, gpu, result, "vkCreateDescriptorSetLayout", "reduce.comp");
  const VkPushConstantRange push_range{VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(ReduceArguments)};
  VkPipelineLayoutCreateInfo layout_info{};
  layout_info.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &layout.set_layout;
  layout_info.pushConstantRangeCount = 1;
  layout_info.pPushConstantRanges = &push_range;
  result = gpu.vk.vkCreatePipelineLayout(gpu.device, &layout_info, nullptr, &layout.pipeline_layout);
  if (result != VK_SUCCESS) {
    gpu.vk.vkDestroyDescriptorSetLayout(gpu.device, layout.set_layout, nullptr);
    return fail_vk(services, sink, gpu, result, "vkCreatePipelineLayout", "reduce.comp");
  }
  gpu.texel_layouts.emplace(shape, layout);
  *out = layout;
  return BP_OK;
}

// The reduction pipeline of (dtype, op) on `gpu` and its layout, created at
// first use: through texel buffers of `texel`'s shape, or (inputs 0) by
// address.
std::int32_t reduce_pipeline(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu, std::uint32_t dtype,
                             std::uint32_t op, const Gpu::TexelShape &texel, VkPipeline *out,
                             VkPipelineLayout *layout_out) {
  std::lock_guard<std::mutex> lock(gpu.pipeline_mutex);
  const std::size_t variant = shader_variant(dtype, op);
  const EmbeddedShader &shader = texel.inputs != 0 ? kTexelReduceShaders[variant] : kReduceShaders[variant];
  if (shader.words == nullptr) {
    return fail(services, sink, BP_INTERNAL, "vulkan: no %sshader for element type %u and op %u (a plugin bug)",
                texel.inputs != 0 ? "texel-buffer " : "", static_cast<unsigned>(dtype), static_cast<unsigned>(op));
  }
  if (texel.inputs == 0) {
    *layout_out = gpu.pipeline_layout;
    if (gpu.pipelines[variant] == VK_NULL_HANDLE) {
      BP_VULKAN_CHECK(
          create_pipeline(services, sink, gpu, shader, gpu.pipeline_layout, texel, &gpu.pipelines[variant]));
    }
    *out = gpu.pipelines[variant];
    return BP_OK;
  }
  Gpu::TexelLayout layout;
  BP_VULKAN_CHECK(texel_layout(services, sink, gpu, texel, &layout));
  *layout_out = layout.pipeline_layout;
  const auto key = std::make_pair(variant, texel);
  if (const auto found = gpu.texel_pipelines.find(key); found != gpu.texel_pipelines.end()) {
    *out = found->second;
    return BP_OK;
  }
  VkPipeline pipeline = VK_NULL_HANDLE;
  BP_VULKAN_CHECK(create_pipeline(services, sink, gpu, shader, layout.pipeline_layout, texel, &pipeline));
  gpu.texel_pipelines.emplace(key, pipeline);
  *out = pipeline;
  return BP_OK;
}

// One collective call: its arguments, sizes, and what it records.
struct Call {
  bp_plugin_state &state;
  bp_error_sink *sink;
  bp_plugin_comm &comm;
  Gpu &gpu;
  const bp_collective_args &args;
  std::size_t n;        // ranks
  std::size_t element;  // bytes of one element
  std::size_t block;    // bytes of `count` elements
  VkCommandBuffer commands;
  bool recorded = false;  // a command went into `commands`

  bool in_place(std::size_t r) const { return args.send[r] != nullptr && args.send[r] == args.recv[r]; }
  VkBuffer send(std::size_t r) const { return args.send[r]->block.buffer; }
  VkBuffer recv(std::size_t r) const { return args.recv[r]->block.buffer; }

  void copy(VkBuffer from, std::size_t from_offset, VkBuffer to, std::size_t to_offset) {
    if (block == 0) return;
    const VkBufferCopy region{from_offset, to_offset, block};
    gpu.vk.vkCmdCopyBuffer(commands, from, to, 1, &region);
    recorded = true;
  }

  // Orders what `from_stage` wrote before what `to_stage` reads or writes.
  void barrier(VkPipelineStageFlags from_stage, VkAccessFlags from_access, VkPipelineStageFlags to_stage,
               VkAccessFlags to_access) {
    VkMemoryBarrier memory_barrier{};
    memory_barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    memory_barrier.srcAccessMask = from_access;
    memory_barrier.dstAccessMask = to_access;
    gpu.vk.vkCmdPipelineBarrier(commands, from_stage, to_stage, 0, 1, &memory_barrier, 0, nullptr, 0, nullptr);
    recorded = true;
  }

  // Whether an all_reduce or reduce writes one output in place and copies:
  // on a CPU device (host memory), a shader's stores to memory it has not
  // just read cost a read of each line first, where the driver's copies
  // (memcpy) stream past the cache. On lavapipe, 64 MiB f32 on 2 ranks:
  // a reduce took 25 ms out of place and 12 ms in place, a copy 3 ms.
  // So rank 0's (the root's) send is first copied to its recv, the
  // reduction writes there in place, and (all_reduce) copies take the
  // result to the other ranks.
  bool reduce_in_place_and_copy() const { return gpu.type == VK_PHYSICAL_DEVICE_TYPE_CPU; }

  // The outputs of each reduction dispatch of this call.
  std::size_t reduction_outputs() const {
    return args.collective == BP_ALL_REDUCE && !reduce_in_place_and_copy() ? n : 1;
  }

  // Whether this call's reductions go through texel buffers: the device
  // does (Gpu::texel_buffers), has a format for the element type and enough
  // descriptors for the inputs and outputs, the call has a whole texel, and
  // every view starts aligned (a reduce_scatter's blocks may not).
  bool choose_texel_buffers() const {
    if (!gpu.texel_buffers || gpu.texel_formats[args.dtype] == VK_FORMAT_UNDEFINED ||
        n + reduction_outputs() > gpu.max_texel_views || args.count < kTexelElements) {
      return false;
    }
    const std::size_t alignment = std::max<VkDeviceSize>(gpu.limits.minTexelBufferOffsetAlignment, 1);
    return args.collective != BP_REDUCE_SCATTER || block % alignment == 0;
  }

  // The elements one dispatch covers: kMaxDispatchElements, and with texel
  // buffers no more than a view holds counted in elements (a power of two,
  // so that every later view starts aligned).
  std::size_t dispatch_elements(bool texel) const {
    if (!texel) return kMaxDispatchElements;
    return std::bit_floor(std::min<std::size_t>(kMaxDispatchElements, gpu.limits.maxTexelBufferElements));
  }

  // A view of `texels` texels of `place`'s buffer from `skip` bytes on, into
  // the slot's views.
  std::int32_t add_view(Slot &slot, const Place &place, std::size_t skip, std::size_t texels) {
    VkBufferViewCreateInfo view_info{};
    view_info.sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO;
    view_info.buffer = place.block->buffer;
    view_info.format = gpu.texel_formats[args.dtype];
    view_info.offset = place.offset + skip;
    view_info.range = texels * kTexelElements * element;
    VkBufferView view = VK_NULL_HANDLE;
    const VkResult result = gpu.vk.vkCreateBufferView(gpu.device, &view_info, nullptr, &view);
    if (result != VK_SUCCESS) {
      return fail_vk(state.services, sink, gpu, result, "vkCreateBufferView", kCollectiveNames[args.collective]);
    }
    slot.views.push_back(view);
    return BP_OK;
  }

  // Dispatches for outputs[k] = op over inputs[0..n), `count` elements, in
  // pieces of dispatch_elements(): every input's and output's address into
  // the table, and with texel buffers their views into `slot`. A last
  // piece of fewer than 4 elements (no whole texel: only the by-address
  // tail runs) is given the piece before's views, which it does not read.
  std::int32_t reduce_into(Slot &slot, std::size_t output_count, bool texel) {
    const std::size_t piece = dispatch_elements(texel);
    for (std::size_t first = 0; first < args.count; first += piece) {
      const std::size_t count = std::min(piece, args.count - first);
      const std::size_t skip = first * element;
      const std::size_t texels = count / kTexelElements;
      Dispatch dispatch{comm.entries.size(), slot.views.size(), static_cast<std::uint32_t>(count),
                        static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(output_count)};
      if (texel && texels == 0) dispatch.first_view = comm.dispatches.back().first_view;
      for (std::size_t j = 0; j < n; ++j) comm.entries.push_back(comm.inputs[j].block->address + comm.inputs[j].offset + skip);
      for (std::size_t k = 0; k < output_count; ++k) {
        comm.entries.push_back(comm.outputs[k].block->address + comm.outputs[k].offset + skip);
      }
      if (texel && texels != 0) {
        for (std::size_t j = 0; j < n; ++j) BP_VULKAN_CHECK(add_view(slot, comm.inputs[j], skip, texels));
        for (std::size_t k = 0; k < output_count; ++k) BP_VULKAN_CHECK(add_view(slot, comm.outputs[k], skip, texels));
      }
      comm.dispatches.push_back(dispatch);
    }
    return BP_OK;
  }

  // The dispatches reduce_into() collected, into `commands`, their table
  // into the slot's (grown to fit: the slot is not in flight).
  std::int32_t record_dispatches(Slot &slot, bool texel) {
    if (comm.dispatches.empty()) return BP_OK;
    const std::size_t table_bytes = comm.entries.size() * sizeof(VkDeviceAddress);
    if (slot.table.bytes < table_bytes) {
      destroy_block(gpu, slot.table);
      BP_VULKAN_CHECK(create_block(state.services, sink, gpu, std::max<std::size_t>(table_bytes, 1024),
                                   VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                   VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, true,
                                   slot.table));
    }
    std::memcpy(slot.table.mapped, comm.entries.data(), table_bytes);
    VkPipeline pipeline = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    // Every dispatch of a call has one shape (reduce_scatter's too).
    const Dispatch &shape = comm.dispatches.front();
    const Gpu::TexelShape texel_shape = texel ? Gpu::TexelShape{shape.inputs, shape.outputs} : Gpu::TexelShape{};
    BP_VULKAN_CHECK(reduce_pipeline(state.services, sink, gpu, args.dtype, args.reduce_op, texel_shape, &pipeline,
                                    &layout));
    gpu.vk.vkCmdBindPipeline(commands, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    const std::uint32_t group_limit =
        std::min(gpu.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? kCpuDeviceWorkGroups : kMaxWorkGroups,
                 gpu.limits.maxComputeWorkGroupCount[0]);
    for (const Dispatch &dispatch : comm.dispatches) {
      // Invocations: one per texel (at least one, for the tail), or per element.
      std::size_t invocations = dispatch.count;
      if (texel) {
        std::array<VkWriteDescriptorSet, 2> writes{};
        for (VkWriteDescriptorSet &write : writes) write.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        writes[0].dstBinding = 0;
        writes[0].descriptorCount = dispatch.inputs;
        writes[0].descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
        writes[0].pTexelBufferView = slot.views.data() + dispatch.first_view;
        writes[1].dstBinding = 1;
        writes[1].descriptorCount = dispatch.outputs;
        writes[1].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER;
        writes[1].pTexelBufferView = slot.views.data() + dispatch.first_view + dispatch.inputs;
        gpu.vk.vkCmdPushDescriptorSetKHR(commands, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0,
                                         static_cast<std::uint32_t>(writes.size()), writes.data());
        invocations = std::max<std::size_t>(dispatch.count / kTexelElements, 1);
      }
      const ReduceArguments arguments{slot.table.address + dispatch.first_entry * sizeof(VkDeviceAddress),
                                      dispatch.count, dispatch.inputs, dispatch.outputs,
                                      static_cast<std::uint32_t>(n)};
      gpu.vk.vkCmdPushConstants(commands, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof arguments, &arguments);
      const std::uint32_t groups = static_cast<std::uint32_t>(
          std::min<std::size_t>((invocations + kWorkGroupSize - 1) / kWorkGroupSize, group_limit));
      gpu.vk.vkCmdDispatch(commands, groups, 1, 1);
    }
    recorded = true;
    return BP_OK;
  }
};

// ---- the collectives ------------------------------------------------------------

// Into recv[target] = op over every send, with Call::reduce_in_place_and_copy:
// the target's send copied to its recv first, and the reduction reading it
// there.
std::int32_t reduce_in_place_into(Call &c, Slot &slot, bool texel, std::size_t target) {
  for (std::size_t r = 0; r < c.n; ++r) c.comm.inputs[r] = {&c.args.send[r]->block, 0};
  c.comm.outputs[0] = {&c.args.recv[target]->block, 0};
  if (!c.in_place(target)) {
    c.copy(c.send(target), 0, c.recv(target), 0);
    c.barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
              VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    c.comm.inputs[target] = c.comm.outputs[0];
  }
  return c.reduce_into(slot, 1, texel);
}

std::int32_t all_reduce(Call &c, Slot &slot, bool texel) {
  // The copies of recv[0] to the other ranks follow the dispatches (record).
  if (c.reduce_in_place_and_copy()) return reduce_in_place_into(c, slot, texel, 0);
  for (std::size_t r = 0; r < c.n; ++r) {
    c.comm.inputs[r] = {&c.args.send[r]->block, 0};
    c.comm.outputs[r] = {&c.args.recv[r]->block, 0};
  }
  return c.reduce_into(slot, c.n, texel);
}

std::int32_t reduce(Call &c, Slot &slot, bool texel) {
  if (c.reduce_in_place_and_copy()) return reduce_in_place_into(c, slot, texel, c.args.root);
  for (std::size_t r = 0; r < c.n; ++r) c.comm.inputs[r] = {&c.args.send[r]->block, 0};
  c.comm.outputs[0] = {&c.args.recv[c.args.root]->block, 0};
  return c.reduce_into(slot, 1, texel);
}

// Rank r's result is block r of every send; in place it goes to block r of
// send[r], which no other rank's reduction reads.
std::int32_t reduce_scatter(Call &c, Slot &slot, bool texel) {
  for (std::size_t r = 0; r < c.n; ++r) {
    for (std::size_t j = 0; j < c.n; ++j) c.comm.inputs[j] = {&c.args.send[j]->block, r * c.block};
    c.comm.outputs[0] = {&c.args.recv[r]->block, c.in_place(r) ? r * c.block : 0};
    BP_VULKAN_CHECK(c.reduce_into(slot, 1, texel));
  }
  return BP_OK;
}

void broadcast(Call &c) {
  const std::size_t root = c.args.root;
  for (std::size_t r = 0; r < c.n; ++r) {
    if (r != root || !c.in_place(root)) c.copy(c.send(root), 0, c.recv(r), 0);
  }
}

// Rank r's contribution (block r of its recv, in place) to block r of
// every recv; no copy writes what another reads.
void all_gather(Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    const VkBuffer from = c.in_place(r) ? c.recv(r) : c.send(r);
    const std::size_t from_offset = c.in_place(r) ? r * c.block : 0;
    for (std::size_t j = 0; j < c.n; ++j) {
      if (j != r || !c.in_place(r)) c.copy(from, from_offset, c.recv(j), r * c.block);
    }
  }
}

void gather(Call &c) {
  const std::size_t root = c.args.root;
  for (std::size_t r = 0; r < c.n; ++r) {
    if (r != root || !c.in_place(root)) c.copy(c.send(r), 0, c.recv(root), r * c.block);
  }
}

void scatter(Call &c) {
  const std::size_t root = c.args.root;
  for (std::size_t r = 0; r < c.n; ++r) {
    if (r != root || !c.in_place(root)) c.copy(c.send(root), r * c.block, c.recv(r), 0);
  }
}

// Block j of send[r] to block r of recv[j]. A rank in place would have its
// blocks overwritten before they are sent: its sends are first copied to
// scratch, and a barrier orders those copies before the rest.
std::int32_t all_to_all(Call &c) {
  const std::size_t all_blocks = c.block * c.n;
  std::size_t in_place_ranks = 0;
  for (std::size_t r = 0; r < c.n; ++r) in_place_ranks += c.in_place(r) ? 1 : 0;
  if (in_place_ranks != 0 && all_blocks != 0) {
    const std::size_t needed = in_place_ranks * all_blocks;
    if (c.comm.scratch.bytes < needed) {
      // Requests in flight may still read the old scratch: they end first
      // (growing is rare).
      if (c.comm.last_value != 0) {
        const VkResult waited = wait_for(c.gpu, c.comm.last_value, -1);
        if (waited != VK_SUCCESS) return fail_vk(c.state.services, c.sink, c.gpu, waited, "vkWaitSemaphores", "scratch");
      }
      destroy_block(c.gpu, c.comm.scratch);
      ++c.comm.scratch_generation;
      BP_VULKAN_CHECK(create_block(c.state.services, c.sink, c.gpu, needed,
                                   VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                   VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, false, c.comm.scratch));
    }
    std::size_t slot = 0;
    for (std::size_t r = 0; r < c.n; ++r) {
      if (!c.in_place(r)) continue;
      const VkBufferCopy region{0, slot++ * all_blocks, all_blocks};
      c.gpu.vk.vkCmdCopyBuffer(c.commands, c.send(r), c.comm.scratch.buffer, 1, &region);
    }
    c.barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
              VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  }
  std::size_t slot = 0;
  for (std::size_t r = 0; r < c.n; ++r) {
    VkBuffer from = c.in_place(r) ? c.comm.scratch.buffer : c.send(r);
    const std::size_t base = c.in_place(r) ? slot++ * all_blocks : 0;
    for (std::size_t j = 0; j < c.n; ++j) {
      if (j == r && c.in_place(r)) continue;  // its own block stays where it is
      c.copy(from, base + j * c.block, c.recv(j), r * c.block);
    }
  }
  return BP_OK;
}

// Records the collective into c.commands (nothing for a barrier, count 0,
// or a rank alone in place).
std::int32_t record(Call &c, Slot &slot) {
  c.comm.entries.clear();
  c.comm.dispatches.clear();
  // The slot's earlier call has completed (the slot was free).
  for (VkBufferView view : slot.views) c.gpu.vk.vkDestroyBufferView(c.gpu.device, view, nullptr);
  slot.views.clear();
  if (c.args.collective == BP_BARRIER || c.args.count == 0) return BP_OK;
  const bool texel = c.choose_texel_buffers();
  switch (c.args.collective) {
    case BP_ALL_REDUCE: BP_VULKAN_CHECK(all_reduce(c, slot, texel)); break;
    case BP_REDUCE: BP_VULKAN_CHECK(reduce(c, slot, texel)); break;
    case BP_REDUCE_SCATTER: BP_VULKAN_CHECK(reduce_scatter(c, slot, texel)); break;
    case BP_BROADCAST: broadcast(c); break;
    case BP_ALL_GATHER: all_gather(c); break;
    case BP_GATHER: gather(c); break;
    case BP_SCATTER: scatter(c); break;
    case BP_ALL_TO_ALL: BP_VULKAN_CHECK(all_to_all(c)); break;
    default:
      return fail(c.state.services, c.sink, BP_INVALID_ARGUMENT, "vulkan collective_start: unknown collective %u",
                  static_cast<unsigned>(c.args.collective));
  }
  BP_VULKAN_CHECK(c.record_dispatches(slot, texel));
  // all_reduce on a CPU device: the result, reduced into recv[0], to the
  // other ranks.
  if (c.args.collective == BP_ALL_REDUCE && c.reduce_in_place_and_copy() && c.n > 1) {
    c.barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
              VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    for (std::size_t r = 1; r < c.n; ++r) c.copy(c.recv(0), 0, c.recv(r), 0);
  }
  return BP_OK;
}

// What a recording depends on: the collective, element type, op, root and
// count, every rank's send and recv buffer (by serial, never reused, so a
// buffer freed and another made at its address differ) and which scratch
// memory the comm has. Two calls of one shape record the same commands.
void call_shape(const bp_plugin_comm &comm, const bp_collective_args &args, std::vector<std::uint64_t> &shape) {
  shape.clear();
  shape.insert(shape.end(), {args.collective, args.dtype, args.reduce_op, args.root, args.count, comm.scratch_generation});
  // A barrier (whose buffer arrays may be NULL) and count 0 record nothing.
  if (args.collective == BP_BARRIER || args.count == 0) return;
  for (std::size_t r = 0; r < comm.ranks.size(); ++r) {
    shape.push_back(args.send[r] != nullptr ? args.send[r]->serial : 0);
    shape.push_back(args.recv[r] != nullptr ? args.recv[r]->serial : 0);
  }
}

// A free slot of the comm, marked busy: one that recorded a call of
// `shape` when there is one (*reuse), else another free one, else a new one.
std::int32_t take_slot(bp_plugin_state &state, bp_plugin_comm &comm, const std::vector<std::uint64_t> &shape,
                       bp_error_sink *sink, Slot **out, bool *reuse) {
  std::lock_guard<std::mutex> lock(comm.slots_mutex);
  Slot *free_slot = nullptr;
  for (const auto &slot : comm.slots) {
    if (slot->busy) continue;
    if (slot->shape == shape) {
      slot->busy = true;
      *out = slot.get();
      *reuse = true;
      return BP_OK;
    }
    if (free_slot == nullptr) free_slot = slot.get();
  }
  *reuse = false;
  if (free_slot != nullptr) {
    free_slot->busy = true;
    *out = free_slot;
    return BP_OK;
  }
  auto slot = std::make_unique<Slot>();
  VkCommandBufferAllocateInfo allocate_info{};
  allocate_info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  allocate_info.commandPool = comm.pool;
  allocate_info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  allocate_info.commandBufferCount = 1;
  const VkResult result = comm.gpu->vk.vkAllocateCommandBuffers(comm.gpu->device, &allocate_info, &slot->commands);
  if (result != VK_SUCCESS) {
    return fail_vk(state.services, sink, *comm.gpu, result, "vkAllocateCommandBuffers", "collective");
  }
  slot->busy = true;
  *out = slot.get();
  comm.slots.push_back(std::move(slot));
  return BP_OK;
}

// Records the call into the slot's command buffer (begun and ended), the
// slot keeping its shape when that succeeded.
std::int32_t record_slot(Call &c, Slot &slot) {
  const char *name = kCollectiveNames[c.args.collective];
  slot.shape.clear();
  // Not one-time: a later call of the same shape submits it again.
  VkCommandBufferBeginInfo begin{};
  begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  VkResult result = c.gpu.vk.vkBeginCommandBuffer(slot.commands, &begin);
  if (result != VK_SUCCESS) return fail_vk(c.state.services, c.sink, c.gpu, result, "vkBeginCommandBuffer", name);
  std::int32_t status = record(c, slot);
  if (status == BP_OK && c.recorded) host_read_barrier(c.gpu, slot.commands);
  result = c.gpu.vk.vkEndCommandBuffer(slot.commands);
  if (status == BP_OK && result != VK_SUCCESS) {
    status = fail_vk(c.state.services, c.sink, c.gpu, result, "vkEndCommandBuffer", name);
  }
  if (status != BP_OK) return status;
  slot.recorded = c.recorded;
  slot.shape = c.comm.shape;
  return BP_OK;
}

void give_back(bp_plugin_comm &comm, Slot &slot) {
  std::lock_guard<std::mutex> lock(comm.slots_mutex);
  slot.busy = false;
}

std::string describe_route(const bp_plugin_comm &comm) {
  const std::string ranks = std::to_string(comm.ranks.size()) + " ranks";
  if (comm.away_gpus.empty()) {
    return "one VkDevice ('" + comm.gpu->name + "', " + ranks +
           "): device to device, vkCmdCopyBuffer and compute shaders, one submission per collective";
  }
  std::string devices = "'" + comm.gpu->name + "' (physical device " + std::to_string(comm.gpu->index) + ")";
  for (const Gpu *away : comm.away_gpus) {
    devices += ", '" + away->name + "' (physical device " + std::to_string(away->index) + ")";
  }
  return "through host memory: " + ranks + " on " + std::to_string(comm.away_gpus.size() + 1) + " VkDevices (" +
         devices + "); the ranks away from rank 0's device are copied to and from stand-ins on it, where the "
         "collective runs; calls complete before the start returns";
}

}  // namespace

std::int32_t Backend::comm_create(bp_plugin_state &state, std::span<const std::uint32_t> devices,
                                  bp_plugin_comm **out, bp_error_sink *sink) {
  auto comm = std::make_unique<bp_plugin_comm>();
  comm->state = &state;
  {
    // The devices stay as they are while the comm is counted.
    std::lock_guard<std::mutex> lock(state.mutex);
    for (std::uint32_t device : devices) comm->ranks.push_back(state.devices[device].get());
  }
  Gpu &gpu = *comm->ranks[0]->gpu;
  comm->gpu = &gpu;
  comm->home_device = devices[0];
  for (const Device *rank : comm->ranks) {
    if (rank->gpu != &gpu && std::find(comm->away_gpus.begin(), comm->away_gpus.end(), rank->gpu) == comm->away_gpus.end()) {
      comm->away_gpus.push_back(rank->gpu);
    }
  }
  BP_VULKAN_CHECK(check_not_lost(state.services, sink, gpu));
  for (Gpu *away : comm->away_gpus) BP_VULKAN_CHECK(check_not_lost(state.services, sink, *away));
  VkCommandPoolCreateInfo pool_info{};
  pool_info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = gpu.queue_family;
  const VkResult result = gpu.vk.vkCreateCommandPool(gpu.device, &pool_info, nullptr, &comm->pool);
  if (result != VK_SUCCESS) {
    comm->pool = VK_NULL_HANDLE;
    return fail_vk(state.services, sink, gpu, result, "vkCreateCommandPool", "comm");
  }
  const std::size_t n = comm->ranks.size();
  comm->stand_in_send.resize(n);
  comm->stand_in_recv.resize(n);
  comm->inputs.assign(n, Place{});
  comm->outputs.assign(n, Place{});
  comm->entries.reserve(2 * n);
  comm->route = describe_route(*comm);
  log(state.services, BP_LOG_DEBUG, "comm of %zu ranks: %s", n, comm->route.c_str());
  *out = comm.release();
  return BP_OK;
}

void Backend::comm_destroy(bp_plugin_state &, bp_plugin_comm *comm) { delete comm; }

std::int32_t Backend::comm_info(bp_plugin_state &, bp_plugin_comm &comm, bp_plugin_comm_info &info, bp_error_sink *) {
  if (info.struct_size >= BP_STRUCT_SIZE(bp_plugin_comm_info, route)) info.route = comm.route.c_str();
  return BP_OK;
}

namespace {

// The collective on rank 0's device, every buffer of `args` there.
std::int32_t start_on_home_device(bp_plugin_state &state, bp_plugin_comm &comm, const bp_collective_args &args,
                                  bool caller_waits, bp_plugin_request **out, bp_error_sink *sink) {
  Gpu &gpu = *comm.gpu;
  const char *name = kCollectiveNames[args.collective];
  // Before anything is submitted, so that running out of memory fails the
  // call before it started.
  std::unique_ptr<bp_plugin_request> request;
  if (!caller_waits) request = std::make_unique<bp_plugin_request>();

  call_shape(comm, args, comm.shape);
  Slot *slot = nullptr;
  bool reuse = false;
  BP_VULKAN_CHECK(take_slot(state, comm, comm.shape, sink, &slot, &reuse));
  const std::size_t element = args.collective == BP_BARRIER ? 1 : kDtypeSizes[args.dtype];
  Call c{state, sink, comm, gpu, args, comm.ranks.size(), element, args.count * element, slot->commands};
  std::int32_t status = reuse ? BP_OK : record_slot(c, *slot);
  // Nothing recorded (barrier, count 0): an empty submission, complete
  // once everything submitted before it is.
  std::uint64_t value = 0;
  if (status == BP_OK) {
    status = submit(state.services, sink, gpu, slot->recorded ? slot->commands : VK_NULL_HANDLE, name, &value);
  }
  if (status != BP_OK) {
    give_back(comm, *slot);
    return status;
  }
  comm.last_value = value;
  if (caller_waits) {
    const VkResult result = wait_for(gpu, value, -1);
    give_back(comm, *slot);
    if (result != VK_SUCCESS) return fail_vk(state.services, sink, gpu, result, "vkWaitSemaphores", name);
    return BP_OK;
  }
  request->comm = &comm;
  request->slot = slot;
  request->value = value;
  request->collective = name;
  *out = request.release();
  return BP_OK;
}

// Bytes of rank r's send the collective reads, and of its recv it writes
// (0: none), with B bytes per block of `count` elements.
std::size_t send_bytes(const bp_collective_args &args, std::size_t n, std::size_t r, std::size_t block) {
  switch (args.collective) {
    case BP_BROADCAST: return r == args.root ? block : 0;
    case BP_SCATTER: return r == args.root ? n * block : 0;
    case BP_REDUCE_SCATTER:
    case BP_ALL_TO_ALL: return n * block;
    case BP_BARRIER: return 0;
    default: return block;  // all_reduce, reduce, all_gather, gather
  }
}
std::size_t recv_bytes(const bp_collective_args &args, std::size_t n, std::size_t r, std::size_t block) {
  switch (args.collective) {
    case BP_REDUCE: return r == args.root ? block : 0;
    case BP_GATHER: return r == args.root ? n * block : 0;
    case BP_ALL_GATHER:
    case BP_ALL_TO_ALL: return n * block;
    case BP_BARRIER: return 0;
    default: return block;  // all_reduce, broadcast, reduce_scatter, scatter
  }
}

// Waits until everything submitted to `gpu` so far has completed: what is
// copied through host memory next is what those calls left.
std::int32_t wait_for_submitted(bp_plugin_state &state, Gpu &gpu, bp_error_sink *sink, const char *what) {
  BP_VULKAN_CHECK(check_not_lost(state.services, sink, gpu));
  std::uint64_t submitted = 0;
  {
    std::lock_guard<std::mutex> lock(gpu.queue_mutex);
    submitted = gpu.submitted;
  }
  if (submitted == 0) return BP_OK;
  const VkResult result = wait_for(gpu, submitted, -1);
  if (result != VK_SUCCESS) return fail_vk(state.services, sink, gpu, result, "vkWaitSemaphores", what);
  return BP_OK;
}

// `bytes` from the start of `from` to the start of `to`, buffers on two
// devices, through host memory: one memcpy where both are mapped, else
// through whichever is, else through the comm's bounce memory.
std::int32_t copy_between_devices(bp_plugin_state &state, bp_plugin_comm &comm, const bp_plugin_buffer &from,
                                  bp_plugin_buffer &to, std::size_t bytes, bp_error_sink *sink) {
  if (bytes == 0) return BP_OK;
  if (to.block.mapped != nullptr) return Backend::buffer_read(state, from, 0, to.block.mapped, bytes, sink);
  if (from.block.mapped != nullptr) return Backend::buffer_write(state, to, 0, from.block.mapped, bytes, sink);
  if (comm.bounce.size() < bytes) comm.bounce.resize(bytes);
  BP_VULKAN_CHECK(Backend::buffer_read(state, from, 0, comm.bounce.data(), bytes, sink));
  return Backend::buffer_write(state, to, 0, comm.bounce.data(), bytes, sink);
}

// A stand-in on rank 0's device of at least `bytes` (made or grown: no call
// of the comm is in flight).
std::int32_t ensure_stand_in(bp_plugin_state &state, bp_plugin_comm &comm, std::unique_ptr<bp_plugin_buffer> &stand_in,
                             std::size_t bytes, bp_error_sink *sink) {
  if (stand_in && stand_in->bytes >= bytes) return BP_OK;
  auto grown = std::make_unique<bp_plugin_buffer>();
  grown->device = comm.home_device;
  grown->bytes = bytes;
  BP_VULKAN_CHECK(Backend::buffer_allocate(state, *grown, sink));
  stand_in = std::move(grown);
  return BP_OK;
}

// A comm across physical devices: every away rank's data the call reads
// copied through host memory to its stand-ins on rank 0's device, the call
// run there (and waited for), and what it wrote copied back. Complete when
// this returns, so no request. Bounded by host copies: 2 x B per away rank
// and call for all_reduce.
std::int32_t run_across_devices(bp_plugin_state &state, bp_plugin_comm &comm, const bp_collective_args &args,
                                bp_error_sink *sink) {
  const char *name = kCollectiveNames[args.collective];
  const std::size_t n = comm.ranks.size();
  const std::size_t block = args.collective == BP_BARRIER ? 0 : args.count * kDtypeSizes[args.dtype];
  BP_VULKAN_CHECK(wait_for_submitted(state, *comm.gpu, sink, name));
  for (Gpu *away : comm.away_gpus) BP_VULKAN_CHECK(wait_for_submitted(state, *away, sink, name));
  bp_collective_args on_home = args;
  if (args.collective != BP_BARRIER) {
    comm.send_on_home.assign(args.send, args.send + n);
    comm.recv_on_home.assign(args.recv, args.recv + n);
    for (std::size_t r = 0; r < n; ++r) {
      if (comm.ranks[r]->gpu == comm.gpu) continue;
      bp_plugin_buffer *send = args.send[r], *recv = args.recv[r];
      // What the call does not use of this rank stays off rank 0's device.
      comm.send_on_home[r] = comm.recv_on_home[r] = nullptr;
      // In place, the whole region either side uses goes in and comes back.
      const bool in_place = send != nullptr && send == recv;
      const std::size_t in = in_place ? std::max(send_bytes(args, n, r, block), recv_bytes(args, n, r, block))
                                      : send_bytes(args, n, r, block);
      if (send != nullptr && in != 0) {
        BP_VULKAN_CHECK(ensure_stand_in(state, comm, comm.stand_in_send[r], in, sink));
        BP_VULKAN_CHECK(copy_between_devices(state, comm, *send, *comm.stand_in_send[r], in, sink));
        comm.send_on_home[r] = comm.stand_in_send[r].get();
      }
      const std::size_t out = recv_bytes(args, n, r, block);
      if (in_place) {
        comm.recv_on_home[r] = comm.send_on_home[r];
      } else if (recv != nullptr && out != 0) {
        BP_VULKAN_CHECK(ensure_stand_in(state, comm, comm.stand_in_recv[r], out, sink));
        comm.recv_on_home[r] = comm.stand_in_recv[r].get();
      }
    }
    on_home.send = comm.send_on_home.data();
    on_home.recv = comm.recv_on_home.data();
  }
  BP_VULKAN_CHECK(start_on_home_device(state, comm, on_home, true, nullptr, sink));
  if (args.collective == BP_BARRIER) return BP_OK;
  for (std::size_t r = 0; r < n; ++r) {
    if (comm.ranks[r]->gpu == comm.gpu || args.recv[r] == nullptr) continue;
    const bool in_place = args.send[r] == args.recv[r];
    const std::size_t out = in_place ? std::max(send_bytes(args, n, r, block), recv_bytes(args, n, r, block))
                                     : recv_bytes(args, n, r, block);
    if (out != 0) BP_VULKAN_CHECK(copy_between_devices(state, comm, *comm.recv_on_home[r], *args.recv[r], out, sink));
  }
  return BP_OK;
}

}  // namespace

// The host has checked the arguments (plugin.h, bp_collective_args): enums
// in range and declared for every rank's device (so every shader a call
// picks exists), roots, buffers present, on the rank's device and large
// enough. Nothing is checked again.
std::int32_t Backend::collective_start(bp_plugin_state &state, bp_plugin_comm &comm, const bp_collective_args &args,
                                       bp_plugin_request **out, bp_error_sink *sink) {
  BP_VULKAN_CHECK(check_not_lost(state.services, sink, *comm.gpu));
  if (!comm.away_gpus.empty()) return run_across_devices(state, comm, args, sink);
  // A 1.0/1.1 host sends no flags and always waits at once (plugin.h).
  const bool caller_waits =
      args.struct_size < BP_COLLECTIVE_ARGS_SIZE_V1_2 || (args.flags & BP_COLLECTIVE_CALLER_WAITS) != 0;
  return start_on_home_device(state, comm, args, caller_waits, out, sink);
}

std::int32_t Backend::request_test(bp_plugin_state &state, bp_plugin_request &request, bool &done,
                                   bp_error_sink *sink) {
  if (request.complete.load(std::memory_order_acquire)) {
    done = true;
    return BP_OK;
  }
  Gpu &gpu = *request.comm->gpu;
  std::uint64_t reached = 0;
  const VkResult result = gpu.vk.vkGetSemaphoreCounterValue(gpu.device, gpu.timeline, &reached);
  if (result != VK_SUCCESS) {
    return fail_vk(state.services, sink, gpu, result, "vkGetSemaphoreCounterValue", request.collective);
  }
  if (reached < request.value) {
    done = false;
    return BP_OK;
  }
  request.complete.store(true, std::memory_order_release);
  done = true;
  return BP_OK;
}

std::int32_t Backend::request_wait(bp_plugin_state &state, bp_plugin_request &request, std::int64_t timeout_ns,
                                   bp_error_sink *sink) {
  if (request.complete.load(std::memory_order_acquire)) return BP_OK;
  Gpu &gpu = *request.comm->gpu;
  const VkResult result = wait_for(gpu, request.value, timeout_ns);
  if (result == VK_TIMEOUT) {
    return fail(state.services, sink, BP_TIMEOUT,
                "vulkan %s on '%s': not complete after %lld ns (vkWaitSemaphores: VK_TIMEOUT); still in flight",
                request.collective, gpu.name.c_str(), static_cast<long long>(timeout_ns));
  }
  if (result != VK_SUCCESS) return fail_vk(state.services, sink, gpu, result, "vkWaitSemaphores", request.collective);
  request.complete.store(true, std::memory_order_release);
  return BP_OK;
}

void Backend::request_release(bp_plugin_state &state, bp_plugin_request *request) {
  // An older host may release a request in flight; nothing may touch the
  // group's buffers (or the slot) once this returns, so it is waited for.
  if (!request->complete.load(std::memory_order_acquire)) {
    log(state.services, BP_LOG_DEBUG, "request_release: %s is still in flight; waiting for it first",
        request->collective);
    (void)wait_for(*request->comm->gpu, request->value, -1);
  }
  give_back(*request->comm, *request->slot);
  delete request;
}

}  // namespace backplane::vulkan
