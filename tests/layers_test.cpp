// Layered devices through the C API, with the fixture layer plugin
// (fixtures/layer_plugin.cpp): the nesting rules checked when a device is
// built, each with its code and chain; the hooks around buffer operations
// and collectives, in order; a layer that refuses and the host going on;
// dispatch on the base device; every kind of this machine under two layers.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <fstream>
#include <thread>

#include "backplane/backplane.h"
#include "backplane/backplane.hpp"
#include "test_support.hpp"

namespace {

using namespace backplane;
using namespace backplane::testing;

std::vector<std::string> read_lines(const std::filesystem::path &file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

Host layered_cpu_host(const std::string &options = R"({"cpu": {"devices": 4}})") {
  Host host = make_cpu_host(options);
  EXPECT_TRUE(host.load_plugin(fixture_path("layer_fixture").string()));
  return host;
}

Device cpu(const Host &host, uint32_t index) {
  return devices_of_kind(host, "cpu").at(index);
}

nlohmann::json error_json(const Error &error) { return nlohmann::json::parse(error.json()); }

TEST(LayerKinds, AreListedWithTheirRules) {
  Host host = layered_cpu_host();
  const std::vector<PluginInfo> plugins = host.plugins();
  const PluginInfo *plugin = find_plugin(plugins, "layer_fixture");
  ASSERT_NE(plugin, nullptr);
  EXPECT_TRUE(plugin->device_kinds.empty());
  EXPECT_EQ(plugin->layer_kinds, (std::vector<std::string>{"empty", "journal", "vulkan_only"}));
  std::vector<LayerKindInfo> kinds = host.layer_kinds();
  ASSERT_EQ(kinds.size(), 3u);
  EXPECT_EQ(kinds[0].name, "empty");
  EXPECT_TRUE(kinds[0].stackable);
  EXPECT_TRUE(kinds[0].device_kinds.empty());
  EXPECT_EQ(kinds[1].name, "journal");
  EXPECT_FALSE(kinds[1].stackable);
  ASSERT_EQ(kinds[1].options.size(), 3u);
  EXPECT_EQ(kinds[1].options[0].first, "journal");
  EXPECT_EQ(kinds[2].device_kinds, std::vector<std::string>{"vulkan"});
  EXPECT_EQ(kinds[2].plugin, "layer_fixture");
}

TEST(LayerKinds, ADuplicateKindOrAMissingCreateIsRefused) {
  Host host = layered_cpu_host();
  Status conflict = host.load_plugin(fixture_path("layer_conflict").string());
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().code(), BP_PLUGIN_CONFLICT);
  EXPECT_NE(conflict.error().message().find("layer kind 'empty'"), std::string::npos) << conflict.error().message();
  Status no_create = host.load_plugin(fixture_path("layer_no_create").string());
  ASSERT_FALSE(no_create);
  EXPECT_EQ(no_create.error().code(), BP_PLUGIN_INIT);
  EXPECT_NE(no_create.error().message().find("instance_create"), std::string::npos);
  EXPECT_EQ(host.layer_kinds().size(), 3u);  // the host kept what it had
}

TEST(LayeredDevices, WrapFromCListsTheChainAndUnwrapsToTheBase) {
  Host host = layered_cpu_host();
  Device base = cpu(host, 0);
  Result<Device> inner = host.wrap(base, {"empty"}, "", "e0");
  ASSERT_TRUE(inner) << inner.error().message();
  Result<Device> outer = host.wrap(*inner, {"journal", "empty"}, "", "j0");
  ASSERT_TRUE(outer) << outer.error().message();
  Result<DeviceInfo> info = outer->info();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->name, "j0");
  EXPECT_EQ(info->kind, "cpu");
  EXPECT_EQ(info->plugin, "cpu");
  EXPECT_EQ(info->layers, (std::vector<std::string>{"journal", "empty", "empty"}));
  EXPECT_EQ(info->over, "e0");
  EXPECT_EQ(info->base, "cpu:0");
  EXPECT_EQ(info->chain, "journal \u2192 empty \u2192 empty \u2192 cpu:0");
  EXPECT_EQ(bp_device_base(outer->get()), base.get());
  EXPECT_EQ(bp_device_base(inner->get()), base.get());
  EXPECT_EQ(bp_device_base(base.get()), base.get());
  EXPECT_EQ(bp_device_base(nullptr), nullptr);
  // Listed by the host; the base's own info says it has no layers.
  Result<Device> found = [&]() -> Result<Device> {
    bp_device *device = nullptr;
    if (bp_error *error = bp_host_find_device(host.get(), "j0", &device)) return Error(error);
    return Device(device);
  }();
  ASSERT_TRUE(found);
  EXPECT_EQ(found->get(), outer->get());
  Result<DeviceInfo> base_info = base.info();
  ASSERT_TRUE(base_info);
  EXPECT_TRUE(base_info->layers.empty());
  EXPECT_EQ(base_info->chain, "cpu:0");
  // Without a name, the chain's text is the name; a name taken is refused.
  Result<Device> unnamed = host.wrap(cpu(host, 1), {"journal"});
  ASSERT_TRUE(unnamed);
  EXPECT_EQ(unnamed->info()->name, "journal \u2192 cpu:1");
  Result<Device> taken = host.wrap(cpu(host, 2), {"empty"}, "", "j0");
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code(), BP_INVALID_ARGUMENT);
}

