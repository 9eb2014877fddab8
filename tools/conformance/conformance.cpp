// The conformance suite (see conformance.hpp): what a plugin declares, run
// and compared with the reference (tools/reference); what it does not,
// refused exactly.
#include "conformance.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <utility>

#include "backplane/backplane.hpp"
#include "backplane_reference/staged_case.hpp"

namespace backplane::conformance {
namespace {

using reference::CollectiveCase;
using reference::is_reducing;
using reference::is_rooted;

// What every buffer region that is not an input holds before a call, so
// that a plugin leaving its output untouched cannot pass.
constexpr std::byte kMarker{0xA5};
// Counts each declared case runs at. The large count (odd, past 64 Ki
// elements, so vector tails run and buffers reach MiBs) runs on the largest
// group only and out of place only, which bounds the suite's time.
constexpr size_t kCounts[] = {0, 1, 7, 1000};
constexpr size_t kQuickCounts[] = {0, 7};
constexpr size_t kLargeCount = 65537;
constexpr size_t kQuickLargeCount = 1000;
// The count an undeclared combination is called with: small, and not zero,
// so that a call run by mistake shows in the buffers.
constexpr size_t kRefusalCount = 7;
// Failure lines a row keeps (it counts them all).
constexpr size_t kFailuresKept = 3;

enum class Mode { out_of_place, in_place };
constexpr Mode kModes[] = {Mode::out_of_place, Mode::in_place};

const char *mode_name(Mode mode) { return mode == Mode::in_place ? "in-place" : "out-of-place"; }
const char *mode_words(Mode mode) { return mode == Mode::in_place ? "in place" : "out of place"; }
uint32_t mode_flag(Mode mode) { return mode == Mode::in_place ? BP_CAPABILITY_IN_PLACE : BP_CAPABILITY_OUT_OF_PLACE; }

std::string error_text(const Error &error) {
  return std::string(error.code_name()) + ": " + std::string(error.message());
}

uint32_t bit(uint32_t value) { return 1u << value; }

// One (collective, dtype, op); op is BP_SUM and meaningless for the
// collectives that do not reduce, dtype and op for barrier.
struct Combo {
  bp_collective collective;
  bp_dtype dtype;
  bp_reduce_op op;
};

// Barrier's one combination (its dtype and op are not read).
constexpr Combo kBarrier{BP_BARRIER, BP_F32, BP_SUM};

// Every combination but barrier's, in the order rows are listed.
template <typename F>
void for_each_combo(F &&f) {
  for (uint32_t c = 0; c < BP_COLLECTIVE_COUNT; ++c) {
    const auto collective = static_cast<bp_collective>(c);
    if (collective == BP_BARRIER) continue;
    for (uint32_t d = 0; d < BP_DTYPE_COUNT; ++d)
      for (uint32_t o = 0; o < (is_reducing(collective) ? BP_REDUCE_OP_COUNT : 1u); ++o)
        f(Combo{collective, static_cast<bp_dtype>(d), static_cast<bp_reduce_op>(o)});
  }
}

// What a kind declares, read from the host's capability listing.
struct Declared {
  std::array<bool, BP_COLLECTIVE_COUNT> collective{};
  std::array<uint32_t, BP_COLLECTIVE_COUNT> dtypes{}, flags{};
  std::array<std::array<uint32_t, BP_DTYPE_COUNT>, BP_COLLECTIVE_COUNT> ops{};

  Declared(const std::vector<CapabilityInfo> &listing, const std::string &kind) {
    for (const CapabilityInfo &row : listing) {
      if (row.device_kind != kind || row.collective >= BP_COLLECTIVE_COUNT) continue;
      collective[row.collective] = true;
      dtypes[row.collective] |= row.dtypes;
      flags[row.collective] |= row.flags;
      for (uint32_t d = 0; d < BP_DTYPE_COUNT; ++d)
        if (row.dtypes & bit(d)) ops[row.collective][d] |= row.reduce_ops;
    }
  }

