// The validate layer (plugins/validate) through the public API, over four
// cpu devices each wrapped in it: every refusal with its code, the rank it
// names and the buffers left as they were; the host going on after one;
// nan_check on and off; fingerprints written, read back and compared with a
// later run, in this process and in another.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backplane/backplane.h"
#include "backplane/backplane.hpp"
#include "test_support.hpp"

namespace {

using namespace backplane;
using namespace backplane::testing;

constexpr size_t kRanks = 4;

// A host with the cpu plugin (4 devices) and the validate plugin.
Host validate_host() {
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  if (Status loaded = host.load_plugin(plugin_path("validate").string()); !loaded) {
    ADD_FAILURE() << "loading the validate plugin failed: " << loaded.error().json();
    throw Exception(loaded.error());
  }
  return host;
}

Device base_device(Host &host, size_t index) { return host.find_device("cpu:" + std::to_string(index)).value(); }

// "v<index>": cpu:<index> wrapped in validate with `options` (the text of
// the layer's object).
Result<Device> wrap_in_validate(Host &host, size_t index, const std::string &options = "{}") {
  return host.wrap(base_device(host, index), {"validate"}, R"({"validate": )" + options + "}",
                   "v" + std::to_string(index));
}

std::vector<Device> validated_ranks(Host &host, const std::string &options = "{}") {
  std::vector<Device> ranks;
  for (size_t r = 0; r < kRanks; ++r) ranks.push_back(wrap_in_validate(host, r, options).value());
  return ranks;
}

template <typename T>
std::vector<T> read_all(const Buffer &buffer) {
  std::vector<T> values(buffer.size() / sizeof(T));
  EXPECT_TRUE(buffer.read(std::span<T>(values)));
  return values;
}

std::string read_text(const std::filesystem::path &path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// The lines of a fingerprints file after its header, checked to be there.
std::vector<std::string> fingerprint_lines(const std::filesystem::path &path) {
  std::vector<std::string> lines = lines_of(read_text(path));
  EXPECT_FALSE(lines.empty()) << path << " is empty";
  if (lines.empty()) return lines;
  EXPECT_EQ(lines.front(),
            "# backplane validate fingerprints v1: group call rank collective dtype op count root ranks fingerprint");
  lines.erase(lines.begin());
  return lines;
}

// A layer's refusal as the caller reads it: the layer's own message, with
// the layer (and, for a collective, the rank) among the error's fields.
// `hook` names the hook that refused, for the failure message.
// instance_create's failures are the plugin's, as for any plugin function:
// the host's "plugin 'validate' instance_create failed: " comes first.
std::string layer_message(const Error &error, const char *hook) {
  const std::string message(error.message());
  if (std::string_view(hook) == "instance_create") {
    const std::string prefix = "plugin 'validate' instance_create failed: ";
    if (message.rfind(prefix, 0) != 0) ADD_FAILURE() << "not a failure of instance_create: " << message;
    return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
  }
  if (error.field("layer") != "validate" || message.rfind("validate: ", 0) != 0)
    ADD_FAILURE() << "not a refusal of validate's " << hook << ": " << message << " " << error.json();
  return message;
}

// An error's message, or "succeeded".
std::string outcome(const Status &status) { return status ? "succeeded" : std::string(status.error().message()); }

// Four ranks of validate devices, a group "g" over them, and per rank one
// send and one recv buffer of kCount f32 values: send[r] holds r + 1 and
// recv[r] holds -1, so what a call changed shows.
class ValidateGroup : public ::testing::Test {
 protected:
  static constexpr size_t kCount = 16;

  void make(const std::string &options = "{}") {
    ranks_ = validated_ranks(host_, options);
    group_ = host_.create_group(ranks_, "g").value();
    send_.clear();
    recv_.clear();
    for (size_t r = 0; r < kRanks; ++r) {
      send_.push_back(Buffer::create(ranks_[r], kCount * sizeof(float)).value());
      recv_.push_back(Buffer::create(ranks_[r], kCount * sizeof(float)).value());
      const std::vector<float> ones(kCount, static_cast<float>(r + 1)), minus(kCount, -1.0f);
      ASSERT_TRUE(send_.back().write(std::span<const float>(ones)));
      ASSERT_TRUE(recv_.back().write(std::span<const float>(minus)));
    }
  }
  void SetUp() override { make(); }

  std::vector<bp_buffer *> send() const { return raw_handles(send_); }
  std::vector<bp_buffer *> recv() const { return raw_handles(recv_); }

  // Every buffer still holds what make() wrote.
  void expect_untouched() const {
    for (size_t r = 0; r < kRanks; ++r) {
      EXPECT_EQ(mismatches(send_[r], 0, kCount, static_cast<float>(r + 1)), "") << "send[" << r << "]";
      EXPECT_EQ(mismatches(recv_[r], 0, kCount, -1.0f), "") << "recv[" << r << "]";
    }
  }

  // A call that should run does, and gives the sum 1 + 2 + 3 + 4.
  void expect_good_call_runs() {
    ASSERT_EQ(outcome(group_.all_reduce(send(), recv(), kCount, BP_F32, BP_SUM)), "succeeded");
    for (size_t r = 0; r < kRanks; ++r) EXPECT_EQ(mismatches(recv_[r], 0, kCount, 10.0f), "") << "recv[" << r << "]";
  }

  Host host_ = validate_host();
  std::vector<Device> ranks_;
  Group group_;
  std::vector<Buffer> send_, recv_;
};

// ---- the layer kind and its options ----------------------------------------------------

TEST(ValidateLayerKind, IsDeclaredAsALayerOnlyPlugin) {
  Host host = validate_host();
  const std::vector<PluginInfo> plugins = host.plugins();
  const PluginInfo *plugin = find_plugin(plugins, "validate");
  ASSERT_NE(plugin, nullptr);
  EXPECT_TRUE(plugin->device_kinds.empty());
  EXPECT_EQ(plugin->layer_kinds, std::vector<std::string>{"validate"});
  const std::vector<LayerKindInfo> kinds = host.layer_kinds();
  ASSERT_EQ(kinds.size(), 1u);
  EXPECT_EQ(kinds[0].name, "validate");
  EXPECT_EQ(kinds[0].plugin, "validate");
  EXPECT_FALSE(kinds[0].stackable);
  EXPECT_TRUE(kinds[0].device_kinds.empty()) << "it wraps every device kind";
  std::vector<std::string> options;
  for (const auto &[name, description] : kinds[0].options) {
    options.push_back(name);
    EXPECT_FALSE(description.empty()) << name;
  }
  EXPECT_EQ(options, (std::vector<std::string>{"nan_check", "fingerprints", "expect_fingerprints"}));
}

TEST(ValidateLayerKind, IsNotStackable) {
  Host host = validate_host();
  Device v0 = wrap_in_validate(host, 0).value();
  Result<Device> twice = host.wrap(v0, {"validate"}, "", "vv0");
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code(), BP_NESTED_LAYER) << twice.error().message();
}

TEST(ValidateOptions, WrongTypesAreRefusedNamingTheOption) {
  Host host = validate_host();
  for (const char *options : {R"({"nan_check": "yes"})", R"({"nan_check": 1})"}) {
    Result<Device> wrapped = wrap_in_validate(host, 0, options);
    ASSERT_FALSE(wrapped) << options;
    EXPECT_EQ(wrapped.error().code(), BP_CONFIG) << options;
    EXPECT_NE(wrapped.error().message().find("\"nan_check\" must be true or false"), std::string_view::npos)
        << wrapped.error().message();
  }
  // Path options that are no string are the host's to refuse, with BP_CONFIG too.
  Result<Device> wrapped = wrap_in_validate(host, 0, R"({"fingerprints": 3})");
  ASSERT_FALSE(wrapped);
  EXPECT_EQ(wrapped.error().code(), BP_CONFIG) << wrapped.error().message();
  EXPECT_NE(wrapped.error().message().find("fingerprints"), std::string_view::npos) << wrapped.error().message();
  // Nothing was made: the name is free.
  EXPECT_TRUE(wrap_in_validate(host, 0));
}

TEST(ValidateOptions, ExpectedFileThatCannotBeReadOrParsedIsRefused) {
  TempDir dir;
  Host host = validate_host();
  struct Case {
    std::string file, contents, says;
  };
  const std::string header =
      "# backplane validate fingerprints v1: group call rank collective dtype op count root ranks fingerprint\n";
  const std::vector<Case> cases = {
      {"missing.fp", "", "cannot read"},
      {"empty.fp", "", "the file is empty"},
      {"trace.json", "{\"traceEvents\": []}\n", "line 1 is not"},
      {"collective.fp", header + "\"g\" 1 0 all_sum f32 sum 16 - 4 0x0000000000000000\n",
       "line 2: unknown collective \"all_sum\""},
      {"fingerprint.fp", header + "\"g\" 1 0 all_reduce f32 sum 16 - 4 0x0000000000000001\n",
       "line 2: the fingerprint 0x0000000000000001 is not that of the line's fields"},
      {"short.fp", header + "\"g\" 1 0 all_reduce f32\n", "line 2: unknown reduce op \"\""},
      {"serial0.fp", header + "\"g\" 0 0 barrier - - 0 - 4 0xc37cfc05b46e03b3\n", "line 2: call serial 0"},
      {"far.fp", header + "# a comment\n\"g\" 1000000 2 barrier - - 0 - 4 0xc37cfc05b46e03b3\n",
       "line 3: call 1000000 of group \"g\" at rank 2 lies far past the 1 calls recorded there"},
  };
  for (const Case &test : cases) {
    const std::filesystem::path path = dir.path() / test.file;
    if (test.file != "missing.fp") dir.write_file(test.file, test.contents);
    Result<Device> wrapped =
        wrap_in_validate(host, 0, nlohmann::json{{"expect_fingerprints", path.string()}}.dump());
    ASSERT_FALSE(wrapped) << test.file;
    const std::string message(wrapped.error().message());
    EXPECT_EQ(wrapped.error().code(), BP_CONFIG) << message;
    EXPECT_NE(message.find("option \"expect_fingerprints\""), std::string::npos) << message;
    EXPECT_NE(message.find(test.says), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(ValidateOptions, FingerprintsFileThatCannotBeWrittenIsRefused) {
  TempDir dir;
  Host host = validate_host();
  const std::string path = (dir.path() / "no-such-folder" / "run.fp").string();
  Result<Device> wrapped = wrap_in_validate(host, 0, nlohmann::json{{"fingerprints", path}}.dump());
  ASSERT_FALSE(wrapped);
  EXPECT_EQ(wrapped.error().code(), BP_CONFIG);
  EXPECT_EQ(layer_message(wrapped.error(), "instance_create"),
            "validate on 'v0': option \"fingerprints\": cannot write \"" + path + "\": No such file or directory");
}

// ---- refusals before the call ------------------------------------------------------------

TEST_F(ValidateGroup, GoodCallsRun) {
  expect_good_call_runs();
  const std::vector<bp_buffer *> in_place = send();
  ASSERT_EQ(outcome(group_.all_reduce(in_place, in_place, kCount, BP_F32, BP_SUM)), "succeeded");
  EXPECT_EQ(mismatches(send_[3], 0, kCount, 10.0f), "");
  ASSERT_EQ(outcome(group_.barrier()), "succeeded");
  ASSERT_EQ(outcome(group_.broadcast(send(), recv(), kCount, BP_F32, 2)), "succeeded");
}

TEST_F(ValidateGroup, SendAndRecvOverlappingOutOfPlaceAreRefused) {
  // Rank 1's send and recv are two buffers over one piece of memory, the
  // recv starting 4 floats (16 bytes) after the send: 48 bytes shared.
  std::vector<float> memory(kCount + 4, 2.0f);
  Buffer send1 = Buffer::wrap_host(ranks_[1], memory.data(), kCount * sizeof(float)).value();
  Buffer recv1 = Buffer::wrap_host(ranks_[1], memory.data() + 4, kCount * sizeof(float)).value();
  std::vector<bp_buffer *> send = this->send(), recv = this->recv();
  send[1] = send1.get();
  recv[1] = recv1.get();
  const Status refused = group_.all_reduce(send, recv, kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(layer_message(refused.error(), "before"),
            "validate: rank 1: send and recv overlap by 48 bytes but are different buffers (out of place); pass the "
            "same buffer for in place");
  EXPECT_EQ(refused.error().field("layer"), "validate");
  EXPECT_EQ(refused.error().field("rank"), "1");
  expect_untouched();
  EXPECT_EQ(memory, std::vector<float>(kCount + 4, 2.0f)) << "the wrapped memory was written";

  // Only the bytes the call uses count: 4 floats from each do not meet.
  ASSERT_EQ(outcome(group_.all_reduce(send, recv, 4, BP_F32, BP_SUM)), "succeeded");
  expect_good_call_runs();
}

TEST_F(ValidateGroup, InPlaceOverOneBufferIsNotAnOverlap) {
  std::vector<float> memory(kCount, 1.0f);
  Buffer both = Buffer::wrap_host(ranks_[2], memory.data(), memory.size() * sizeof(float)).value();
  std::vector<bp_buffer *> send = this->send(), recv = this->recv();
  send[2] = recv[2] = both.get();
  ASSERT_EQ(outcome(group_.all_reduce(send, recv, kCount, BP_F32, BP_SUM)), "succeeded");
  EXPECT_EQ(memory, std::vector<float>(kCount, 1.0f + 1.0f + 2.0f + 4.0f));
}

TEST_F(ValidateGroup, BufferOfTheBaseDeviceIsRefused) {
  // The host takes a buffer of cpu:2 at the rank of v2 (same base device);
  // validate wants v2's own.
  Buffer on_base = Buffer::create(base_device(host_, 2), kCount * sizeof(float)).value();
  std::vector<bp_buffer *> send = this->send();
  send[2] = on_base.get();
  const Status refused = group_.all_reduce(send, recv(), kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(layer_message(refused.error(), "before"),
            "validate: rank 2: send[2] was made on 'cpu:2', a device outside the group (rank 2 is 'v2' over cpu:2)");
  expect_untouched();
  expect_good_call_runs();
}

TEST_F(ValidateGroup, BufferOfAnotherLayeredDeviceOverTheBaseIsRefused) {
  Device other = host_.wrap(base_device(host_, 3), {"validate"}, "", "w3").value();
  Buffer on_other = Buffer::create(other, kCount * sizeof(float)).value();
  std::vector<bp_buffer *> recv = this->recv();
  recv[3] = on_other.get();
  const Status refused = group_.all_reduce(send(), recv, kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(layer_message(refused.error(), "before"),
            "validate: rank 3: recv[3] was made on 'w3', a device outside the group (rank 3 is 'v3' over cpu:3)");
  expect_untouched();
  expect_good_call_runs();
}

TEST_F(ValidateGroup, UnusedEntriesAreNotLookedAt) {
  // Off the root of broadcast the send entries are unused: anything goes.
  Buffer on_base = Buffer::create(base_device(host_, 0), kCount * sizeof(float)).value();
  std::vector<bp_buffer *> send = this->send();
  send[1] = on_base.get();
  send[3] = nullptr;
  ASSERT_EQ(outcome(group_.broadcast(send, recv(), kCount, BP_F32, 2)), "succeeded");
  for (size_t r = 0; r < kRanks; ++r) EXPECT_EQ(mismatches(recv_[r], 0, kCount, 3.0f), "") << r;
}

TEST_F(ValidateGroup, BufferOfAnotherRanksDeviceIsTheHostsToRefuse) {
  // Another rank's device has another base: the host refuses before any
  // layer sees the call.
  std::vector<bp_buffer *> send = this->send();
  send[1] = send_[0].get();
  const Status refused = group_.all_reduce(send, recv(), kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_FALSE(refused.error().has_field("layer")) << refused.error().message();
  expect_untouched();
}

TEST_F(ValidateGroup, RecvOverlappingAnotherRanksBufferIsRefused) {
  // The host compares wrapped memory across ranks itself, before the
  // layers; the call is refused all the same, and nothing runs.
  std::vector<float> memory(2 * kCount, 5.0f);
  Buffer recv0 = Buffer::wrap_host(ranks_[0], memory.data(), kCount * sizeof(float)).value();
  Buffer recv1 = Buffer::wrap_host(ranks_[1], memory.data() + kCount / 2, kCount * sizeof(float)).value();
  std::vector<bp_buffer *> recv = this->recv();
  recv[0] = recv0.get();
  recv[1] = recv1.get();
  const Status refused = group_.all_reduce(send(), recv, kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_NE(refused.error().message().find("overlap"), std::string_view::npos) << refused.error().message();
  EXPECT_EQ(memory, std::vector<float>(2 * kCount, 5.0f));
  expect_untouched();
}

TEST_F(ValidateGroup, AsyncCallsAreCheckedToo) {
  std::vector<float> memory(kCount + 1, 2.0f);
  Buffer send0 = Buffer::wrap_host(ranks_[0], memory.data(), kCount * sizeof(float)).value();
  Buffer recv0 = Buffer::wrap_host(ranks_[0], memory.data() + 1, kCount * sizeof(float)).value();
  std::vector<bp_buffer *> send = this->send(), recv = this->recv();
  send[0] = send0.get();
  recv[0] = recv0.get();
  Result<Event> started = all_reduce_async(group_, send, recv, kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(layer_message(started.error(), "before"),
            "validate: rank 0: send and recv overlap by 60 bytes but are different buffers (out of place); pass the "
            "same buffer for in place");
  EXPECT_EQ(memory, std::vector<float>(kCount + 1, 2.0f));
  Result<Event> good = all_reduce_async(group_, this->send(), this->recv(), kCount, BP_F32, BP_SUM);
  ASSERT_TRUE(good) << good.error().message();
  ASSERT_TRUE(good->wait());
  EXPECT_EQ(mismatches(recv_[1], 0, kCount, 10.0f), "");
}

// ---- nan_check -----------------------------------------------------------------------------

// ValidateGroup with nan_check on.
class ValidateNanCheck : public ValidateGroup {
 protected:
  void SetUp() override { make(R"({"nan_check": true})"); }

  // Writes `values(r)` into send[r] (kCount f32).
  template <typename Value>
  void fill_send(Value values) {
    for (size_t r = 0; r < kRanks; ++r) {
      std::vector<float> data(kCount);
      for (size_t i = 0; i < kCount; ++i) data[i] = values(r, i);
      ASSERT_TRUE(send_[r].write(std::span<const float>(data)));
    }
  }
};

TEST_F(ValidateNanCheck, InfFromFiniteInputsIsRefused) {
  fill_send([](size_t, size_t i) { return i == 5 ? FLT_MAX : 1.0f; });
  const Status refused = group_.all_reduce(send(), recv(), kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(layer_message(refused.error(), "after"),
            "validate: rank 0: all_reduce(f32, sum) wrote Inf at element 5 of recv (inputs held none)");
  EXPECT_EQ(refused.error().field("rank"), "0");
  // It ran: the results are there.
  EXPECT_EQ(read_all<float>(recv_[2])[5], std::numeric_limits<float>::infinity());
  fill_send([](size_t r, size_t) { return static_cast<float>(r + 1); });
  expect_good_call_runs();
}

TEST_F(ValidateNanCheck, NanFromFiniteInputsIsRefused) {
  // FLT_MAX * FLT_MAX = Inf, and Inf * 0 = NaN.
  fill_send([](size_t r, size_t i) { return i == 9 && r == 3 ? 0.0f : (i == 9 ? FLT_MAX : 1.0f); });
  const Status refused = group_.all_reduce(send(), recv(), kCount, BP_F32, BP_PROD);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(layer_message(refused.error(), "after"),
            "validate: rank 0: all_reduce(f32, prod) wrote NaN at element 9 of recv (inputs held none)");
}

TEST_F(ValidateNanCheck, TheRankWhoseOutputHoldsItIsNamed) {
  // reduce_scatter: rank r gets block r of the sums, so only rank 2's holds the Inf.
  std::vector<Buffer> wide;
  for (size_t r = 0; r < kRanks; ++r) {
    std::vector<float> data(kRanks * kCount, 1.0f);
    data[2 * kCount + 7] = -FLT_MAX;
    wide.push_back(Buffer::create(ranks_[r], data.size() * sizeof(float)).value());
    ASSERT_TRUE(wide.back().write(std::span<const float>(data)));
  }
  const Status refused = group_.reduce_scatter(raw_handles(wide), recv(), kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(layer_message(refused.error(), "after"),
            "validate: rank 2: reduce_scatter(f32, sum) wrote -Inf at element 7 of recv (inputs held none)");
  EXPECT_EQ(refused.error().field("rank"), "2");

  // In place the result is block r of the one buffer, and the inputs were
  // read before the call overwrote them.
  for (size_t r = 0; r < kRanks; ++r) {
    std::vector<float> data(kRanks * kCount, 1.0f);
    data[2 * kCount + 7] = -FLT_MAX;
    ASSERT_TRUE(wide[r].write(std::span<const float>(data)));
  }
  const Status in_place = group_.reduce_scatter(raw_handles(wide), raw_handles(wide), kCount, BP_F32, BP_SUM);
  ASSERT_FALSE(in_place);
  EXPECT_EQ(layer_message(in_place.error(), "after"),
            "validate: rank 2: reduce_scatter(f32, sum) wrote -Inf at element 39 of recv (inputs held none)");
}

TEST_F(ValidateNanCheck, InputsThatHeldNanOrInfAreNotRefused) {
  // +Inf and -Inf summed give NaN: from inputs that were not finite.
  fill_send([](size_t r, size_t i) {
    if (i != 3) return 1.0f;
    return r == 0 ? std::numeric_limits<float>::infinity() : r == 1 ? -std::numeric_limits<float>::infinity() : 0.0f;
  });
  ASSERT_EQ(outcome(group_.all_reduce(send(), recv(), kCount, BP_F32, BP_SUM)), "succeeded");
  EXPECT_TRUE(std::isnan(read_all<float>(recv_[0])[3]));
  // A NaN on one rank only.
  fill_send([](size_t r, size_t i) { return r == 3 && i == 15 ? std::nanf("") : 1.0f; });
  ASSERT_EQ(outcome(group_.all_reduce(send(), recv(), kCount, BP_F32, BP_SUM)), "succeeded");
  EXPECT_TRUE(std::isnan(read_all<float>(recv_[1])[15]));
}

TEST_F(ValidateNanCheck, IntegerCollectivesAreNotRead) {
  std::vector<Buffer> ints;
  for (size_t r = 0; r < kRanks; ++r) {
    const std::vector<uint32_t> data(kCount, 0x7F800000u);  // Inf's bits, as integers
    ints.push_back(Buffer::create(ranks_[r], data.size() * sizeof(uint32_t)).value());
    ASSERT_TRUE(ints.back().write(std::span<const uint32_t>(data)));
  }
  ASSERT_EQ(outcome(group_.all_reduce(raw_handles(ints), raw_handles(ints), kCount, BP_U32, BP_MAX)), "succeeded");
}

// Every floating type: its largest finite value on every rank, summed,
// overflows to Inf.
TEST(ValidateNanCheckTypes, OverflowIsRefusedForEveryFloatingType) {
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host, R"({"nan_check": true})");
  Group group = host.create_group(ranks, "types").value();
  struct Type {
    bp_dtype dtype;
    const char *name;
    std::vector<unsigned char> largest;  // little-endian bytes of the largest finite value
  };
  std::vector<unsigned char> f32(4), f64(8);
  const float f32_max = FLT_MAX;
  const double f64_max = DBL_MAX;
  std::memcpy(f32.data(), &f32_max, 4);
  std::memcpy(f64.data(), &f64_max, 8);
  const std::vector<Type> types = {
      {BP_F16, "f16", {0xFF, 0x7B}}, {BP_BF16, "bf16", {0x7F, 0x7F}}, {BP_F32, "f32", f32}, {BP_F64, "f64", f64}};
  constexpr size_t kElements = 3000;  // more than one block of the scan
  for (const Type &type : types) {
    std::vector<Buffer> buffers;
    for (size_t r = 0; r < kRanks; ++r) {
      std::vector<unsigned char> data(kElements * type.largest.size(), 0);
      std::memcpy(data.data() + 2999 * type.largest.size(), type.largest.data(), type.largest.size());
      buffers.push_back(Buffer::create(ranks[r], data.size()).value());
      ASSERT_TRUE(buffers.back().write(0, data.data(), data.size()));
    }
    const Status refused = group.all_reduce(raw_handles(buffers), raw_handles(buffers), kElements, type.dtype, BP_SUM);
    ASSERT_FALSE(refused) << type.name;
    EXPECT_EQ(layer_message(refused.error(), "after"), std::string("validate: rank 0: all_reduce(") + type.name +
                                             ", sum) wrote Inf at element 2999 of recv (inputs held none)");
  }
}

TEST(ValidateNanCheckMixed, InputsOfARankWithoutTheLayerCount) {
  // Rank 0 is plain cpu:0: its input is read by rank 1's hook all the same.
  Host host = validate_host();
  std::vector<Device> ranks = {base_device(host, 0)};
  for (size_t r = 1; r < kRanks; ++r) ranks.push_back(wrap_in_validate(host, r, R"({"nan_check": true})").value());
  Group group = host.create_group(ranks).value();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<Buffer> send =
      filled_buffers<float>(ranks, 8, [&](size_t r) { return r == 0 ? inf : (r == 1 ? -inf : 0.0f); });
  std::vector<Buffer> recv = filled_buffers<float>(ranks, 8, [](size_t) { return 0.0f; });
  ASSERT_EQ(outcome(group.all_reduce(raw_handles(send), raw_handles(recv), 8, BP_F32, BP_SUM)), "succeeded");
  EXPECT_TRUE(std::isnan(read_all<float>(recv[3])[0]));
  // Finite inputs everywhere: the overflow is refused by the first rank with the layer.
  send = filled_buffers<float>(ranks, 8, [](size_t) { return FLT_MAX; });
  const Status refused = group.all_reduce(raw_handles(send), raw_handles(recv), 8, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(layer_message(refused.error(), "after"),
            "validate: rank 1: all_reduce(f32, sum) wrote Inf at element 0 of recv (inputs held none)");
}

TEST(ValidateNanCheckOff, OverflowIsNotRefused) {
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host);  // nan_check defaults to false
  Group group = host.create_group(ranks).value();
  std::vector<Buffer> buffers;
  for (size_t r = 0; r < kRanks; ++r) {
    const std::vector<float> data(8, FLT_MAX);
    buffers.push_back(Buffer::create(ranks[r], data.size() * sizeof(float)).value());
    ASSERT_TRUE(buffers.back().write(std::span<const float>(data)));
  }
  ASSERT_EQ(outcome(group.all_reduce(raw_handles(buffers), raw_handles(buffers), 8, BP_F32, BP_SUM)), "succeeded");
  EXPECT_EQ(read_all<float>(buffers[0])[0], std::numeric_limits<float>::infinity());
}

TEST(ValidateNanCheckAsync, AnAsyncCallIsCheckedWhenItCompletes) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 4, "async_threshold_bytes": 0}})");
  ASSERT_TRUE(host.load_plugin(plugin_path("validate").string()));
  std::vector<Device> ranks = validated_ranks(host, R"({"nan_check": true})");
  Group group = host.create_group(ranks).value();
  std::vector<Buffer> buffers;
  for (size_t r = 0; r < kRanks; ++r) {
    const std::vector<float> data(64, FLT_MAX);
    buffers.push_back(Buffer::create(ranks[r], data.size() * sizeof(float)).value());
    ASSERT_TRUE(buffers.back().write(std::span<const float>(data)));
  }
  Result<Event> event = all_reduce_async(group, raw_handles(buffers), raw_handles(buffers), 64, BP_F32, BP_SUM);
  ASSERT_TRUE(event) << event.error().message();
  const Status waited = event->wait();
  ASSERT_FALSE(waited);
  EXPECT_EQ(layer_message(waited.error(), "after"),
            "validate: rank 0: all_reduce(f32, sum) wrote Inf at element 0 of recv (inputs held none)");
}

TEST(ValidateNanCheckAsync, CallsInFlightTogetherAreNotJudgedOnStaleData) {
  // Call 2 reads what call 1 writes: while call 1 is in flight the buffers
  // do not yet hold call 2's inputs, and after call 2 began they no longer
  // hold call 1's outputs. Neither is refused, whichever event is waited
  // for first.
  Host host = make_cpu_host(R"({"cpu": {"devices": 4, "async_threshold_bytes": 0}})");
  ASSERT_TRUE(host.load_plugin(plugin_path("validate").string()));
  std::vector<Device> ranks = validated_ranks(host, R"({"nan_check": true})");
  Group group = host.create_group(ranks).value();
  constexpr size_t kCount = size_t{1} << 20;
  const float inf = std::numeric_limits<float>::infinity();
  for (const bool second_first : {false, true}) {
    std::vector<Buffer> a = filled_buffers<float>(ranks, kCount, [&](size_t r) { return r == 0 ? inf : 1.0f; });
    std::vector<Buffer> b = filled_buffers<float>(ranks, kCount, [](size_t) { return 0.0f; });
    std::vector<Buffer> c = filled_buffers<float>(ranks, kCount, [](size_t) { return 0.0f; });
    Result<Event> first = all_reduce_async(group, raw_handles(a), raw_handles(b), kCount, BP_F32, BP_SUM);
    ASSERT_TRUE(first) << first.error().message();
    Result<Event> second = all_reduce_async(group, raw_handles(b), raw_handles(c), kCount, BP_F32, BP_SUM);
    ASSERT_TRUE(second) << second.error().message();
    if (second_first) {
      EXPECT_EQ(outcome(second->wait()), "succeeded");
    }
    EXPECT_EQ(outcome(first->wait()), "succeeded");
    EXPECT_EQ(outcome(second->wait()), "succeeded");
    EXPECT_EQ(read_all<float>(c[3])[kCount - 1], inf);
  }
}

// ---- fingerprints ---------------------------------------------------------------------------

TEST(ValidateFingerprints, EveryCallOfEveryRankIsWrittenAtFlush) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "run.fp";
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host, nlohmann::json{{"fingerprints", file.string()}}.dump());
  Group group = host.create_group(ranks, "g").value();
  std::vector<Buffer> buffers = filled_buffers<float>(ranks, 16, [](size_t r) { return float(r); });
  ASSERT_TRUE(group.all_reduce(raw_handles(buffers), raw_handles(buffers), 16, BP_F32, BP_SUM));
  ASSERT_TRUE(group.broadcast(raw_handles(buffers), raw_handles(buffers), 8, BP_F32, 1));
  ASSERT_TRUE(group.barrier());
  ASSERT_TRUE(host.flush());
  const std::vector<std::string> lines = fingerprint_lines(file);
  ASSERT_EQ(lines.size(), 3 * kRanks) << read_text(file);
  std::vector<std::string> without_prints;
  for (const std::string &line : lines) {
    std::vector<std::string> words = words_of(line);
    ASSERT_EQ(words.size(), 10u) << line;
    EXPECT_EQ(words[9].size(), 18u) << line;
    EXPECT_EQ(words[9].substr(0, 2), "0x") << line;
    words.pop_back();
    std::string text;
    for (const std::string &word : words) text += (text.empty() ? "" : " ") + word;
    without_prints.push_back(text);
  }
  std::sort(without_prints.begin(), without_prints.end());
  EXPECT_EQ(without_prints, (std::vector<std::string>{
                                "\"g\" 1 0 all_reduce f32 sum 16 - 4", "\"g\" 1 1 all_reduce f32 sum 16 - 4",
                                "\"g\" 1 2 all_reduce f32 sum 16 - 4", "\"g\" 1 3 all_reduce f32 sum 16 - 4",
                                "\"g\" 2 0 broadcast f32 - 8 1 4",     "\"g\" 2 1 broadcast f32 - 8 1 4",
                                "\"g\" 2 2 broadcast f32 - 8 1 4",     "\"g\" 2 3 broadcast f32 - 8 1 4",
                                "\"g\" 3 0 barrier - - 0 - 4",         "\"g\" 3 1 barrier - - 0 - 4",
                                "\"g\" 3 2 barrier - - 0 - 4",         "\"g\" 3 3 barrier - - 0 - 4"}));
  // One call's fingerprint is the same at every rank, and calls differ.
  std::map<std::string, std::set<std::string>> prints;
  for (const std::string &line : lines) {
    const std::vector<std::string> words = words_of(line);
    prints[words[1]].insert(words[9]);
  }
  ASSERT_EQ(prints.size(), 3u);
  for (const auto &[call, seen] : prints) EXPECT_EQ(seen.size(), 1u) << "call " << call;
  EXPECT_NE(*prints["1"].begin(), *prints["2"].begin());
  EXPECT_NE(*prints["2"].begin(), *prints["3"].begin());

  // The next flush adds only what came since.
  ASSERT_TRUE(group.barrier());
  ASSERT_TRUE(host.flush());
  EXPECT_EQ(fingerprint_lines(file).size(), 4 * kRanks);
}

TEST(ValidateFingerprints, WrittenAtTheHostsEndAndPastTheRing) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "many.fp";
  constexpr size_t kCalls = 4096 + 1000;  // the ring is written out once full
  {
    Host host = validate_host();
    std::vector<Device> ranks;
    for (size_t r = 0; r < 2; ++r)
      ranks.push_back(wrap_in_validate(host, r, nlohmann::json{{"fingerprints", file.string()}}.dump()).value());
    Group group = host.create_group(ranks, "many").value();
    for (size_t call = 0; call < kCalls; ++call) ASSERT_TRUE(group.barrier());
  }  // no flush: the host's end writes them
  const std::vector<std::string> lines = fingerprint_lines(file);
  ASSERT_EQ(lines.size(), 2 * kCalls);
  std::set<std::pair<std::string, std::string>> seen;
  for (const std::string &line : lines) {
    const std::vector<std::string> words = words_of(line);
    seen.insert({words[1], words[2]});
  }
  EXPECT_EQ(seen.size(), 2 * kCalls) << "every (call, rank) once";
  EXPECT_TRUE(seen.count({std::to_string(kCalls), "1"}));
}

TEST(ValidateFingerprints, GroupNamesAreQuoted) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "names.fp";
  const std::string name = "two words \"quoted\" \\ and\ta tab";
  {
    Host host = validate_host();
    Device v0 = wrap_in_validate(host, 0, nlohmann::json{{"fingerprints", file.string()}}.dump()).value();
    Group group = host.create_group(std::vector<Device>{v0}, name.c_str()).value();
    ASSERT_TRUE(group.barrier());
    Group unnamed = host.create_group(std::vector<Device>{v0}).value();
    ASSERT_TRUE(unnamed.barrier());
  }
  const std::vector<std::string> lines = fingerprint_lines(file);
  ASSERT_EQ(lines.size(), 2u);
  const std::string quoted = R"("two words \"quoted\" \\ and\x09a tab" 1 )";
  EXPECT_EQ(lines[0].substr(0, quoted.size()), quoted) << lines[0];
  EXPECT_EQ(lines[1].substr(0, 5), R"("" 1 )") << lines[1];
  // And they read back: the same calls pass.
  Host host = validate_host();
  Device v0 = wrap_in_validate(host, 0, nlohmann::json{{"expect_fingerprints", file.string()}}.dump()).value();
  Group group = host.create_group(std::vector<Device>{v0}, name.c_str()).value();
  EXPECT_EQ(outcome(group.barrier()), "succeeded");
  Group unnamed = host.create_group(std::vector<Device>{v0}).value();
  EXPECT_EQ(outcome(unnamed.barrier()), "succeeded");
}

TEST(ValidateFingerprints, GroupsOnOneDeviceFromTwoThreads) {
  // Hooks of one instance run at once for two groups: the ring and the
  // nan_check scratch are shared by them.
  TempDir dir;
  const std::filesystem::path file = dir.path() / "threads.fp";
  constexpr size_t kCalls = 300;
  {
    Host host = validate_host();
    const nlohmann::json options = {{"fingerprints", file.string()}, {"nan_check", true}};
    std::vector<Device> ranks;
    for (size_t r = 0; r < 2; ++r) ranks.push_back(wrap_in_validate(host, r, options.dump()).value());
    std::vector<std::thread> threads;
    std::vector<std::string> failures(2);
    for (size_t t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        Group group = host.create_group(ranks, t == 0 ? "a" : "b").value();
        std::vector<Buffer> buffers = filled_buffers<float>(ranks, 1024, [](size_t r) { return float(r); });
        for (size_t call = 0; call < kCalls && failures[t].empty(); ++call) {
          const Status status = group.all_reduce(raw_handles(buffers), raw_handles(buffers), 1024, BP_F32, BP_MIN);
          if (!status) failures[t] = std::string(status.error().message());
        }
      });
    }
    for (std::thread &thread : threads) thread.join();
    EXPECT_EQ(failures, std::vector<std::string>(2));
  }
  std::map<std::string, size_t> per_group;
  for (const std::string &line : fingerprint_lines(file)) ++per_group[words_of(line)[0]];
  EXPECT_EQ(per_group, (std::map<std::string, size_t>{{"\"a\"", 2 * kCalls}, {"\"b\"", 2 * kCalls}}));
}