struct NestingCase {
  const char *what;
  std::vector<std::string> under;  // layers of the device wrapped (none: cpu:0 itself)
  std::vector<std::string> layers;
  bp_code code;
  const char *chain;
  const char *hint_part;
};

TEST(LayeredDevices, EveryNestingRuleIsCheckedWhenTheDeviceIsBuilt) {
  const std::vector<NestingCase> cases = {
      {"not stackable, twice in the new layers", {}, {"journal", "empty", "journal"}, BP_NESTED_LAYER,
       "journal \u2192 empty \u2192 journal \u2192 cpu:0", "remove the second `journal`"},
      {"not stackable, once over and once under", {"journal"}, {"journal", "empty"}, BP_NESTED_LAYER,
       "journal \u2192 empty \u2192 journal \u2192 cpu:0", "use bp_device_base()"},
      {"deeper than 8", {"empty", "empty", "empty", "empty"}, {"empty", "empty", "empty", "empty", "empty"},
       BP_NESTED_LAYER,
       "empty \u2192 empty \u2192 empty \u2192 empty \u2192 empty \u2192 empty \u2192 empty \u2192 empty \u2192 "
       "empty \u2192 cpu:0",
       "wrap fewer layers"},
      {"a kind it does not wrap", {}, {"empty", "vulkan_only"}, BP_NESTED_LAYER,
       "empty \u2192 vulkan_only \u2192 cpu:0", "wrap a vulkan device"},
      {"a layer no plugin provides", {}, {"jounral"}, BP_PLUGIN_NOT_FOUND, "jounral \u2192 cpu:0",
       "did you mean 'journal'?"},
  };
  for (const NestingCase &test : cases) {
    SCOPED_TRACE(test.what);
    Host host = layered_cpu_host();
    Device over = cpu(host, 0);
    if (!test.under.empty()) {
      Result<Device> under = host.wrap(over, test.under, "", "under");
      ASSERT_TRUE(under) << under.error().message();
      over = *under;
    }
    const size_t devices_before = bp_host_device_count(host.get());
    Result<Device> wrapped = host.wrap(over, test.layers, "", "nested");
    ASSERT_FALSE(wrapped);
    EXPECT_EQ(wrapped.error().code(), test.code) << wrapped.error().message();
    EXPECT_EQ(wrapped.error().field("chain"), test.chain);
    EXPECT_NE(wrapped.error().message().find(test.chain), std::string::npos) << wrapped.error().message();
    EXPECT_NE(wrapped.error().field("hint").find(test.hint_part), std::string::npos) << wrapped.error().field("hint");
    EXPECT_EQ(bp_host_device_count(host.get()), devices_before);  // nothing was made
    // The host goes on: a good wrap of the same device works.
    EXPECT_TRUE(host.wrap(over, {"empty"}, "", "fine"));
  }
  // A stackable layer may appear as often as the depth allows.
  Host host = layered_cpu_host();
  EXPECT_TRUE(host.wrap(cpu(host, 0), std::vector<std::string>(8, "empty")));
}

