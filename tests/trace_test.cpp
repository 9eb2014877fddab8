// The trace layer (plugins/trace) through the public C API: cpu devices
// wrapped with bp_device_wrap in layer "trace", collectives and buffer
// operations on them, and the Chrome trace-event file read back with
// nlohmann::json: one X slice per call and rank with its args, thread
// names per rank, flows through the ranks of each collective, a file that
// is whole JSON after every flush and with 8 threads tracing at once, a
// ring smaller than the run, max_bytes, and the options refused.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backplane/backplane.h"
#include "backplane/backplane.hpp"
#include "backplane/plugin.h"
#include "test_support.hpp"

namespace {

using namespace backplane;
using namespace backplane::testing;
using Json = nlohmann::json;
namespace fs = std::filesystem;

// cpu devices and the trace layer, nothing else.
Host trace_host(std::size_t devices = 8) {
  Host host = make_cpu_host(R"({"cpu": {"devices": )" + std::to_string(devices) + "}}");
  Status loaded = host.load_plugin(plugin_path("trace").string());
  EXPECT_TRUE(loaded) << (loaded ? "" : std::string(loaded.error().message()));
  return host;
}

Device cpu(Host &host, std::size_t index) { return host.find_device("cpu:" + std::to_string(index)).value(); }

// bp_device_wrap of `over` in layer trace with `trace_options` (the object
// under "trace"), called `name` ("": the chain's text).
Result<Device> wrap_in_trace(Host &host, const Device &over, const std::string &trace_options,
                             const std::string &name) {
  const char *layers[] = {"trace"};
  const std::string options = R"({"trace": )" + trace_options + "}";
  bp_device_wrap_options wrap{};
  wrap.struct_size = sizeof wrap;
  wrap.name = name.empty() ? nullptr : name.c_str();
  wrap.over = over.get();
  wrap.layers = layers;
  wrap.layer_count = 1;
  wrap.options_json = options.c_str();
  bp_device *device = nullptr;
  if (bp_error *error = bp_device_wrap(host.get(), &wrap, &device)) return Error(error);
  return Device(device);
}

Status flush(Host &host) { return Status(bp_host_flush(host.get())); }

std::string file_option(const fs::path &file, const std::string &more = "") {
  return R"({"file": )" + Json(file.string()).dump() + (more.empty() ? "" : ", " + more) + "}";
}

// Devices cpu:first.. wrapped as <prefix><index>, all into `file`.
std::vector<Device> traced(Host &host, std::size_t first, std::size_t count, const fs::path &file,
                           const std::string &more = "", const std::string &prefix = "t") {
  std::vector<Device> devices;
  for (std::size_t i = first; i < first + count; ++i) {
    Result<Device> device = wrap_in_trace(host, cpu(host, i), file_option(file, more), prefix + std::to_string(i));
    if (!device) {
      ADD_FAILURE() << "wrapping cpu:" << i << ": " << device.error().message();
      throw Exception(device.error());
    }
    devices.push_back(*device);
  }
  return devices;
}

// A group over `devices` with a send and a recv buffer of `count` f32 per rank.
struct Rig {
  Rig(Host &host, const std::vector<Device> &devices, std::size_t count, const char *name = nullptr) : count(count) {
    group = host.create_group(devices, name).value();
    for (const Device &device : devices) {
      send.push_back(Buffer::create(device, count * sizeof(float) * devices.size()).value());
      recv.push_back(Buffer::create(device, count * sizeof(float) * devices.size()).value());
      raw_send.push_back(send.back().get());
      raw_recv.push_back(recv.back().get());
    }
  }
  Status all_reduce() { return group.all_reduce(raw_send, raw_recv, count, BP_F32, BP_SUM); }
  std::size_t count;
  Group group;
  std::vector<Buffer> send, recv;
  std::vector<bp_buffer *> raw_send, raw_recv;
};

// The file as JSON; a discarded value and a test failure when it is not.
Json read_trace(const fs::path &file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  Json parsed = Json::parse(text.str(), nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << file << " is not valid JSON; it ends with: "
                                      << text.str().substr(text.str().size() > 300 ? text.str().size() - 300 : 0);
  if (parsed.is_discarded()) return parsed;
  EXPECT_TRUE(parsed.is_object());
  EXPECT_EQ(parsed.value("displayTimeUnit", ""), "ns");
  EXPECT_TRUE(parsed.contains("traceEvents") && parsed["traceEvents"].is_array());
  return parsed;
}

std::vector<Json> events_where(const Json &trace, const std::string &phase, const std::string &cat = "") {
  std::vector<Json> found;
  if (trace.is_discarded() || !trace.contains("traceEvents")) return found;
  for (const Json &event : trace["traceEvents"])
    if (event.value("ph", "") == phase && (cat.empty() || event.value("cat", "") == cat)) found.push_back(event);
  return found;
}

// The last thread_name of each tid.
std::map<std::int64_t, std::string> thread_names(const Json &trace) {
  std::map<std::int64_t, std::string> names;
  for (const Json &event : events_where(trace, "M"))
    if (event.value("name", "") == "thread_name") names[event["tid"].get<std::int64_t>()] = event["args"]["name"];
  return names;
}

// A collective's X slices by (group_serial, call_serial).
using CallKey = std::pair<std::uint64_t, std::uint64_t>;
std::map<CallKey, std::vector<Json>> collectives_by_call(const Json &trace) {
  std::map<CallKey, std::vector<Json>> calls;
  for (const Json &event : events_where(trace, "X", "collective"))
    calls[CallKey(event["args"]["group_serial"].get<std::uint64_t>(),
                  event["args"]["call_serial"].get<std::uint64_t>())]
        .push_back(event);
  return calls;
}

std::int64_t dropped_count(const Json &trace) {
  std::int64_t dropped = 0;
  for (const Json &event : events_where(trace, "i"))
    if (event.value("name", "") == "dropped") dropped = event["args"]["dropped"];
  return dropped;
}

// Every flow of the file checked against the slices: each id's events are
// one s, then t's, then one f, in (ts, tid) order, each at the ts and on
// the tid of a slice of the call the id names (group_serial * 2^40 +
// call_serial, README.md). Returns each call's flow id.
std::map<CallKey, std::string> check_flows(const Json &trace) {
  std::map<std::string, std::vector<Json>> flows;
  for (const char *phase : {"s", "t", "f"})
    for (const Json &event : events_where(trace, phase)) flows[event["id"].get<std::string>()].push_back(event);
  // (call, tid) -> the ts of its slice
  std::map<std::pair<CallKey, std::int64_t>, double> slice_ts;
  for (const Json &slice : events_where(trace, "X", "collective")) {
    const CallKey call(slice["args"]["group_serial"].get<std::uint64_t>(),
                       slice["args"]["call_serial"].get<std::uint64_t>());
    slice_ts[{call, slice["tid"].get<std::int64_t>()}] = slice["ts"].get<double>();
  }
  std::map<CallKey, std::string> linked;
  for (auto &[id, steps] : flows) {
    EXPECT_EQ(id.rfind("0x", 0), 0u) << id;
    const std::uint64_t number = std::stoull(id.substr(2), nullptr, 16);
    const CallKey call(number >> 40, number & ((std::uint64_t{1} << 40) - 1));
    std::sort(steps.begin(), steps.end(), [](const Json &a, const Json &b) {
      return std::make_tuple(a["ts"].get<double>(), a["tid"].get<std::int64_t>()) <
             std::make_tuple(b["ts"].get<double>(), b["tid"].get<std::int64_t>());
    });
    EXPECT_GE(steps.size(), 2u) << id;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Json &step = steps[i];
      const std::string expected = i == 0 ? "s" : i + 1 == steps.size() ? "f" : "t";
      EXPECT_EQ(step["ph"], expected) << id << " step " << i;
      EXPECT_EQ(step.value("bp", ""), "e") << id;
      EXPECT_EQ(step.value("cat", ""), "collective") << id;
      EXPECT_EQ(step.value("pid", 0), getpid()) << id;
      auto slice = slice_ts.find({call, step["tid"].get<std::int64_t>()});
      if (slice == slice_ts.end()) {
        ADD_FAILURE() << "flow " << id << " has a step on tid " << step["tid"] << ", where call " << call.first << "/"
                      << call.second << " has no slice";
        continue;
      }
      EXPECT_EQ(step["ts"].get<double>(), slice->second) << "flow " << id << " on tid " << step["tid"];
    }
    linked[call] = id;
  }
  return linked;
}

// ---- the plugin as a host sees it, through dlopen and the plugin ABI ----

struct Refusal {
  std::int32_t code = BP_OK;
  std::string message;
};
void report_error(bp_error_sink *sink, std::int32_t code, const char *message) {
  auto *refusal = reinterpret_cast<Refusal *>(sink);
  refusal->code = code;
  refusal->message = message;
}
void ignore_log(void *, std::int32_t, const char *, const char *) {}
std::int32_t no_device(const struct bp_device *, bp_layer_device_facts *) { return BP_INVALID_ARGUMENT; }
std::int32_t no_buffer(const struct bp_buffer *, bp_layer_buffer_facts *) { return BP_INVALID_ARGUMENT; }
std::int32_t no_read(const struct bp_buffer *, std::size_t, void *, std::size_t, bp_error_sink *) {
  return BP_INVALID_ARGUMENT;
}

TEST(TracePlugin, IsALayerOnlyPluginAndRefusesAHostWithoutLayers) {
  void *handle = dlopen(plugin_path("trace").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  const auto entry = reinterpret_cast<bp_plugin_entry_fn>(dlsym(handle, BP_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  const bp_host_services old_services = {
      BP_HOST_SERVICES_SIZE_V1_0, nullptr, report_error, ignore_log, nullptr, nullptr, nullptr, nullptr};
  const bp_host_services services = {
      sizeof(bp_host_services), nullptr, report_error, ignore_log, nullptr, no_device, no_buffer, no_read};
  const auto enter = [&](std::uint32_t minor, const bp_host_services *lent, Refusal &refusal) {
    bp_plugin_entry_args args{};
    args.struct_size = sizeof args;
    args.host_abi_major = BP_PLUGIN_ABI_MAJOR;
    args.host_abi_minor = minor;
    args.services = lent;
    args.sink = reinterpret_cast<bp_error_sink *>(&refusal);
    args.options_json = "{}";
    refusal.code = entry(&args);
    return args;
  };
  // A 1.2 host, and a 1.3 one without the layer services: refused with a reason.
  for (const auto &[minor, lent] : {std::pair{2u, &old_services}, std::pair{3u, &old_services}}) {
    Refusal refusal;
    const bp_plugin_entry_args args = enter(minor, lent, refusal);
    EXPECT_EQ(refusal.code, BP_PLUGIN_ABI) << minor;
    EXPECT_NE(refusal.message.find("1.3"), std::string::npos) << refusal.message;
    EXPECT_EQ(args.state, nullptr);
  }
  Refusal refusal;
  const bp_plugin_entry_args args = enter(BP_PLUGIN_ABI_MINOR, &services, refusal);
  ASSERT_EQ(refusal.code, BP_OK) << refusal.message;
  ASSERT_NE(args.descriptor, nullptr);
  const bp_plugin_descriptor &descriptor = *args.descriptor;
  EXPECT_STREQ(descriptor.name, "trace");
  EXPECT_EQ(descriptor.device_kind_count, 0u);
  EXPECT_EQ(descriptor.capability_count, 0u);
  // Only destroy in the function table.
  const bp_plugin_functions &functions = *descriptor.functions;
  EXPECT_NE(functions.destroy, nullptr);
  EXPECT_EQ(functions.configure, nullptr);
  EXPECT_EQ(functions.device_count, nullptr);
  EXPECT_EQ(functions.buffer_create, nullptr);
  EXPECT_EQ(functions.collective_start, nullptr);
  EXPECT_EQ(functions.comm_info, nullptr);
  // The layer table on the descriptor's chain.
  ASSERT_NE(descriptor.next, nullptr);
  const auto &table = *static_cast<const bp_layer_table *>(descriptor.next);
  EXPECT_EQ(table.type, BP_EXTENSION_LAYER_TABLE);
  EXPECT_GE(table.struct_size, BP_LAYER_TABLE_SIZE_V1_3);
  ASSERT_EQ(table.kind_count, 1u);
  const bp_layer_kind &kind = table.kinds[0];
  EXPECT_STREQ(kind.name, "trace");
  EXPECT_EQ(kind.flags, BP_LAYER_TIMED) << "timed and not stackable";
  EXPECT_EQ(kind.device_kind_count, 0u);
  ASSERT_EQ(kind.option_count, 3u);
  EXPECT_STREQ(kind.options[0].name, "file");
  EXPECT_EQ(kind.options[0].flags, BP_LAYER_OPTION_PATH);
  EXPECT_STREQ(kind.options[1].name, "ring_events");
  EXPECT_EQ(kind.options[1].flags, 0u);
  EXPECT_STREQ(kind.options[2].name, "max_bytes");
  EXPECT_EQ(kind.options[2].flags, 0u);
  const bp_layer_functions &layer = *table.functions;
  EXPECT_NE(layer.instance_create, nullptr);
  EXPECT_NE(layer.instance_destroy, nullptr);
  EXPECT_EQ(layer.before, nullptr);
  EXPECT_NE(layer.after, nullptr);
  EXPECT_NE(layer.flush, nullptr);
  functions.destroy(args.state);
  dlclose(handle);
}

class TraceTest : public ::testing::Test {
 protected:
  TempDir dir;
  fs::path file = dir.path() / "trace.json";
};

TEST_F(TraceTest, TheLayerIsTimedNotStackableAndTakesThreeOptions) {
  Host host = trace_host();
  const std::vector<PluginInfo> plugins = host.plugins();
  const PluginInfo *plugin = find_plugin(plugins, "trace");
  ASSERT_NE(plugin, nullptr);
  EXPECT_TRUE(plugin->device_kinds.empty());
  bool found = false;
  for (const LayerKindInfo &kind : host.layer_kinds()) {
    if (kind.name != "trace") continue;
    found = true;
    EXPECT_EQ(kind.plugin, "trace");
    EXPECT_FALSE(kind.stackable);
    EXPECT_TRUE(kind.device_kinds.empty());
    ASSERT_EQ(kind.options.size(), 3u);
    EXPECT_EQ(kind.options[0].first, "file");
    EXPECT_EQ(kind.options[1].first, "ring_events");
    EXPECT_EQ(kind.options[2].first, "max_bytes");
  }
  EXPECT_TRUE(found);
  // Not stackable: trace over trace is the host's BP_NESTED_LAYER.
  Device t0 = traced(host, 0, 1, file).at(0);
  Result<Device> twice = wrap_in_trace(host, t0, file_option(file), "tt0");
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code(), BP_NESTED_LAYER) << twice.error().message();
}

TEST_F(TraceTest, EveryCallAndRankIsOneSliceWithItsArgs) {
  {
    Host host = trace_host();
    std::vector<Device> devices = traced(host, 0, 4, file);
    Rig rig(host, devices, 16, "quad");
    const std::vector<float> ones(16 * 4, 1.0f);
    for (Buffer &buffer : rig.send) ASSERT_TRUE(buffer.write(0, ones.data(), ones.size() * sizeof(float)));
    ASSERT_TRUE(rig.all_reduce());                                                          // call 1
    ASSERT_TRUE(rig.group.broadcast(rig.raw_send, rig.raw_recv, 16, BP_F32, 2));            // 2
    ASSERT_TRUE(rig.group.all_reduce(rig.raw_send, rig.raw_send, 16, BP_F32, BP_MAX));      // 3, in place
    ASSERT_TRUE(rig.group.barrier());                                                       // 4
    ASSERT_TRUE(rig.group.reduce_scatter(rig.raw_send, rig.raw_recv, 16, BP_F32, BP_SUM));  // 5
    bp_event *event = nullptr;                                                              // 6, async
    bp_error *error =
        bp_all_reduce_async(rig.group.get(), rig.raw_send.data(), rig.raw_recv.data(), 16, BP_F32, BP_MIN, &event);
    ASSERT_EQ(error, nullptr) << bp_error_message(error);
    Event owned(event);
    ASSERT_TRUE(owned.wait());
    std::vector<float> out(16);
    ASSERT_TRUE(rig.recv[1].read(4, out.data(), 8 * sizeof(float)));
  }  // the host's destruction writes the file

  const Json trace = read_trace(file);
  ASSERT_FALSE(trace.is_discarded());
  const std::vector<Json> meta = events_where(trace, "M");
  bool process_named = false;
  for (const Json &event : meta)
    if (event["name"] == "process_name") {
      process_named = true;
      EXPECT_EQ(event["args"]["name"], "backplane");
      EXPECT_EQ(event["pid"], getpid());
    }
  EXPECT_TRUE(process_named);

  const auto calls = collectives_by_call(trace);
  ASSERT_EQ(calls.size(), 6u);
  struct Expected {
    const char *collective;
    const char *op;  // nullptr: none in args
    bool in_place, async, has_root;
    std::uint64_t bytes;
  };
  const Expected expected[] = {
      {"all_reduce", "sum", false, false, false, 64},      {"broadcast", nullptr, false, false, true, 64},
      {"all_reduce", "max", true, false, false, 64},       {"barrier", nullptr, false, false, false, 0},
      {"reduce_scatter", "sum", false, false, false, 256}, {"all_reduce", "min", false, true, false, 64},
  };
  std::uint64_t call_serial = 0, group_serial = 0;
  for (const auto &[key, slices] : calls) {
    ASSERT_LT(call_serial, 6u);
    const Expected &want = expected[call_serial];
    EXPECT_EQ(key.second, ++call_serial);
    if (group_serial == 0) group_serial = key.first;
    EXPECT_EQ(key.first, group_serial);
    ASSERT_EQ(slices.size(), 4u) << want.collective;
    std::set<std::int64_t> ranks;
    for (const Json &slice : slices) {
      const Json &args = slice["args"];
      const std::int64_t rank = args["rank"];
      ranks.insert(rank);
      EXPECT_EQ(slice["name"], want.collective);
      EXPECT_EQ(slice["tid"], rank);
      EXPECT_EQ(slice["pid"], getpid());
      EXPECT_EQ(args["operation"], "collective");
      EXPECT_EQ(args["collective"], want.collective);
      EXPECT_EQ(args.contains("dtype"), std::string(want.collective) != "barrier");
      if (args.contains("dtype")) {
        EXPECT_EQ(args["dtype"], "f32");
      }
      EXPECT_EQ(args.contains("reduce_op"), want.op != nullptr) << want.collective;
      if (want.op) {
        EXPECT_EQ(args["reduce_op"], want.op);
      }
      EXPECT_EQ(args["count"], std::string(want.collective) == "barrier" ? 0 : 16);
      EXPECT_EQ(args["bytes"], want.bytes) << want.collective;
      EXPECT_EQ(args["group"], "quad");
      EXPECT_EQ(args["rank_count"], 4);
      EXPECT_EQ(args.contains("root"), want.has_root);
      if (want.has_root) {
        EXPECT_EQ(args["root"], 2);
      }
      EXPECT_EQ(args["in_place"], want.in_place) << want.collective;
      EXPECT_EQ(args["async"], want.async);
      EXPECT_EQ(args["device"], "t" + std::to_string(rank));
      EXPECT_EQ(args["plugin"], "cpu");
      EXPECT_EQ(args["outcome"], "OK");
      EXPECT_FALSE(args.contains("message"));
      const std::int64_t start = args["start_ns"], end = args["end_ns"];
      EXPECT_GT(start, 0);
      EXPECT_LE(start, end);
      EXPECT_NEAR(slice["ts"].get<double>(), static_cast<double>(start) / 1000, 0.0011);
      EXPECT_NEAR(slice["dur"].get<double>(), static_cast<double>(end - start) / 1000, 0.0011);
    }
    EXPECT_EQ(ranks, (std::set<std::int64_t>{0, 1, 2, 3}));
  }

  // Buffers: 8 made, 4 written, 1 read, 8 destroyed, each on its device's
  // own buffer thread, away from the ranks.
  std::map<std::string, int> operations;
  std::set<std::int64_t> buffer_tids;
  for (const Json &slice : events_where(trace, "X", "buffer")) {
    ++operations[slice["name"]];
    EXPECT_EQ(slice["name"], slice["args"]["operation"]);
    EXPECT_GE(slice["tid"].get<std::int64_t>(), 1000);
    EXPECT_EQ(slice["args"]["plugin"], "cpu");
    EXPECT_EQ(slice["args"]["outcome"], "OK");
    buffer_tids.insert(slice["tid"].get<std::int64_t>());
    if (slice["name"] == "buffer_read") {
      EXPECT_EQ(slice["args"]["offset"], 4);
      EXPECT_EQ(slice["args"]["bytes"], 32);
      EXPECT_EQ(slice["args"]["device"], "t1");
    }
    if (slice["name"] == "buffer_create") {
      EXPECT_EQ(slice["args"]["bytes"], 256);
    }
  }
  EXPECT_EQ(operations, (std::map<std::string, int>{
                            {"buffer_create", 8}, {"buffer_write", 4}, {"buffer_read", 1}, {"buffer_destroy", 8}}));
  EXPECT_EQ(buffer_tids.size(), 4u);

  const auto names = thread_names(trace);
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(names.count(rank) ? names.at(rank) : "<none>",
              "rank " + std::to_string(rank) + " \u00B7 t" + std::to_string(rank));
  for (std::int64_t tid : buffer_tids) {
    ASSERT_TRUE(names.count(tid)) << tid;
    EXPECT_EQ(names.at(tid).rfind("buffers \u00B7 t", 0), 0u) << names.at(tid);
  }
}

TEST_F(TraceTest, AFailedCallCarriesItsCodeAndMessage) {
#if defined(__SANITIZE_ADDRESS__)
  // The failure is a 4 EiB buffer the cpu plugin cannot allocate;
  // AddressSanitizer's allocator aborts on such a request instead of failing it.
  GTEST_SKIP() << "AddressSanitizer aborts on a 4 EiB allocation instead of failing it";
#endif
  std::string code, message;
  {
    Host host = trace_host();
    Device t0 = traced(host, 0, 1, file).at(0);
    Result<Buffer> huge = Buffer::create(t0, std::size_t{1} << 62);
    ASSERT_FALSE(huge);
    code = huge.error().code_name();
    message = huge.error().message();
  }
  const Json trace = read_trace(file);
  const std::vector<Json> slices = events_where(trace, "X", "buffer");
  ASSERT_EQ(slices.size(), 1u);
  const Json &args = slices[0]["args"];
  EXPECT_EQ(args["operation"], "buffer_create");
  EXPECT_EQ(args["bytes"], std::uint64_t{1} << 62);
  EXPECT_EQ(args["outcome"], code);
  EXPECT_NE(args["outcome"], "OK");
  ASSERT_TRUE(args.contains("message"));
  // The host adds context to the plugin's message on its way out.
  EXPECT_FALSE(args["message"].get<std::string>().empty());
  EXPECT_NE(message.find(args["message"].get<std::string>()), std::string::npos) << args["message"] << " | " << message;
}

TEST_F(TraceTest, FlowsLinkTheRanksOfEachCollective) {
  {
    Host host = trace_host();
    Rig rig(host, traced(host, 0, 4, file), 2);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(rig.all_reduce());
  }
  const Json trace = read_trace(file);
  const auto calls = collectives_by_call(trace);
  ASSERT_EQ(calls.size(), 20u);
  const auto linked = check_flows(trace);
  std::set<std::string> ids;
  for (const auto &[call, slices] : calls) {
    ASSERT_TRUE(linked.count(call)) << "call " << call.second << " has no flow";
    ids.insert(linked.at(call));
  }
  EXPECT_EQ(ids.size(), 20u) << "one id per call";
  // 4 ranks: s, t, t, f per call; the first by (ts, rank) is rank 0 here,
  // since the host times a collective once for all its ranks.
  EXPECT_EQ(events_where(trace, "s").size(), 20u);
  EXPECT_EQ(events_where(trace, "t").size(), 40u);
  EXPECT_EQ(events_where(trace, "f").size(), 20u);
  for (const Json &start : events_where(trace, "s")) EXPECT_EQ(start["tid"], 0);
  for (const Json &finish : events_where(trace, "f")) EXPECT_EQ(finish["tid"], 3);
}

TEST_F(TraceTest, ThreadNamesListEveryDeviceSeenAtARank) {
  {
    Host host = trace_host();
    Rig first(host, traced(host, 0, 2, file), 2, "first");
    Rig second(host, traced(host, 4, 2, file), 2, "second");
    ASSERT_TRUE(first.all_reduce());
    ASSERT_TRUE(second.all_reduce());
  }
  const Json trace = read_trace(file);
  const auto names = thread_names(trace);
  EXPECT_EQ(names.at(0), "rank 0 \u00B7 t0, t4");
  EXPECT_EQ(names.at(1), "rank 1 \u00B7 t1, t5");
  std::set<std::string> groups;
  for (const Json &slice : events_where(trace, "X", "collective")) groups.insert(slice["args"]["group"]);
  EXPECT_EQ(groups, (std::set<std::string>{"first", "second"}));
}

TEST_F(TraceTest, AnUnnamedDeviceShowsItsBaseInThreadNames) {
  {
    Host host = trace_host();
    Result<Device> device = wrap_in_trace(host, cpu(host, 3), file_option(file), "");
    ASSERT_TRUE(device) << device.error().message();
    std::vector<Device> one{*device};
    Rig rig(host, one, 2);
    ASSERT_TRUE(rig.all_reduce());
  }
  const Json trace = read_trace(file);
  EXPECT_EQ(thread_names(trace).at(0), "rank 0 \u00B7 cpu:3");
  const std::vector<Json> slices = events_where(trace, "X", "collective");
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0]["args"]["device"], "trace \u2192 cpu:3");
  EXPECT_EQ(slices[0]["args"]["group"], "");
  EXPECT_TRUE(events_where(trace, "s").empty()) << "one rank: nothing to link";
}

TEST_F(TraceTest, TheFileIsWholeJsonAfterEachFlush) {
  std::optional<Host> host(trace_host());
  {
    Rig rig(*host, traced(*host, 0, 4, file), 2);
    // Created, and written empty, at the wrap.
    const Json empty = read_trace(file);
    EXPECT_TRUE(events_where(empty, "X").empty());
    for (int round = 1; round <= 3; ++round) {
      for (int i = 0; i < 10; ++i) ASSERT_TRUE(rig.all_reduce());
      ASSERT_TRUE(flush(*host));
      const Json trace = read_trace(file);
      EXPECT_EQ(events_where(trace, "X", "collective").size(), 40u * round) << "round " << round;
      EXPECT_EQ(check_flows(trace).size(), 10u * round);
    }
    ASSERT_TRUE(flush(*host));  // nothing new: the file stays as it was
    EXPECT_EQ(events_where(read_trace(file), "X", "collective").size(), 120u);
  }
  host.reset();
  const Json trace = read_trace(file);
  EXPECT_EQ(events_where(trace, "X", "collective").size(), 120u);
  EXPECT_EQ(events_where(trace, "X", "buffer").size(), 16u);  // 8 created, 8 destroyed
}

TEST_F(TraceTest, ARingSmallerThanTheRunWritesSeveralTimesAndKeepsEveryEvent) {
  constexpr int kCalls = 100;
  {
    Host host = trace_host();
    Rig rig(host, traced(host, 0, 4, file, R"("ring_events": 16)"), 2);
    std::uintmax_t last_size = fs::file_size(file);
    int growths = 0;
    for (int i = 0; i < kCalls; ++i) {
      ASSERT_TRUE(rig.all_reduce());
      // No flush: the ring (16 events, 4 calls) writes itself out.
      const std::uintmax_t size = fs::file_size(file);
      if (size != last_size) {
        ++growths;
        last_size = size;
        if (growths % 10 == 0) read_trace(file);  // whole between write-outs
      }
    }
    EXPECT_GE(growths, kCalls * 4 / 16 - 2);
  }
  const Json trace = read_trace(file);
  const auto calls = collectives_by_call(trace);
  ASSERT_EQ(calls.size(), static_cast<std::size_t>(kCalls));
  for (const auto &[call, slices] : calls) EXPECT_EQ(slices.size(), 4u) << "call " << call.second;
  // A call cut in two by a write-out waits for its other ranks.
  EXPECT_EQ(check_flows(trace).size(), static_cast<std::size_t>(kCalls));
  EXPECT_EQ(dropped_count(trace), 0);
}

TEST_F(TraceTest, EightThreadsTraceIntoOneFile) {
  constexpr int kThreads = 8, kCalls = 300;
  for (const bool small_ring : {false, true}) {
    SCOPED_TRACE(small_ring ? "ring of 64 events" : "default ring");
    const fs::path shared = dir.path() / (small_ring ? "small.json" : "large.json");
    {
      Host host = trace_host(16);
      std::vector<Device> devices = traced(host, 0, 16, shared, small_ring ? R"("ring_events": 64)" : "");
      std::vector<std::unique_ptr<Rig>> rigs;
      for (int t = 0; t < kThreads; ++t) {
        const std::vector<Device> pair{devices[2 * t], devices[2 * t + 1]};
        rigs.push_back(std::make_unique<Rig>(host, pair, 2, ("g" + std::to_string(t)).c_str()));
      }
      std::atomic<int> failures{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
          for (int i = 0; i < kCalls; ++i)
            if (!rigs[t]->all_reduce()) ++failures;
        });
      // With the default ring nothing but a flush writes the file, so it
      // must read whole after each while the threads go on.
      for (int flushes = 0; !small_ring && flushes < 5; ++flushes) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        EXPECT_TRUE(flush(host));
        read_trace(shared);
      }
      for (std::thread &thread : threads) thread.join();
      EXPECT_EQ(failures.load(), 0);
    }
    const Json trace = read_trace(shared);
    const auto calls = collectives_by_call(trace);
    ASSERT_EQ(calls.size(), static_cast<std::size_t>(kThreads * kCalls));
    std::map<std::string, int> per_group;
    for (const auto &[call, slices] : calls) {
      ASSERT_EQ(slices.size(), 2u);
      ++per_group[slices[0]["args"]["group"]];
    }
    EXPECT_EQ(per_group.size(), static_cast<std::size_t>(kThreads));
    for (const auto &[group, count] : per_group) EXPECT_EQ(count, kCalls) << group;
    // Every flow well formed; with the default ring each call has one.
    const auto linked = check_flows(trace);
    if (!small_ring) {
      EXPECT_EQ(linked.size(), calls.size());
    }
    // Rank 0 saw the first device of every pair, in whatever order the threads came.
    const std::string rank0 = thread_names(trace).at(0);
    const std::string prefix = "rank 0 \u00B7 ";
    ASSERT_EQ(rank0.rfind(prefix, 0), 0u) << rank0;
    std::set<std::string> seen, expected;
    std::stringstream list(rank0.substr(prefix.size()));
    for (std::string name; std::getline(list, name, ',');) seen.insert(name.substr(name.find_first_not_of(' ')));
    for (int t = 0; t < kThreads; ++t) expected.insert("t" + std::to_string(2 * t));
    EXPECT_EQ(seen, expected) << rank0;
  }
}