// ---- expect_fingerprints ---------------------------------------------------------------------

// A program of four calls on group "g": what one run records and the next
// one replays. `ops[i]` is the op of call i + 1's all_reduce.
std::vector<Status> run_program(Host &host, const std::vector<Device> &ranks, const std::vector<bp_reduce_op> &ops,
                                std::vector<Buffer> *buffers_out = nullptr) {
  Group group = host.create_group(ranks, "g").value();
  std::vector<Buffer> buffers = filled_buffers<float>(ranks, 16, [](size_t r) { return float(r + 1); });
  std::vector<Status> results;
  for (const bp_reduce_op op : ops)
    results.push_back(group.all_reduce(raw_handles(buffers), raw_handles(buffers), 16, BP_F32, op));
  if (buffers_out) *buffers_out = std::move(buffers);
  return results;
}

std::string json_path(const char *key, const std::filesystem::path &path) {
  return nlohmann::json{{key, path.string()}}.dump();
}

TEST(ValidateExpect, TheSameProgramRuns) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "run.fp";
  {
    Host host = validate_host();
    std::vector<Device> ranks = validated_ranks(host, json_path("fingerprints", file));
    for (const Status &status : run_program(host, ranks, {BP_SUM, BP_MAX, BP_SUM})) ASSERT_TRUE(status);
  }
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host, json_path("expect_fingerprints", file));
  for (const Status &status : run_program(host, ranks, {BP_SUM, BP_MAX, BP_SUM}))
    EXPECT_EQ(outcome(status), "succeeded");
}