TEST(LayeredDevices, BadOptionsAreConfigErrors) {
  Host host = layered_cpu_host();
  struct Case {
    const char *options;
    const char *part;
  } cases[] = {
      {R"({"journal": {"jornal": "x"}})", "did you mean 'journal'?"},
      {R"({"empty": {}})", "not among the layers"},
      {R"({"journal": 3})", "not a JSON object"},
      {R"({"journal": {"journal": 3}})", "must be a file name"},
      {R"([1])", "not a JSON object"},
      {R"({"journal": {"refuse_rank": "one"}})", "bad options"},
  };
  for (const Case &test : cases) {
    SCOPED_TRACE(test.options);
    Result<Device> wrapped = host.wrap(cpu(host, 0), {"journal"}, test.options);
    ASSERT_FALSE(wrapped);
    EXPECT_EQ(wrapped.error().code(), BP_CONFIG);
    const std::string said = std::string(wrapped.error().message()) + " | " + wrapped.error().field("hint");
    EXPECT_NE(said.find(test.part), std::string::npos) << said;
  }
  bp_device_wrap_options options{};
  options.struct_size = sizeof options;
  bp_device *out = nullptr;
  Error null_over(bp_device_wrap(host.get(), &options, &out));
  EXPECT_EQ(null_over.code(), BP_INVALID_ARGUMENT);
  options.over = cpu(host, 0).get();
  Error no_layers(bp_device_wrap(host.get(), &options, &out));
  EXPECT_EQ(no_layers.code(), BP_INVALID_ARGUMENT);
  options.struct_size = 8;
  Error small(bp_device_wrap(host.get(), &options, &out));
  EXPECT_EQ(small.code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
}

// A group of two cpu ranks, rank 0 under the journal layer, rank 1 bare.
struct JournalledPair {
  TempDir dir;
  std::filesystem::path journal = dir.path() / "journal.txt";
  std::optional<Host> host;
  Device ranks[2];

  explicit JournalledPair(const std::string &extra_options = "") {
    host.emplace(layered_cpu_host());
    const std::string options =
        R"({"journal": {"journal": ")" + journal.string() + "\"" + extra_options + "}}";
    Result<Device> layered = host->wrap(cpu(*host, 0), {"journal"}, options, "j0");
    EXPECT_TRUE(layered) << layered.error().message();
    ranks[0] = *layered;
    ranks[1] = cpu(*host, 1);
  }
};

TEST(LayeredDevices, HooksSeeEveryCallInOrderAndRanksMayDifferInLayers) {
  JournalledPair pair;
  Host &host = *pair.host;
  bp_device *devices[] = {pair.ranks[0].get(), pair.ranks[1].get()};
  bp_group *group = nullptr;
  ASSERT_EQ(bp_group_create(host.get(), devices, 2, nullptr, &group), nullptr);
  std::array<float, 4> values{1, 2, 3, 4};
  Result<Buffer> a = Buffer::create(pair.ranks[0], sizeof values);
  Result<Buffer> b = Buffer::create(pair.ranks[1], sizeof values);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->write(0, values.data(), sizeof values));
  ASSERT_TRUE(b->write(0, values.data(), sizeof values));
  bp_buffer *send[] = {a->get(), b->get()};
  ASSERT_EQ(bp_all_reduce(group, send, send, 4, BP_F32, BP_SUM), nullptr);
  bp_event *event = nullptr;
  ASSERT_EQ(bp_all_reduce_async(group, send, send, 4, BP_F32, BP_SUM, &event), nullptr);
  ASSERT_EQ(bp_event_wait(event, -1), nullptr);
  bp_event_destroy(event);
  std::array<float, 4> result{};
  ASSERT_TRUE(a->read(0, result.data(), sizeof result));
  EXPECT_EQ(result, (std::array<float, 4>{4, 8, 12, 16}));
  ASSERT_TRUE(host.flush());
  a = Buffer();
  b = Buffer();
  bp_group_destroy(group);
  pair.host.reset();  // the journal is written at the host's end

  const std::vector<std::string> expected = {
      "create j0 over cpu:0 layers 1 chain journal \u2192 cpu:0",
      "before buffer_create rank 0 call 0 bytes 16",
      "after buffer_create rank 0 code 0 buffer",
      "before buffer_write rank 0 call 0 bytes 16",
      "after buffer_write rank 0 code 0",
      "before all_reduce rank 0 call 1 bytes 16 in_place",
      "after all_reduce rank 0 code 0",
      "before all_reduce rank 0 call 2 bytes 16 in_place async",
      "after all_reduce rank 0 code 0",
      "before buffer_read rank 0 call 0 bytes 16",
      "after buffer_read rank 0 code 0",
      "flush",
      "before buffer_destroy rank 0 call 0 bytes 16",
      "after buffer_destroy rank 0 code 0",
  };
  EXPECT_EQ(read_lines(pair.journal), expected);
}