TEST_F(TraceTest, MaxBytesDropsTheRestAndCountsIt) {
  constexpr std::uint64_t kLimit = 8192;
  constexpr int kCalls = 200;
  {
    Host host = trace_host();
    Rig rig(host, traced(host, 0, 4, file, "\"max_bytes\": " + std::to_string(kLimit)), 2);
    for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(rig.all_reduce());
    ASSERT_TRUE(flush(host));
    EXPECT_LE(fs::file_size(file), kLimit);
  }
  EXPECT_LE(fs::file_size(file), kLimit);
  const Json trace = read_trace(file);
  const std::size_t kept = events_where(trace, "X").size();
  EXPECT_GT(kept, 0u);
  // 4 ranks per call, and 16 buffer operations (8 made, 8 destroyed).
  EXPECT_EQ(static_cast<std::size_t>(dropped_count(trace)) + kept, kCalls * 4u + 16u);
  for (const Json &event : events_where(trace, "i")) {
    if (event["name"] == "dropped") {
      EXPECT_EQ(event["args"]["max_bytes"], kLimit);
    }
  }
}

TEST_F(TraceTest, AFileThatCannotBeCreatedIsRefusedAtWrap) {
  Host host = trace_host();
  const fs::path missing = dir.path() / "no such folder" / "t.json";
  Result<Device> refused = wrap_in_trace(host, cpu(host, 0), file_option(missing), "t0");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_CONFIG);
  const std::string message(refused.error().message());
  EXPECT_NE(message.find(missing.string()), std::string::npos) << message;
  EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  EXPECT_NE(message.find("\"file\""), std::string::npos) << message;
  // A folder is no file either.
  Result<Device> folder = wrap_in_trace(host, cpu(host, 0), file_option(dir.path()), "t0");
  ASSERT_FALSE(folder);
  EXPECT_EQ(folder.error().code(), BP_CONFIG) << folder.error().message();
  // The host goes on: the same device wraps with a good file.
  EXPECT_TRUE(wrap_in_trace(host, cpu(host, 0), file_option(file), "t0"));
}

