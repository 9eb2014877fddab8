// Opening and closing one host's transport: its options, the MPI library
// claimed for it, and its own duplicate of the communicator it runs on.
#include <limits>
#include <optional>

#include "mpi_plugin.hpp"
#include "plugin_support/options_object.hpp"

namespace backplane::mpi {
namespace {

// Releases the library claim of an open that fails after making it.
class LibraryClaim {
 public:
  explicit LibraryClaim(const bp_host_services *services) : services_(services) {}
  ~LibraryClaim() {
    if (services_ != nullptr) release_library(services_);
  }
  LibraryClaim(const LibraryClaim &) = delete;
  LibraryClaim &operator=(const LibraryClaim &) = delete;
  void keep() { services_ = nullptr; }

 private:
  const bp_host_services *services_;
};

std::int32_t read_options(const TableCall &call, const char *text, std::uint64_t &spin_us,
                          std::uint64_t &doubling_bytes, std::uint64_t &halving_bytes) {
  std::string error;
  const std::optional<plugin_support::OptionsObject> options =
      plugin_support::OptionsObject::parse(text != nullptr ? text : "{}", &error);
  if (!options || !options->only_keys({"spin_us", "doubling_bytes", "halving_bytes"}, &error) ||
      !options->read("spin_us", 0, kMaxSpinUs, spin_us, &error) ||
      !options->read("doubling_bytes", 0, kMaxDoublingBytes, doubling_bytes, &error) ||
      !options->read("halving_bytes", 0, kMaxHalvingBytes, halving_bytes, &error))
    return call.fail(BP_CONFIG, "options: %s", error.c_str());
  return BP_OK;
}

}  // namespace

std::int32_t open_transport(bp_plugin_state &state, const bp_transport_open_args &args, bp_transport **out,
                            bp_error_sink *sink) {
  const TableCall call{state.services, sink, kName, "open"};
  std::uint64_t spin_us = kDefaultSpinUs, doubling_bytes = kDefaultDoublingBytes, halving_bytes = kDefaultHalvingBytes;
  if (const std::int32_t refused = read_options(call, args.options_json, spin_us, doubling_bytes, halving_bytes);
      refused != BP_OK)
    return refused;
  const bool given = (args.flags & BP_TRANSPORT_GIVEN_HANDLE) != 0;
  constexpr std::int64_t kLeast = std::numeric_limits<MPI_Fint>::min(), kMost = std::numeric_limits<MPI_Fint>::max();
  if (given && (args.handle < kLeast || args.handle > kMost))
    return call.fail(BP_INVALID_ARGUMENT, "handle %lld is no MPI communicator handle (MPI_Fint holds %lld..%lld)",
                     static_cast<long long>(args.handle), static_cast<long long>(kLeast),
                     static_cast<long long>(kMost));

  LibraryFacts facts;
  if (const std::int32_t refused = claim_library(call, given, facts); refused != BP_OK) return refused;
  LibraryClaim claim(state.services);

  MPI_Comm base = MPI_COMM_WORLD;
  if (given) {
    base = MPI_Comm_f2c(static_cast<MPI_Fint>(args.handle));
    bool unknown = base == MPI_COMM_NULL;
#ifdef OPEN_MPI
    unknown = unknown || base == nullptr;  // Open MPI's answer for a handle outside its table
#endif
    if (unknown)
      return call.fail(BP_INVALID_ARGUMENT, "handle %lld is not a communicator of this process",
                       static_cast<long long>(args.handle));
  }
  auto transport = std::make_unique<bp_transport>();
  // A collective over `base`: every process of it opens its transport.
  if (const int error = MPI_Comm_dup(base, &transport->comm); error != MPI_SUCCESS)
    return call.fail(BP_PLUGIN_INIT, "MPI_Comm_dup of %s failed: %s",
                     given ? "the application's communicator" : "MPI_COMM_WORLD", mpi_error_text(error).c_str());
  MPI_Comm_set_errhandler(transport->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(transport->comm, &transport->process_index);
  MPI_Comm_size(transport->comm, &transport->process_count);
  transport->spin = std::chrono::microseconds(spin_us);
  transport->doubling_bytes = doubling_bytes;
  transport->halving_bytes = halving_bytes;
  transport->library = facts.library;
  transport->details = std::string("thread level ") + thread_level_name(facts.thread_level) +
                       " granted, MPI initialised by " +
                       (facts.initialised_by_plugin ? "the mpi plugin" : "the application") +
                       ", communicator: " + (given ? "the application's" : "MPI_COMM_WORLD");
  plugin_support::log(state.services, BP_LOG_INFO, kName, "transport open: process %d of %d, %s",
                      transport->process_index, transport->process_count, transport->details.c_str());
  claim.keep();
  *out = transport.release();
  return BP_OK;
}

void close_transport(bp_plugin_state &state, bp_transport *transport) {
  if (library_usable()) {
    if (transport->abandoned.load())
      plugin_support::log(state.services, BP_LOG_WARN, kName,
                          "close: a group's creation timed out on this transport; its communicator is left to MPI");
    else
      MPI_Comm_free(&transport->comm);
  }
  delete transport;
  release_library(state.services);
}

std::int32_t describe_transport(bp_plugin_state & /*state*/, bp_transport &transport, bp_transport_info &out,
                                bp_error_sink * /*sink*/) {
  // An out-struct: only the fields its struct_size reaches are written.
  if (out.struct_size >= BP_STRUCT_SIZE(bp_transport_info, process_index))
    out.process_index = static_cast<std::uint32_t>(transport.process_index);
  if (out.struct_size >= BP_STRUCT_SIZE(bp_transport_info, process_count))
    out.process_count = static_cast<std::uint32_t>(transport.process_count);
  if (out.struct_size >= BP_STRUCT_SIZE(bp_transport_info, library)) out.library = transport.library.c_str();
  if (out.struct_size >= BP_STRUCT_SIZE(bp_transport_info, details)) out.details = transport.details.c_str();
  return BP_OK;
}

}  // namespace backplane::mpi