TEST(ValidateExpect, ADifferentCallIsRefusedNamingTheDifference) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "run.fp";
  {
    Host host = validate_host();
    std::vector<Device> ranks = validated_ranks(host, json_path("fingerprints", file));
    for (const Status &status : run_program(host, ranks, {BP_SUM, BP_SUM, BP_SUM})) ASSERT_TRUE(status);
  }
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host, json_path("expect_fingerprints", file));
  std::vector<Buffer> buffers;
  const std::vector<Status> results = run_program(host, ranks, {BP_SUM, BP_MAX, BP_SUM, BP_SUM}, &buffers);
  EXPECT_EQ(outcome(results[0]), "succeeded");
  ASSERT_FALSE(results[1]);
  EXPECT_EQ(results[1].error().code(), BP_INVALID_ARGUMENT);
  EXPECT_EQ(layer_message(results[1].error(), "before"),
            "validate: rank 0: call 2 of group 'g' is all_reduce(f32, max) of 16, the recorded run had "
            "all_reduce(f32, sum) of 16");
  // Call 3 is the recorded call 3: the host went on. (Call 2 did not run:
  // the buffers hold the first sum, 10, then the third, 40.)
  EXPECT_EQ(outcome(results[2]), "succeeded");
  EXPECT_EQ(mismatches(buffers[2], 0, 16, 40.0f), "");
  // Call 4 was never recorded.
  ASSERT_FALSE(results[3]);
  EXPECT_EQ(layer_message(results[3].error(), "before"),
            "validate: rank 0: call 4 of group 'g' is all_reduce(f32, sum) of 16, the recorded run had no call 4 "
            "of group 'g' at rank 0 (its last there was call 3)");
}