TEST(LayeredDevices, ALayerThatRefusesStopsTheCallAndTheHostGoesOn) {
  JournalledPair pair(R"(, "refuse": "all_reduce")");
  Host &host = *pair.host;
  Result<Device> other = host.wrap(cpu(host, 2), {"empty"}, "", "e2");
  ASSERT_TRUE(other);
  bp_device *devices[] = {other->get(), pair.ranks[0].get()};  // the refusing layer at rank 1
  bp_group *group = nullptr;
  ASSERT_EQ(bp_group_create(host.get(), devices, 2, nullptr, &group), nullptr);
  const std::array<float, 2> mine{1, 2}, theirs{10, 20};
  Result<Buffer> a = Buffer::create(*other, sizeof mine);
  Result<Buffer> b = Buffer::create(pair.ranks[0], sizeof theirs);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->write(0, mine.data(), sizeof mine));
  ASSERT_TRUE(b->write(0, theirs.data(), sizeof theirs));
  bp_buffer *send[] = {a->get(), b->get()};
  Error refused(bp_all_reduce(group, send, send, 2, BP_F32, BP_SUM));
  ASSERT_EQ(refused.code(), BP_INVALID_ARGUMENT);
  EXPECT_NE(refused.message().find("rank 1"), std::string::npos) << refused.message();
  const nlohmann::json json = error_json(refused);
  EXPECT_EQ(json["layer"], "journal");
  EXPECT_EQ(json["rank"], 1);
  EXPECT_EQ(json["operation"], "all_reduce");
  ASSERT_EQ(json["devices"].size(), 2u);
  EXPECT_EQ(json["devices"][0]["layers"], nlohmann::json::array({"empty"}));
  EXPECT_EQ(json["devices"][1]["layers"], nlohmann::json::array({"journal"}));
  EXPECT_EQ(json["devices"][1]["base"], "cpu:0");
  // Nothing ran: both ranks' data are as they were.
  std::array<float, 2> read_a{}, read_b{};
  ASSERT_TRUE(a->read(0, read_a.data(), sizeof read_a));
  ASSERT_TRUE(b->read(0, read_b.data(), sizeof read_b));
  EXPECT_EQ(read_a, mine);
  EXPECT_EQ(read_b, theirs);
  // The async form is refused the same way, with no event.
  bp_event *event = nullptr;
  Error refused_async(bp_all_reduce_async(group, send, send, 2, BP_F32, BP_SUM, &event));
  EXPECT_EQ(refused_async.code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(event, nullptr);
  // What the layer does not refuse runs.
  ASSERT_EQ(bp_broadcast(group, send, send, 2, BP_F32, 1), nullptr);
  ASSERT_TRUE(a->read(0, read_a.data(), sizeof read_a));
  EXPECT_EQ(read_a, theirs);
  bp_group_destroy(group);
}