TEST_F(TraceTest, AWriteThatFailsIsLoggedReturnedByFlushAndTheFileRecovers) {
  CapturedLog log;
  Host host = trace_host();
  Rig rig(host, traced(host, 0, 4, file), 2);
  ASSERT_TRUE(rig.all_reduce());
  ASSERT_TRUE(flush(host));
  // The process may not grow a file past what it is now (and 100 bytes):
  // the next write-out fails half-way with EFBIG.
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = static_cast<rlim_t>(fs::file_size(file) + 100);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(rig.all_reduce()) << "a trace that cannot write fails no call";
  const Status failed = flush(host);
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), BP_DEVICE_FAILURE);
  const std::string message(failed.error().message());
  EXPECT_NE(message.find(file.string()), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_FALSE(log.mentioning("80 events lost").empty()) << log.all();
  // The file is as it was before the failed write-out, and whole.
  EXPECT_EQ(events_where(read_trace(file), "X", "collective").size(), 4u);
  // The next write-out works again; the lost events stay lost.
  ASSERT_TRUE(rig.all_reduce());
  ASSERT_TRUE(flush(host)) << "the failure was reported once";
  const Json trace = read_trace(file);
  EXPECT_EQ(events_where(trace, "X", "collective").size(), 8u);
  EXPECT_EQ(thread_names(trace).at(3), "rank 3 \u00B7 t3");
}