TEST(ValidateExpect, TheRefusedCallLeavesTheBuffersAlone) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "run.fp";
  {
    Host host = validate_host();
    std::vector<Device> ranks = validated_ranks(host, json_path("fingerprints", file));
    Group group = host.create_group(ranks, "g").value();
    ASSERT_TRUE(group.barrier());
  }
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host, json_path("expect_fingerprints", file));
  Group group = host.create_group(ranks, "g").value();
  std::vector<Buffer> send = filled_buffers<float>(ranks, 16, [](size_t r) { return float(r + 1); });
  std::vector<Buffer> recv = filled_buffers<float>(ranks, 16, [](size_t) { return -1.0f; });
  const Status refused = group.all_reduce(raw_handles(send), raw_handles(recv), 16, BP_F32, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(layer_message(refused.error(), "before"),
            "validate: rank 0: call 1 of group 'g' is all_reduce(f32, sum) of 16, the recorded run had barrier");
  for (size_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(mismatches(send[r], 0, 16, float(r + 1)), "");
    EXPECT_EQ(mismatches(recv[r], 0, 16, -1.0f), "");
  }
}

TEST(ValidateExpect, AnotherGroupSizeIsADifference) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "run.fp";
  {
    Host host = validate_host();
    std::vector<Device> ranks = validated_ranks(host, json_path("fingerprints", file));
    ranks.pop_back();
    Group group = host.create_group(ranks, "g").value();
    ASSERT_TRUE(group.barrier());
  }
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host, json_path("expect_fingerprints", file));
  Group group = host.create_group(ranks, "g").value();
  const Status refused = group.barrier();
  ASSERT_FALSE(refused);
  EXPECT_EQ(layer_message(refused.error(), "before"),
            "validate: rank 0: call 1 of group 'g' is barrier on 4 ranks, the recorded run had barrier on 3 ranks");
}