  // BP_OK, or what the kind lacks for the combination (in or out of place aside).
  bp_code code(const Combo &combo) const {
    const uint32_t c = combo.collective;
    if (!collective[c]) return BP_UNSUPPORTED_COLLECTIVE;
    if (combo.collective == BP_BARRIER) return BP_OK;
    if (!(dtypes[c] & bit(combo.dtype))) return BP_UNSUPPORTED_DTYPE;
    if (is_reducing(combo.collective) && !(ops[c][combo.dtype] & bit(combo.op))) return BP_UNSUPPORTED_REDUCE_OP;
    return BP_OK;
  }
};

// One device of the kind, and what it runs on its own: the application API
// lists capabilities per kind only, so a device that declares less shows in
// bp_group_check on a group of that device alone, and a mode it lacks in
// the answer to a call of count 0.
struct DeviceFacts {
  Device device;
  std::string name;
  uint32_t index = 0;
  std::array<std::array<uint32_t, BP_DTYPE_COUNT>, BP_COLLECTIVE_COUNT> ops{};  // op masks it runs
  std::array<uint32_t, BP_COLLECTIVE_COUNT> modes{};                            // BP_CAPABILITY_* it runs
  bool narrower = false;                                                        // declares less than its kind

  bool runs(const Combo &combo) const { return ops[combo.collective][combo.dtype] & bit(combo.op); }
  bool runs_dtype(const Combo &combo) const { return ops[combo.collective][combo.dtype] != 0; }
  bool runs_collective(uint32_t collective) const {
    for (uint32_t op_mask : ops[collective])
      if (op_mask != 0) return true;
    return false;
  }
};

// The answer a call must get: BP_OK, or the code and why.
struct Expectation {
  bp_code code = BP_OK;
  std::string reason;  // "UNSUPPORTED_DTYPE: no f64 for all_reduce"
};

Expectation refusal(bp_code code, const std::string &why) {
  return {code, std::string(bp_code_name(code)) + ": " + why};
}

std::string row_key(const std::string &kind, const std::string &collective, const std::string &dtype,
                    const std::string &op, const std::string &mode) {
  return kind + '\n' + collective + '\n' + dtype + '\n' + op + '\n' + mode;
}

class KindSuite {
 public:
  KindSuite(Host &host, const std::string &kind, const ConformanceOptions &options, ConformanceReport &report)
      : host_(host), kind_(kind), options_(options), report_(report), declared_(host.capabilities(), kind) {}

  void run() {
    KindSummary summary{kind_, 0, {}};
    add_rows();
    if (!find_devices()) return;
    summary.devices = devices_.size();
    if (devices_.empty()) {
      ConformanceRow &row = setup_row();
      ++row.skipped;
      row.skip_reason = "the plugin enumerates no " + kind_ + " devices; nothing to run";
      report_.kinds.push_back(std::move(summary));
      return;
    }
    for (DeviceFacts &facts : devices_) learn(facts);
    for (const std::vector<size_t> &members : groups()) {
      std::vector<std::string> names;
      for (size_t m : members) names.push_back(devices_[m].name);
      summary.groups.push_back(names);
      run_group(members, /*largest=*/members.size() == largest_ && members.back() + 1 == largest_);
    }
    report_.kinds.push_back(std::move(summary));
  }

 private:
  // ---- rows ----

  // Every row of the kind, in listing order, before any group runs.
  void add_rows() {
    for_each_combo([&](const Combo &combo) {
      for (Mode mode : kModes) {
        ConformanceRow row;
        row.kind = kind_;
        row.collective = bp_collective_name(combo.collective);
        row.dtype = bp_dtype_name(combo.dtype);
        row.op = is_reducing(combo.collective) ? bp_reduce_op_name(combo.op) : "-";
        row.mode = mode_name(mode);
        add_row(std::move(row));
      }
    });
    ConformanceRow barrier;
    barrier.kind = kind_;
    barrier.collective = bp_collective_name(BP_BARRIER);
    add_row(std::move(barrier));
  }

  void add_row(ConformanceRow row) {
    rows_[row_key(row.kind, row.collective, row.dtype, row.op, row.mode)] = report_.rows.size();
    report_.rows.push_back(std::move(row));
  }

  ConformanceRow &row(const Combo &combo, std::optional<Mode> mode) {
    const bool barrier = combo.collective == BP_BARRIER;
    return report_.rows[rows_.at(
        row_key(kind_, bp_collective_name(combo.collective), barrier ? "-" : bp_dtype_name(combo.dtype),
                is_reducing(combo.collective) ? bp_reduce_op_name(combo.op) : "-", mode ? mode_name(*mode) : "-"))];
  }