TEST(LayeredDevices, DispatchUsesTheBaseDevice) {
  Host host = layered_cpu_host();
  Result<Device> t0 = host.wrap(cpu(host, 0), {"journal"}, "", "t0");
  Result<Device> t0_again = host.wrap(cpu(host, 0), {"empty"}, "", "t0e");
  ASSERT_TRUE(t0 && t0_again);
  // Two devices over one base are that device twice.
  bp_device *twice[] = {t0->get(), t0_again->get()};
  bp_group *group = nullptr;
  Error twice_error(bp_group_create(host.get(), twice, 2, nullptr, &group));
  EXPECT_EQ(twice_error.code(), BP_INVALID_ARGUMENT);
  EXPECT_NE(twice_error.message().find("are both device 'cpu:0'"), std::string::npos) << twice_error.message();
  // A buffer of the base serves at the layered rank; one of another device does not.
  bp_device *devices[] = {t0->get(), cpu(host, 1).get()};
  ASSERT_EQ(bp_group_create(host.get(), devices, 2, nullptr, &group), nullptr);
  Result<Buffer> on_base = Buffer::create(cpu(host, 0), 8);
  Result<Buffer> on_one = Buffer::create(cpu(host, 1), 8);
  Result<Buffer> on_two = Buffer::create(cpu(host, 2), 8);
  ASSERT_TRUE(on_base && on_one && on_two);
  bp_buffer *good[] = {on_base->get(), on_one->get()};
  EXPECT_EQ(bp_all_reduce(group, good, good, 2, BP_I32, BP_SUM), nullptr);
  bp_buffer *bad[] = {on_two->get(), on_one->get()};
  Error misplaced(bp_all_reduce(group, bad, bad, 2, BP_I32, BP_SUM));
  EXPECT_EQ(misplaced.code(), BP_INVALID_ARGUMENT);
  // bp_group_check answers from the base's table, and its errors show the chain.
  EXPECT_EQ(bp_group_check(group, BP_ALL_REDUCE, BP_F32, BP_SUM), nullptr);
  Error unsupported(bp_group_check(group, BP_ALL_REDUCE, BP_I32, BP_AVG));
  EXPECT_EQ(unsupported.code(), BP_UNSUPPORTED_REDUCE_OP);
  const nlohmann::json json = error_json(unsupported);
  EXPECT_EQ(json["devices"][0]["layers"], nlohmann::json::array({"journal"}));
  EXPECT_EQ(json["devices"][1]["layers"], nlohmann::json::array());
  bp_group_destroy(group);
}

// The fixture's two layers, and this repository's trace over validate,
// over device 0 of each kind this machine has.
TEST(LayeredDevices, EveryKindHereRunsUnderTwoLayers) {
  TempDir dir;
  Host host = make_builtin_host(R"({"cpu": {"devices": 2}})");
  ASSERT_TRUE(host.load_plugin(fixture_path("layer_fixture").string()));
  size_t kinds_run = 0;
  const std::string trace_options =
      R"({"trace": {"file": ")" + (dir.path() / "kinds-trace.json").string() + R"("}, "validate": {"nan_check": true}})";
  for (const std::string kind : {"cpu", "opencl", "vulkan"})
  for (const std::vector<std::string> &layers : {std::vector<std::string>{"journal", "empty"},
                                                std::vector<std::string>{"trace", "validate"}}) {
    // The kind's own devices (the layered ones, listed too, have its kind).
    std::vector<Device> devices;
    for (const Device &device : devices_of_kind(host, kind))
      if (device.info()->layers.empty()) devices.push_back(device);
    if (devices.empty()) continue;
    SCOPED_TRACE(kind + " under " + layers[0] + " and " + layers[1]);
    Result<Device> layered = host.wrap(devices[0], layers, layers[0] == "trace" ? trace_options : "",
                                       kind + "-" + layers[0]);
    ASSERT_TRUE(layered) << layered.error().message();
    EXPECT_EQ(layered->info()->chain, layers[0] + " \u2192 " + layers[1] + " \u2192 " + kind + ":0");
    std::vector<bp_device *> ranks = {layered->get()};
    if (devices.size() > 1) ranks.push_back(devices[1].get());
    bp_group *group = nullptr;
    Status created(bp_group_create(host.get(), ranks.data(), ranks.size(), nullptr, &group));
    ASSERT_TRUE(created) << created.error().json();
    std::vector<Buffer> buffers;
    std::vector<bp_buffer *> send;
    for (size_t r = 0; r < ranks.size(); ++r) {
      Result<Buffer> buffer = Buffer::create(Device(ranks[r]), 3 * sizeof(float));
      ASSERT_TRUE(buffer);
      const std::array<float, 3> values{float(r + 1), 2, 3};
      ASSERT_TRUE(buffer->write(0, values.data(), sizeof values));
      send.push_back(buffer->get());
      buffers.push_back(std::move(*buffer));
    }
    ASSERT_EQ(bp_all_reduce(group, send.data(), send.data(), 3, BP_F32, BP_SUM), nullptr);
    std::array<float, 3> result{};
    ASSERT_TRUE(buffers[0].read(0, result.data(), sizeof result));
    const float first = ranks.size() == 1 ? 1.0f : 3.0f;
    EXPECT_EQ(result, (std::array<float, 3>{first, 2.0f * ranks.size(), 3.0f * ranks.size()}));
    buffers.clear();
    bp_group_destroy(group);
    ++kinds_run;
  }
  EXPECT_GE(kinds_run, 2u);
}