TEST(ValidateExpect, ALayerMayCompareWithTheLastRunAndRecordThisOne) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "run.fp";
  const nlohmann::json both = {{"fingerprints", file.string()}, {"expect_fingerprints", file.string()}};
  {
    Host host = validate_host();
    std::vector<Device> ranks = validated_ranks(host, json_path("fingerprints", file));
    for (const Status &status : run_program(host, ranks, {BP_SUM, BP_MIN})) ASSERT_TRUE(status);
  }
  for (int run = 0; run < 2; ++run) {
    Host host = validate_host();
    std::vector<Device> ranks = validated_ranks(host, both.dump());
    for (const Status &status : run_program(host, ranks, {BP_SUM, BP_MIN})) EXPECT_EQ(outcome(status), "succeeded");
  }
  EXPECT_EQ(fingerprint_lines(file).size(), 2 * kRanks);
}

// The recording made by another process: the child records, this process
// compares.
TEST(ValidateExpectChild, Records) {
  const char *file = std::getenv("BACKPLANE_VALIDATE_TEST_RECORD");
  if (file == nullptr) GTEST_SKIP() << "runs as a child of ValidateExpect.ComparesWithARunOfAnotherProcess";
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host, json_path("fingerprints", file));
  for (const Status &status : run_program(host, ranks, {BP_SUM, BP_PROD, BP_AVG})) ASSERT_TRUE(status);
}