  // Problems that belong to no combination (a device without info, a group
  // the host will not create): one row of the kind, made when first needed.
  ConformanceRow &setup_row() {
    const std::string key = row_key(kind_, "setup", "-", "-", "-");
    if (!rows_.count(key)) {
      ConformanceRow row;
      row.kind = kind_;
      row.collective = "setup";
      add_row(std::move(row));
    }
    return report_.rows[rows_.at(key)];
  }

  static void fail(ConformanceRow &row, std::string message) {
    ++row.failed;
    if (row.failures.size() < kFailuresKept) row.failures.push_back(std::move(message));
  }

  static void skip(ConformanceRow &row, const std::string &reason) {
    ++row.skipped;
    if (row.skip_reason.empty()) row.skip_reason = reason;
  }

  // ---- devices ----

  bool find_devices() {
    for (const Device &device : host_.devices()) {
      Result<DeviceInfo> info = device.info();
      if (!info) {
        fail(setup_row(), "device info: " + error_text(info.error()));
        return false;
      }
      if (info->kind == kind_) devices_.push_back(DeviceFacts{device, info->name, info->index, {}, {}, false});
    }
    std::sort(devices_.begin(), devices_.end(),
              [](const DeviceFacts &a, const DeviceFacts &b) { return a.index < b.index; });
    return true;
  }

  // What `facts`'s device runs alone, for the combinations its kind declares.
  void learn(DeviceFacts &facts) {
    Result<Group> created = host_.create_group(std::span<const Device>(&facts.device, 1));
    if (!created) {
      fail(setup_row(), "group [" + facts.name + "]: " + error_text(created.error()));
      return;
    }
    Group &group = *created;
    for_each_combo([&](const Combo &combo) {
      if (declared_.code(combo) != BP_OK) return;
      if (group.check(combo.collective, combo.dtype, combo.op))
        facts.ops[combo.collective][combo.dtype] |= bit(combo.op);
      else
        facts.narrower = true;
    });
    if (declared_.collective[BP_BARRIER]) {
      if (group.check(kBarrier.collective, kBarrier.dtype, kBarrier.op))
        facts.ops[BP_BARRIER][kBarrier.dtype] |= bit(kBarrier.op);
      else
        facts.narrower = true;
    }
    // Modes, per collective, with the first combination the device runs.
    for (uint32_t c = 0; c < BP_COLLECTIVE_COUNT; ++c) {
      const auto collective = static_cast<bp_collective>(c);
      if (collective == BP_BARRIER || !declared_.collective[c]) continue;
      std::optional<Combo> sample;
      for_each_combo([&](const Combo &combo) {
        if (!sample && combo.collective == collective && facts.runs(combo)) sample = combo;
      });
      if (!sample) continue;
      for (Mode mode : kModes) {
        if (!(declared_.flags[c] & mode_flag(mode))) continue;
        if (probe_refuses_mode(group, facts, *sample, mode))
          facts.narrower = true;
        else
          facts.modes[c] |= mode_flag(mode);
      }
    }
  }

  // True when a call of count 0 in `mode` on the device alone is refused
  // with UNSUPPORTED_DEVICE. Any other trouble is left for the cases to
  // find and report.
  bool probe_refuses_mode(Group &group, const DeviceFacts &facts, const Combo &combo, Mode mode) {
    const CollectiveCase c{combo.collective, combo.dtype, combo.op, 0, 1, 0, mode == Mode::in_place};
    Result<reference::StagedCase> staged =
        reference::stage_case(c, std::span<const Device>(&facts.device, 1), kMarker);
    if (!staged || !reference::write_images(*staged)) return false;
    Status status = group.run(reference::make_request(*staged));
    return !status && status.error().code() == BP_UNSUPPORTED_DEVICE;
  }

  // ---- groups ----

  // Indices into devices_ of each group: the first 1, 2, 3 and `largest_`
  // devices (quick: 2 and `largest_`), then each device that declares less
  // than its kind alone, and beside the first device when the largest group
  // leaves it out.
  std::vector<std::vector<size_t>> groups() {
    const size_t n = devices_.size();
    largest_ = std::min(std::max<size_t>(options_.max_group, 1), n);
    std::vector<size_t> sizes =
        options_.quick ? std::vector<size_t>{2, largest_} : std::vector<size_t>{1, 2, 3, largest_};
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::vector<std::vector<size_t>> groups;
    for (size_t size : sizes) {
      if (size > largest_) continue;
      std::vector<size_t> members(size);
      for (size_t i = 0; i < size; ++i) members[i] = i;
      groups.push_back(members);
    }
    auto add = [&](std::vector<size_t> members) {
      if (std::find(groups.begin(), groups.end(), members) == groups.end()) groups.push_back(std::move(members));
    };
    for (size_t i = 0; i < n; ++i) {
      if (!devices_[i].narrower) continue;
      add({i});
      if (i >= largest_) add({0, i});
    }
    return groups;
  }

