// The MPI library as the whole process sees it: every transport open in
// the process (several hosts may each open one) shares one initialisation,
// one set of 16-bit user ops and, when the plugin initialised MPI, one
// MPI_Finalize at the last close.
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "mpi_plugin.hpp"

namespace backplane::mpi {
namespace {

struct Library {
  std::mutex mutex;
  std::size_t open_transports = 0;
  bool initialised_by_plugin = false;
  bool ops_made = false;
};

Library &library() {
  static Library instance;  // outlives every transport: destroyed only at exit
  return instance;
}

std::atomic<std::size_t> abandoned_requests{0};

bool finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}

// The first line of MPI_Get_library_version, which MPI allows before
// MPI_Init.
std::string library_line() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "an MPI library that does not say its version";
  std::size_t size = 0;
  while (size < static_cast<std::size_t>(length > 0 ? length : 0) && size < sizeof text && text[size] != '\0') ++size;
  const char *end = static_cast<const char *>(std::memchr(text, '\n', size));
  return one_line(text, end != nullptr ? static_cast<std::size_t>(end - text) : size);
}

}  // namespace

std::string one_line(const char *text, std::size_t length) {
  std::string line;
  line.reserve(length);
  for (std::size_t i = 0; i < length && text[i] != '\0'; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    line += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : (c == '\n' || c == '\r' || c == '\t') ? ' ' : '?';
  }
  const std::size_t first = line.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  return line.substr(first, line.find_last_not_of(' ') - first + 1);
}

std::string mpi_error_text(int code) {
  // Open MPI aborts the process for MPI_Error_string outside MPI's lifetime
  // (a failed MPI_Init_thread).
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised == 0 || finalized()) return "MPI error " + std::to_string(code);
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return one_line(text, static_cast<std::size_t>(length > 0 ? length : 0));
}

const char *thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

std::int32_t claim_library(const TableCall &call, bool given_handle, LibraryFacts &facts) {
  Library &lib = library();
  const std::lock_guard<std::mutex> lock(lib.mutex);
  facts.library = library_line();
#ifdef OPEN_MPI
  // Built against Open MPI's mpi.h: its handles are pointers and its
  // Fortran handles its own; any other library behind libmpi.so would be
  // called with the wrong ABI.
  if (facts.library.find("Open MPI") == std::string::npos)
    return call.fail(BP_PLUGIN_INIT,
                     "the plugin was built against Open MPI %d.%d.%d, but the MPI library loaded is \"%s\"",
                     OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION, facts.library.c_str());
#endif
  if (finalized())
    return call.fail(BP_PLUGIN_INIT, "MPI was finalised in this process; it cannot be initialised again");
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised == 0) {
    if (given_handle)
      return call.fail(BP_INVALID_ARGUMENT,
                       "a communicator handle was given, but MPI is not initialised in this process");
    // Open MPI's non-blocking all-reduce (coll/libnbc) picks a binomial tree
    // by default, half the speed of its ring from 32 KiB up here (2 MiB:
    // 426 against 223 µs over 2 processes; 8 B: 0.97 against 1.34 µs), and
    // the timeouts need the non-blocking calls. MCA parameters are read at
    // MPI_Init from the environment: the ring, unless the user chose.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "ring", /*overwrite=*/0);
    int provided = MPI_THREAD_SINGLE;
    if (const int error = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided); error != MPI_SUCCESS)
      return call.fail(BP_PLUGIN_INIT, "MPI_Init_thread failed: %s", mpi_error_text(error).c_str());
    lib.initialised_by_plugin = true;
    plugin_support::log(call.services, BP_LOG_INFO, kName, "initialised MPI (%s): %s", thread_level_name(provided),
                        facts.library.c_str());
    if (provided < MPI_THREAD_MULTIPLE) {
      // Finalised again at once, so that the process still ends cleanly:
      // MPI cannot be initialised twice, so no later open could use it.
      MPI_Finalize();
      return call.fail(BP_PLUGIN_INIT,
                       "MPI_Init_thread granted %s; the mpi transport needs MPI_THREAD_MULTIPLE (exchanges of "
                       "different groups run on different threads)",
                       thread_level_name(provided));
    }
  }
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    return call.fail(BP_PLUGIN_INIT,
                     "the application initialised MPI with %s; the mpi transport needs MPI_THREAD_MULTIPLE "
                     "(initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...))",
                     thread_level_name(level));
  if (!lib.ops_made) {
    if (const int error = create_half_float_ops(); error != MPI_SUCCESS)
      return call.fail(BP_PLUGIN_INIT, "MPI_Op_create failed for the f16/bf16 reductions: %s",
                       mpi_error_text(error).c_str());
    lib.ops_made = true;
  }
  ++lib.open_transports;
  facts.thread_level = level;
  facts.initialised_by_plugin = lib.initialised_by_plugin;
  return BP_OK;
}

void release_library(const bp_host_services *services) {
  Library &lib = library();
  const std::lock_guard<std::mutex> lock(lib.mutex);
  if (lib.open_transports == 0 || --lib.open_transports != 0) return;
  if (finalized()) return;  // the application finalised MPI under its transports: nothing may be called
  const std::size_t abandoned = abandoned_requests.load();
  if (abandoned != 0) {
    // MPI may still call the ops of those requests: they stay. MPI_Finalize
    // still runs (a process that skips it ends an mpirun job as a failure);
    // Open MPI 4.1 finalises with an unmatched collective in flight, and
    // nothing progresses it afterwards.
    plugin_support::log(services, BP_LOG_WARN, kName,
                        "%zu MPI request(s) timed out and are still in flight: the f16/bf16 ops are not freed",
                        abandoned);
  } else if (lib.ops_made) {
    free_half_float_ops();
    lib.ops_made = false;
  }
  if (lib.initialised_by_plugin) {
    MPI_Finalize();
    plugin_support::log(services, BP_LOG_INFO, kName, "finalised MPI (the last transport closed)");
  }
}

void note_abandoned_request() { abandoned_requests.fetch_add(1); }

void note_recovered_request() { abandoned_requests.fetch_sub(1); }

bool library_usable() { return !finalized(); }

}  // namespace backplane::mpi