TEST(ValidateExpect, ComparesWithARunOfAnotherProcess) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "child.fp";
  run_in_child("ValidateExpectChild.Records", {"BACKPLANE_VALIDATE_TEST_RECORD=" + file.string()});
  ASSERT_EQ(fingerprint_lines(file).size(), 3 * kRanks);
  Host host = validate_host();
  std::vector<Device> ranks = validated_ranks(host, json_path("expect_fingerprints", file));
  const std::vector<Status> results = run_program(host, ranks, {BP_SUM, BP_PROD, BP_SUM});
  EXPECT_EQ(outcome(results[0]), "succeeded");
  EXPECT_EQ(outcome(results[1]), "succeeded");
  ASSERT_FALSE(results[2]);
  EXPECT_EQ(layer_message(results[2].error(), "before"),
            "validate: rank 0: call 3 of group 'g' is all_reduce(f32, sum) of 16, the recorded run had "
            "all_reduce(f32, avg) of 16");
}

TEST(ValidateExpect, OnlyTheRanksThatCarryTheLayerAreCompared) {
  TempDir dir;
  const std::filesystem::path file = dir.path() / "run.fp";
  {
    Host host = validate_host();
    std::vector<Device> ranks = validated_ranks(host, json_path("fingerprints", file));
    for (const Status &status : run_program(host, ranks, {BP_SUM, BP_SUM})) ASSERT_TRUE(status);
  }
  // Rank 0 plain, ranks 1..3 comparing: rank 1 is the first to refuse.
  Host host = validate_host();
  std::vector<Device> ranks = {base_device(host, 0)};
  for (size_t r = 1; r < kRanks; ++r)
    ranks.push_back(wrap_in_validate(host, r, json_path("expect_fingerprints", file)).value());
  const std::vector<Status> results = run_program(host, ranks, {BP_SUM, BP_MAX});
  EXPECT_EQ(outcome(results[0]), "succeeded");
  ASSERT_FALSE(results[1]);
  EXPECT_EQ(layer_message(results[1].error(), "before"),
            "validate: rank 1: call 2 of group 'g' is all_reduce(f32, max) of 16, the recorded run had "
            "all_reduce(f32, sum) of 16");
  EXPECT_EQ(results[1].error().field("rank"), "1");
}

}  // namespace