  std::string group_text(const std::vector<size_t> &members) const {
    std::string text = "[";
    for (size_t m : members) text += (text.size() > 1 ? " " : "") + devices_[m].name;
    return text + "]";
  }

  // What the group must answer for the combination, in or out of place aside.
  Expectation expect(const std::vector<size_t> &members, const Combo &combo) const {
    switch (declared_.code(combo)) {
      case BP_OK:
        break;
      case BP_UNSUPPORTED_COLLECTIVE:
        return refusal(BP_UNSUPPORTED_COLLECTIVE,
                       kind_ + " declares no " + std::string(bp_collective_name(combo.collective)));
      case BP_UNSUPPORTED_DTYPE:
        return refusal(BP_UNSUPPORTED_DTYPE, "no " + std::string(bp_dtype_name(combo.dtype)) + " for " +
                                                 bp_collective_name(combo.collective));
      default:
        return refusal(BP_UNSUPPORTED_REDUCE_OP, "no " + std::string(bp_reduce_op_name(combo.op)) + " for " +
                                                     bp_collective_name(combo.collective) + " of " +
                                                     bp_dtype_name(combo.dtype));
    }
    // The host names what the first device that falls short lacks, where
    // it runs the collective at all.
    for (size_t m : members) {
      const DeviceFacts &device = devices_[m];
      if (device.runs(combo)) continue;
      const std::string why = device.name + " declares less than its kind";
      if (!device.runs_collective(combo.collective)) return refusal(BP_UNSUPPORTED_DEVICE, why);
      if (!device.runs_dtype(combo)) return refusal(BP_UNSUPPORTED_DTYPE, why);
      return refusal(BP_UNSUPPORTED_REDUCE_OP, why);
    }
    return {};
  }

  // The same, in `mode`.
  Expectation expect(const std::vector<size_t> &members, const Combo &combo, Mode mode) const {
    Expectation expectation = expect(members, combo);
    if (expectation.code != BP_OK) return expectation;
    const uint32_t c = combo.collective;
    if (!(declared_.flags[c] & mode_flag(mode)))
      return refusal(BP_UNSUPPORTED_DEVICE,
                     std::string(bp_collective_name(combo.collective)) + " is not declared " + mode_words(mode));
    for (size_t m : members)
      if (!(devices_[m].modes[c] & mode_flag(mode)))
        return refusal(BP_UNSUPPORTED_DEVICE, devices_[m].name + " does not run " +
                                                  bp_collective_name(combo.collective) + " " + mode_words(mode));
    return {};
  }

  // ---- running ----