// Fleet files: layered entries over plain ones and over each other, a name
// of several devices wrapped device by device, relative option paths from
// the file's folder; each nesting rule as a problem with its JSON pointer.
struct FleetProblem {
  bp_code code;
  std::string pointer, chain;
};

std::vector<FleetProblem> fleet_problems(const Error &error) {
  std::vector<FleetProblem> problems;
  for (const bp_error *problem : error.problems()) {
    const char *chain = bp_error_field(problem, "chain");
    problems.push_back({bp_error_code(problem), bp_error_field(problem, "pointer"), chain ? chain : ""});
  }
  return problems;
}

TEST(LayeredFleets, EntriesWrapDevicesAndOtherEntries) {
  TempDir dir;
  const std::filesystem::path fleet = dir.write_file("fleet.json", R"({
    "version": 1,
    "devices": [
      {"name": "t0", "over": "v.0", "layers": ["empty"]},
      {"name": "c", "kind": "cpu", "count": 2},
      {"name": "v", "over": "c", "layers": ["journal"], "options": {"journal": {"journal": "journal.txt"}}}
    ],
    "groups": [{"name": "wrapped", "devices": ["v"]}, {"name": "mixed_chains", "devices": ["t0", "cpu:1"]}]
  })");
  {
    Host host = layered_cpu_host();
    Status loaded = host.load_fleet_file(fleet.string());
    ASSERT_TRUE(loaded) << loaded.error().json();
    bp_device *t0 = nullptr, *v1 = nullptr;
    ASSERT_EQ(bp_host_find_device(host.get(), "t0", &t0), nullptr);
    ASSERT_EQ(bp_host_find_device(host.get(), "v.1", &v1), nullptr);
    EXPECT_EQ(Device(t0).info()->chain, "empty \u2192 journal \u2192 cpu:0");
    EXPECT_EQ(Device(t0).info()->over, "v.0");
    EXPECT_EQ(Device(v1).info()->chain, "journal \u2192 cpu:1");
    for (const char *name : {"wrapped", "mixed_chains"}) {
      SCOPED_TRACE(name);
      Result<GroupView> group = host.find_group(name);
      ASSERT_TRUE(group);
      std::vector<Buffer> buffers;
      std::vector<bp_buffer *> send;
      for (size_t r = 0; r < 2; ++r) {
        Result<Buffer> buffer = Buffer::create(Device(bp_group_device(group->get(), r)), sizeof(int32_t));
        ASSERT_TRUE(buffer);
        const int32_t value = int32_t(r) + 5;
        ASSERT_TRUE(buffer->write(0, &value, sizeof value));
        send.push_back(buffer->get());
        buffers.push_back(std::move(*buffer));
      }
      ASSERT_EQ(bp_all_reduce(group->get(), send.data(), send.data(), 1, BP_I32, BP_SUM), nullptr);
      int32_t sum = 0;
      ASSERT_TRUE(buffers[1].read(0, &sum, sizeof sum));
      EXPECT_EQ(sum, 11);
    }
  }
  // Both journal layers wrote to journal.txt beside the fleet file.
  const std::vector<std::string> lines = read_lines(dir.path() / "journal.txt");
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "after all_reduce rank 0 code 0"), 2) << lines.size();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "after all_reduce rank 1 code 0"), 1);
}