TEST_F(TraceTest, BadOptionValuesAreRefusedNamingTheOption) {
  Host host = trace_host();
  struct Case {
    std::string more;  // beside "file"
    const char *option;
  };
  const Case cases[] = {
      {R"("ring_events": 8)", "ring_events"},    {R"("ring_events": 16777217)", "ring_events"},
      {R"("ring_events": "64")", "ring_events"}, {R"("ring_events": 64.5)", "ring_events"},
      {R"("ring_events": -1)", "ring_events"},   {R"("ring_events": true)", "ring_events"},
      {R"("max_bytes": 100)", "max_bytes"},      {R"("max_bytes": "1MiB")", "max_bytes"},
      {R"("max_bytes": null)", "max_bytes"},     {R"("rings": 64)", "rings"},
  };
  for (const Case &test : cases) {
    Result<Device> refused = wrap_in_trace(host, cpu(host, 0), file_option(file, test.more), "t0");
    ASSERT_FALSE(refused) << test.more;
    EXPECT_EQ(refused.error().code(), BP_CONFIG) << test.more;
    const std::string message(refused.error().message());
    EXPECT_NE(message.find(test.option), std::string::npos) << test.more << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  for (const char *file_value : {"42", "\"\"", "[\"a.json\"]"}) {
    Result<Device> refused = wrap_in_trace(host, cpu(host, 0), std::string(R"({"file": )") + file_value + "}", "t0");
    ASSERT_FALSE(refused) << file_value;
    EXPECT_EQ(refused.error().code(), BP_CONFIG) << file_value;
    EXPECT_NE(refused.error().message().find("file"), std::string::npos) << refused.error().message();
  }
  // The limits themselves are accepted.
  EXPECT_TRUE(wrap_in_trace(host, cpu(host, 0), file_option(file, R"("ring_events": 16, "max_bytes": 4096)"), "a"));
}

TEST_F(TraceTest, DevicesSharingAFileMustAgreeOnItsRingAndLimit) {
  Host host = trace_host();
  ASSERT_TRUE(wrap_in_trace(host, cpu(host, 0), file_option(file, R"("ring_events": 64)"), "t0"));
  Result<Device> ring = wrap_in_trace(host, cpu(host, 1), file_option(file, R"("ring_events": 128)"), "t1");
  ASSERT_FALSE(ring);
  EXPECT_EQ(ring.error().code(), BP_CONFIG);
  EXPECT_NE(ring.error().message().find("ring_events"), std::string::npos) << ring.error().message();
  Result<Device> limit =
      wrap_in_trace(host, cpu(host, 1), file_option(file, R"("ring_events": 64, "max_bytes": 5000)"), "t1");
  ASSERT_FALSE(limit);
  EXPECT_EQ(limit.error().code(), BP_CONFIG);
  EXPECT_NE(limit.error().message().find("max_bytes"), std::string::npos) << limit.error().message();
  // The same file spelled another way is the same file: 64 rounds up from 40.
  const fs::path respelled = dir.path() / "." / "trace.json";
  EXPECT_TRUE(wrap_in_trace(host, cpu(host, 1), file_option(respelled, R"("ring_events": 40)"), "t1"));
}

TEST_F(TraceTest, TwoHostsDoNotWriteOneFileAtOnce) {
  std::optional<Host> first(trace_host());
  ASSERT_TRUE(wrap_in_trace(*first, cpu(*first, 0), file_option(file), "t0"));
  Host second = trace_host();
  Result<Device> refused = wrap_in_trace(second, cpu(second, 0), file_option(file), "t0");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_CONFIG);
  EXPECT_NE(refused.error().message().find("another host"), std::string::npos) << refused.error().message();
  // Once the first host is gone, the file is free (and starts over).
  first.reset();
  EXPECT_TRUE(wrap_in_trace(second, cpu(second, 0), file_option(file), "t0"));
}