  void run_group(const std::vector<size_t> &members, bool largest) {
    std::vector<Device> ranks;
    for (size_t m : members) ranks.push_back(devices_[m].device);
    const std::string name = group_text(members);
    Result<Group> created = host_.create_group(ranks);
    if (!created) {
      fail(setup_row(), "group " + name + ": " + error_text(created.error()));
      return;
    }
    Group &group = *created;
    const size_t n = members.size();

    for_each_combo([&](const Combo &combo) {
      const std::optional<std::string> check_problem = check_disagrees(group, name, members, combo);
      for (Mode mode : kModes) {
        ConformanceRow &r = row(combo, mode);
        if (check_problem) fail(r, *check_problem);
        const Expectation expected = expect(members, combo, mode);
        if (expected.code != BP_OK) {
          const uint32_t root = is_rooted(combo.collective) ? static_cast<uint32_t>(n - 1) : 0;
          refused_case(
              group, ranks, r, name, expected,
              CollectiveCase{combo.collective, combo.dtype, combo.op, kRefusalCount, n, root, mode == Mode::in_place});
          continue;
        }
        std::vector<size_t> counts = options_.quick
                                         ? std::vector<size_t>(std::begin(kQuickCounts), std::end(kQuickCounts))
                                         : std::vector<size_t>(std::begin(kCounts), std::end(kCounts));
        if (largest && mode == Mode::out_of_place) counts.push_back(options_.quick ? kQuickLargeCount : kLargeCount);
        std::vector<uint32_t> roots{0};
        if (is_rooted(combo.collective) && n > 1) roots.push_back(static_cast<uint32_t>(n - 1));
        for (size_t count : counts)
          for (uint32_t root : roots)
            declared_case(
                group, ranks, r, name,
                CollectiveCase{combo.collective, combo.dtype, combo.op, count, n, root, mode == Mode::in_place});
      }
    });

    ConformanceRow &r = row(kBarrier, std::nullopt);
    if (std::optional<std::string> problem = check_disagrees(group, name, members, kBarrier)) fail(r, *problem);
    const Expectation expected = expect(members, kBarrier);
    const Status status = group.barrier();
    if (expected.code == BP_OK) {
      if (status)
        ++r.passed;
      else
        fail(r, name + " barrier: " + error_text(status.error()));
    } else if (status) {
      fail(r, name + " barrier ran, expected " + expected.reason);
    } else if (status.error().code() != expected.code) {
      fail(r, name + " barrier answered " + error_text(status.error()) + ", expected " + expected.reason);
    } else {
      skip(r, expected.reason);
    }
  }

  // bp_group_check must give the answer a call gets (in or out of place
  // aside): a line saying how it does not, or nothing.
  std::optional<std::string> check_disagrees(const Group &group, const std::string &name,
                                             const std::vector<size_t> &members, const Combo &combo) const {
    const Expectation expected = expect(members, combo);
    const Status checked = group.check(combo.collective, combo.dtype, combo.op);
    if (checked.ok() == (expected.code == BP_OK) && (checked || checked.error().code() == expected.code))
      return std::nullopt;
    return name + " bp_group_check answers " + (checked ? std::string("OK") : error_text(checked.error())) +
           ", expected " + (expected.code == BP_OK ? "OK" : expected.reason);
  }

  static std::string case_text(const std::string &group, const CollectiveCase &c) {
    std::string text = group + " count " + std::to_string(c.count);
    if (is_rooted(c.collective)) text += " root " + std::to_string(c.root);
    return text;
  }

  // A declared case: it must run, leave the reference's result in every
  // rank's result region and touch nothing else.
  void declared_case(Group &group, const std::vector<Device> &ranks, ConformanceRow &r, const std::string &name,
                     const CollectiveCase &c) {
    const std::string where = case_text(name, c);
    Result<reference::StagedCase> staged = reference::stage_case(c, ranks, kMarker);
    if (!staged) return fail(r, where + ": creating buffers: " + error_text(staged.error()));
    if (Status written = reference::write_images(*staged); !written)
      return fail(r, where + ": writing buffers: " + error_text(written.error()));
    if (Status status = group.run(reference::make_request(*staged)); !status)
      return fail(r, where + ": declared but answered " + error_text(status.error()));
    Result<std::vector<reference::Comparison>> compared = reference::check_results(*staged);
    if (!compared) return fail(r, where + ": reading results: " + error_text(compared.error()));
    for (size_t rank = 0; rank < c.ranks; ++rank) {
      const reference::Comparison &comparison = (*compared)[rank];
      if (comparison.wrong == 0) continue;
      return fail(r, where + ": rank " + std::to_string(rank) + " element " + std::to_string(comparison.first_index) +
                         ": got " + comparison.got + ", expected " + comparison.expected + " (" +
                         std::to_string(comparison.wrong) + " wrong)");
    }
    Result<reference::Change> change = reference::find_change(*staged, /*results_may_change=*/true);
    if (!change) return fail(r, where + ": reading buffers: " + error_text(change.error()));
    if (change->changed)
      return fail(r, where + ": rank " + std::to_string(change->rank) + " " + change->side + " element " +
                         std::to_string(change->element) + " outside the result changed from " + change->expected +
                         " to " + change->got);
    ++r.passed;
  }