TEST(LayeredFleets, EveryNestingProblemNamesItsPointerAndChain) {
  struct Case {
    const char *what;
    const char *devices;
    FleetProblem expected;
  } cases[] = {
      {"not stackable, twice",
       R"([{"name": "a", "over": "cpu:0", "layers": ["journal"]}, {"name": "b", "over": "a", "layers": ["journal"]}])",
       {BP_NESTED_LAYER, "/devices/1/layers", "journal \u2192 journal \u2192 cpu:0"}},
      {"a cycle through over",
       R"([{"name": "x", "over": "y", "layers": ["empty"]}, {"name": "y", "over": "x", "layers": ["empty"]}])",
       {BP_NESTED_LAYER, "/devices/0/over", "x \u2192 y \u2192 x"}},
      {"an entry over itself", R"([{"name": "x", "over": "x", "layers": ["empty"]}])",
       {BP_NESTED_LAYER, "/devices/0/over", "x \u2192 x"}},
      {"deeper than 8",
       R"([{"name": "a", "over": "cpu:0", "layers": ["empty", "empty", "empty", "empty", "empty"]},
           {"name": "b", "over": "a", "layers": ["empty", "empty", "empty", "empty"]}])",
       {BP_NESTED_LAYER, "/devices/1/layers",
        "empty \u2192 empty \u2192 empty \u2192 empty \u2192 empty \u2192 empty \u2192 empty \u2192 empty "
        "\u2192 empty \u2192 cpu:0"}},
      {"a kind it does not wrap", R"([{"name": "a", "over": "cpu:1", "layers": ["vulkan_only"]}])",
       {BP_NESTED_LAYER, "/devices/0/layers", "vulkan_only \u2192 cpu:1"}},
      {"a layer no plugin provides", R"([{"name": "a", "over": "cpu:0", "layers": ["empty", "jurnal"]}])",
       {BP_PLUGIN_NOT_FOUND, "/devices/0/layers/1", "empty \u2192 jurnal \u2192 cpu:0"}},
      {"an option the layer does not take",
       R"([{"name": "a", "over": "cpu:0", "layers": ["journal"], "options": {"journal": {"jornal": "x"}}}])",
       {BP_CONFIG, "/devices/0/options/journal", "journal \u2192 cpu:0"}},
      {"a kind besides over", R"([{"name": "a", "kind": "cpu", "over": "cpu:0", "layers": ["empty"]}])",
       {BP_CONFIG, "/devices/0/kind", ""}},
      {"layers without over", R"([{"name": "a", "layers": ["empty"]}])", {BP_CONFIG, "/devices/0", ""}},
      {"over a device that does not exist", R"([{"name": "a", "over": "cpu:9", "layers": ["empty"]}])",
       {BP_CONFIG, "/devices/0/over", ""}},
  };
  for (const Case &test : cases) {
    SCOPED_TRACE(test.what);
    Host host = layered_cpu_host();
    const size_t devices_before = bp_host_device_count(host.get());
    Status loaded = host.load_fleet_text(std::string(R"({"version": 1, "devices": )") + test.devices + "}");
    ASSERT_FALSE(loaded);
    const std::vector<FleetProblem> problems = fleet_problems(loaded.error());
    ASSERT_EQ(problems.size(), 1u) << loaded.error().json();
    EXPECT_EQ(problems[0].code, test.expected.code) << loaded.error().json();
    EXPECT_EQ(problems[0].pointer, test.expected.pointer);
    EXPECT_EQ(problems[0].chain, test.expected.chain);
    EXPECT_EQ(bp_host_device_count(host.get()), devices_before);  // all or nothing
  }
}

TEST(LayeredFleets, AFailedLayeredEntryIsOneProblemWhereverItIsNamed) {
  Host host = layered_cpu_host();
  Status loaded = host.load_fleet_text(R"({"version": 1,
    "devices": [{"name": "c", "kind": "cpu", "count": 2}, {"name": "v", "over": "c", "layers": ["nope"]}],
    "groups": [{"name": "g", "devices": ["v.0", "v.1"]}, {"name": "h", "devices": ["v"]}]})");
  ASSERT_FALSE(loaded);
  const std::vector<FleetProblem> problems = fleet_problems(loaded.error());
  ASSERT_EQ(problems.size(), 1u) << loaded.error().json();
  EXPECT_EQ(problems[0].code, BP_PLUGIN_NOT_FOUND);
  EXPECT_EQ(problems[0].pointer, "/devices/1/layers/0");
}

}  // namespace
