// `backplane explain [FLEET.json] --group G --collective C --dtype T [--op O]`:
// says, without running anything, whether the request would run on the
// fleet's group and by which plugin, or the structured refusal
// (bp_group_check) with its alternatives and hint.
#include <cinttypes>
#include <nlohmann/json.hpp>

#include "backplane_reference/collective_reference.hpp"
#include "cli.hpp"

namespace backplane::cli {
namespace {

using reference::is_reducing;

template <typename Enum>
std::vector<std::string> names_of(uint32_t count, const char *(*name)(Enum)) {
  std::vector<std::string> names;
  for (uint32_t i = 0; i < count; ++i) names.emplace_back(name(static_cast<Enum>(i)));
  return names;
}

// Parses one name, or prints the usage error (with the closest known name)
// and returns false.
template <typename Enum>
bool parse_name(const char *what, const std::string &given, bool (*from_name)(const char *, Enum *),
                const std::vector<std::string> &known, Enum *out) {
  if (from_name(given.c_str(), out)) return true;
  std::string message = "unknown " + std::string(what) + " '" + given + "'";
  const std::string closest = closest_name(given, known);
  if (!closest.empty()) message += "; did you mean '" + closest + "'?";
  message += " (known: ";
  for (size_t i = 0; i < known.size(); ++i) message += (i ? ", " : "") + known[i];
  print_usage_error(message + ")");
  return false;
}

std::string operation_text(bp_collective collective, bp_dtype dtype, bp_reduce_op op) {
  if (collective == BP_BARRIER) return "barrier";
  std::string text = std::string(bp_collective_name(collective)) + "(" + bp_dtype_name(dtype);
  if (is_reducing(collective)) text += std::string(", ") + bp_reduce_op_name(op);
  return text + ")";
}

}  // namespace

int run_explain(const GlobalOptions &options, const std::string &fleet_file, const ExplainRequest &request,
                bool json) {
  // Names first: a typo is bad usage, found before any plugin loads.
  bp_collective collective{};
  bp_dtype dtype = BP_F32;  // barrier has none; the check ignores it
  bp_reduce_op op = BP_SUM;
  if (!parse_name("collective", request.collective, bp_collective_from_name,
                  names_of(BP_COLLECTIVE_COUNT, bp_collective_name), &collective))
    return kExitUsage;
  if (request.dtype.empty() && collective != BP_BARRIER) {
    print_usage_error(std::string("--dtype is required for ") + bp_collective_name(collective));
    return kExitUsage;
  }
  if (!request.dtype.empty() &&
      !parse_name("element type", request.dtype, bp_dtype_from_name, names_of(BP_DTYPE_COUNT, bp_dtype_name), &dtype))
    return kExitUsage;
  if (!request.op.empty() && !parse_name("reduce op", request.op, bp_reduce_op_from_name,
                                         names_of(BP_REDUCE_OP_COUNT, bp_reduce_op_name), &op))
    return kExitUsage;

  std::optional<Host> host = open_fleet(options, fleet_file);
  if (!host) return kExitFailure;
  Result<GroupView> group = host->find_group(request.group);
  if (!group) {
    // A group the fleet does not have is a mistake in the arguments.
    print_error(group.error());
    std::string names;
    for (const GroupView &known : host->groups()) names += (names.empty() ? "" : ", ") + std::string(known.name());
    std::fprintf(stderr, "groups of %s: %s\n", fleet_label(fleet_file).c_str(), names.empty() ? "none" : names.c_str());
    return kExitUsage;
  }

  const std::string operation = operation_text(collective, dtype, op);
  Status status = group->check(collective, dtype, op);
  if (!status) {
    const Error &error = status.error();
    if (json) {
      nlohmann::ordered_json out = {{"runs", false}};
      nlohmann::ordered_json fields = nlohmann::ordered_json::parse(error.json(), nullptr, false);
      if (fields.is_object()) out.update(fields);
      std::printf("%s\n", out.dump(2).c_str());
      return kExitFailure;
    }
    print_refusal(stdout, error);
    return kExitFailure;
  }

  // It runs, on the plugin of the ranks' base devices, or staged through host memory.
  Result<GroupDescription> described = describe_group(*host, *group);
  if (!described) {
    print_error(described.error());
    return kExitFailure;
  }
  bp_group_path path = BP_PATH_NATIVE;
  if (Status planned(bp_group_plan(group->get(), collective, dtype, op, &path)); !planned) {
    print_error(planned.error());
    return kExitFailure;
  }
  const bool staged = path == BP_PATH_STAGED, across = path == BP_PATH_ACROSS_PROCESSES;
  const bool mixed = described->plugins.size() > 1;
  const std::string why_staged =
      mixed ? "the group mixes device kinds"
            : "its kind does not declare it, and the group's on_unsupported is \"stage\" (counted as staged)";
  if (json) {
    nlohmann::ordered_json out = {{"runs", true}, {"operation", bp_collective_name(collective)}};
    if (collective != BP_BARRIER) out["dtype"] = bp_dtype_name(dtype);
    if (is_reducing(collective)) out["reduce_op"] = bp_reduce_op_name(op);
    out["group"] = std::string(group->name());
    out["devices"] = described->devices;
    out["path"] = staged ? "staged" : across ? "across_processes" : "native";
    if (staged) out["staged_because"] = why_staged;
    if (across) {
      const bp_group_span_info span = *group->span();
      const bp_transport_facts transport = *host->transport();
      out["transport"] = {{"plugin", transport.plugin},
                          {"library", transport.library},
                          {"processes", span.process_count},
                          {"ranks", span.global_size},
                          {"first_rank", span.first_rank}};
    }
    // As an error names it ("plugin": {name, version}); one kind, so one
    // plugin, per group until mixed groups are staged through host memory.
    if (!described->plugins.empty())
      out["plugin"] = {{"name", described->plugins[0].name}, {"version", described->plugins[0].version}};
    if (!group->route().empty()) out["route"] = std::string(group->route());
    if (described->layered) {
      out["chains"] = described->chains;
      out["base_devices"] = described->bases;
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf("would run: %s on group %s (%s) by plugin %s\n", operation.c_str(), std::string(group->name()).c_str(),
              described->device_text().c_str(), described->plugin_text().c_str());
  if (staged) {
    std::printf("path: staged through host memory, because %s: each rank's plugin copies its data to host memory, "
                "the cpu plugin computes it there (a cpu rank's buffers as they are), and the results are copied "
                "back\n",
                why_staged.c_str());
  } else if (across) {
    const bp_group_span_info span = *group->span();
    const bp_transport_facts transport = *host->transport();
    std::printf("path: across %u processes (%" PRIu64 " ranks; this process's are %" PRIu64 "..%" PRIu64
                "): the local ranks on the group's own plugin, then one exchange per process through transport "
                "%s (%s) on host memory, then back to the local ranks\n",
                span.process_count, span.global_size, span.first_rank, span.first_rank + span.local_size - 1,
                transport.plugin, transport.library);
  } else {
    std::printf("path: native, by the group's own plugin\n");
  }
  // How the data moves, when the plugin says: e.g. through host memory
  // between devices of different OpenCL platforms.
  if (!group->route().empty()) std::printf("route: %s\n", std::string(group->route()).c_str());
  // Layers see each call; what runs it, and what it may run, is the base's.
  if (described->layered) {
    std::printf("layers (outermost first; dispatch and its capability check use the base devices):\n");
    for (size_t r = 0; r < described->chains.size(); ++r)
      std::printf("  rank %zu  %s: %s\n", r, described->devices[r].c_str(), described->chains[r].c_str());
  }
  return kExitOk;
}

}  // namespace backplane::cli