TEST_F(TraceTest, WithoutAFileTheTraceGoesToTheWorkingDirectory) {
  const fs::path was = fs::current_path();
  fs::current_path(dir.path());
  {
    Host host = trace_host();
    Result<Device> device = wrap_in_trace(host, cpu(host, 0), "{}", "t0");
    ASSERT_TRUE(device) << device.error().message();
  }
  fs::current_path(was);
  const fs::path expected = dir.path() / ("backplane-trace-" + std::to_string(getpid()) + ".json");
  ASSERT_TRUE(fs::exists(expected));
  read_trace(expected);
}

TEST_F(TraceTest, TheHotPathCostsLittle) {
  // 8-byte all_reduce on 4 ranks, traced and not, in one process; the ring
  // holds every event of the timed calls, so what is timed is the hot path
  // (the host's hooks and clock reads, and `after`), and the write-out
  // they leave is timed apart. The budget is 150 ns per call and rank;
  // shared machines vary a lot, so the test fails only far beyond it (a
  // system call or an allocation per call would), and prints what it measured.
  constexpr int kCalls = 4000, kRounds = 5, kWarmUp = 1000;
  constexpr std::size_t kEvents = std::size_t{kCalls} * kRounds * 4;  // about 42 MB of file
  Host host = trace_host();
  std::vector<Device> plain;
  for (std::size_t i = 4; i < 8; ++i) plain.push_back(cpu(host, i));
  Rig bare(host, plain, 2);
  Rig traced_rig(host, traced(host, 0, 4, file, R"("ring_events": 131072)"), 2);
  const auto time_calls = [&](Rig &rig) {
    double best = 1e30;
    for (int round = 0; round < kRounds; ++round) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i)
        if (!rig.all_reduce()) return -1.0;
      const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
      best = std::min(best, ns / kCalls);
    }
    return best;
  };
  time_calls(bare);
  for (int i = 0; i < kWarmUp; ++i) ASSERT_TRUE(traced_rig.all_reduce());
  ASSERT_TRUE(flush(host));  // the warm-up's events out of the ring
  const double untraced_ns = time_calls(bare), traced_ns = time_calls(traced_rig);
  ASSERT_GT(untraced_ns, 0);
  ASSERT_GT(traced_ns, 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(flush(host));
  const double write_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / kEvents;
  const double per_rank = (traced_ns - untraced_ns) / 4;
  std::printf(
      "all_reduce 8 B x 4 ranks: %.0f ns untraced, %.0f ns traced: %.0f ns per call and rank; "
      "writing them out: %.0f ns per call and rank\n",
      untraced_ns, traced_ns, per_rank, write_ns);
  EXPECT_LT(per_rank, 1000) << "the trace layer's hot path takes " << per_rank << " ns per call and rank";
  EXPECT_EQ(events_where(read_trace(file), "X", "collective").size(), kEvents + 4 * kWarmUp);
}

}  // namespace