  // An undeclared case: it must be refused with exactly the expected code
  // and leave every buffer as it was.
  void refused_case(Group &group, const std::vector<Device> &ranks, ConformanceRow &r, const std::string &name,
                    const Expectation &expected, const CollectiveCase &c) {
    const std::string where = case_text(name, c);
    Result<reference::StagedCase> staged = reference::stage_case(c, ranks, kMarker);
    if (!staged) return fail(r, where + ": creating buffers: " + error_text(staged.error()));
    if (Status written = reference::write_images(*staged); !written)
      return fail(r, where + ": writing buffers: " + error_text(written.error()));
    const Status status = group.run(reference::make_request(*staged));
    if (status) return fail(r, where + ": ran, but expected " + expected.reason);
    if (status.error().code() != expected.code)
      return fail(r, where + ": answered " + error_text(status.error()) + ", expected " + expected.reason);
    Result<reference::Change> change = reference::find_change(*staged, /*results_may_change=*/false);
    if (!change) return fail(r, where + ": reading buffers: " + error_text(change.error()));
    if (change->changed)
      return fail(r, where + ": refused, but rank " + std::to_string(change->rank) + " " + change->side + " element " +
                         std::to_string(change->element) + " changed from " + change->expected + " to " + change->got);
    skip(r, expected.reason);
  }

  Host &host_;
  const std::string kind_;
  const ConformanceOptions &options_;
  ConformanceReport &report_;
  const Declared declared_;
  std::vector<DeviceFacts> devices_;    // of this kind, by index
  size_t largest_ = 0;                  // ranks of the largest group
  std::map<std::string, size_t> rows_;  // row_key -> index in report_.rows
};

void refused(ConformanceReport &report, const Error &error) {
  report.refused_code = error.code_name();
  report.refused_message = error.message();
  report.refused_hint = error.field("hint");
  ConformanceRow row;
  row.kind = "-";
  row.collective = "load";
  row.failed = 1;
  row.failures.push_back(error_text(error));
  report.rows.push_back(std::move(row));
}

}  // namespace

std::string ConformanceRow::note() const {
  if (!failures.empty()) {
    std::string text = failures.front();
    if (failed > 1) text += " (+" + std::to_string(failed - 1) + " more)";
    return text;
  }
  return skip_reason;
}

ConformanceReport run_conformance(const std::string &plugin_file, const ConformanceOptions &options) {
  const auto start = std::chrono::steady_clock::now();
  ConformanceReport report;
  report.file = plugin_file;
  [&] {
    HostOptions host_options;
    host_options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
    host_options.plugin_options_json = options.plugin_options_json;
    Result<Host> created = Host::create(host_options);
    if (!created) return refused(report, created.error());
    Host &host = *created;
    if (Status loaded = host.load_plugin(plugin_file); !loaded) return refused(report, loaded.error());
    const std::vector<PluginInfo> plugins = host.plugins();
    if (plugins.empty()) return;  // not reached: the load succeeded
    report.plugin = plugins.front().name;
    report.version = plugins.front().version;
    for (const std::string &kind : plugins.front().device_kinds) KindSuite(host, kind, options, report).run();
  }();
  for (const ConformanceRow &row : report.rows) {
    report.passed += row.passed;
    report.failed += row.failed;
    report.skipped += row.skipped;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string to_json(const ConformanceReport &report, int indent) {
  nlohmann::ordered_json out;
  out["file"] = report.file;
  out["plugin"] = report.plugin;
  out["version"] = report.version;
  if (!report.refused_code.empty())
    out["refused"] = {
        {"code", report.refused_code}, {"message", report.refused_message}, {"hint", report.refused_hint}};
  out["kinds"] = nlohmann::ordered_json::array();
  for (const KindSummary &kind : report.kinds)
    out["kinds"].push_back({{"kind", kind.kind}, {"devices", kind.devices}, {"groups", kind.groups}});
  out["rows"] = nlohmann::ordered_json::array();
  for (const ConformanceRow &row : report.rows)
    out["rows"].push_back({{"kind", row.kind},
                           {"collective", row.collective},
                           {"dtype", row.dtype},
                           {"op", row.op},
                           {"mode", row.mode},
                           {"passed", row.passed},
                           {"failed", row.failed},
                           {"skipped", row.skipped},
                           {"note", row.note()},
                           {"failures", row.failures}});
  out["totals"] = {{"passed", report.passed}, {"failed", report.failed}, {"skipped", report.skipped}};
  out["seconds"] = report.seconds;
  out["ok"] = report.ok();
  return out.dump(indent);
}

}  // namespace backplane::conformance
