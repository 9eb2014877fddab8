// A plugin whose descriptor, capability rows and device information are
// built from bytes the descriptor fuzzer hands it (bp_fuzz_set_bytes)
// before each host creation. Every pointer it gives the host points into
// memory it owns and every count fits the array behind it: what is fuzzed
// is the values a hostile or broken plugin can declare (sizes, strides,
// counts, versions, strings that are not UTF-8 or not terminated within the
// host's bounds, unknown enum values), not wild pointers, which no
// in-process check can survive.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backplane/plugin.h"

namespace {

// Reads the fuzzer's bytes front to back; past the end every read is 0.
class ByteReader {
 public:
  ByteReader(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T take() {
    T value{};
    const size_t n = std::min(sizeof(T), size_ - std::min(at_, size_));
    if (n) std::memcpy(&value, data_ + at_, n);
    at_ += sizeof(T);
    return value;
  }
  // A string of up to `max` bytes (NUL-terminated by the caller's storage).
  std::string text(size_t max) {
    const size_t length = std::min<size_t>(take<uint16_t>(), max);
    std::string out;
    for (size_t i = 0; i < length; ++i) out += static_cast<char>(take<uint8_t>());
    return out;
  }

 private:
  const uint8_t *data_;
  size_t size_;
  size_t at_ = 0;
};

constexpr size_t kMaxKinds = 8;
constexpr size_t kRowBytes = 64 * 1024;  // backing for rows of any stride the fuzzer picks
constexpr size_t kMaxStrings = 8200;     // past the host's 4096-byte bound
constexpr size_t kMaxProperties = 300;   // past the host's 256

struct FuzzState {
  std::vector<uint8_t> bytes;
  // Built by the entry from `bytes`, valid until the next entry.
  std::string name, version, device_name, description;
  std::vector<std::string> kinds;
  std::vector<const char *> kind_pointers;
  alignas(bp_capability) unsigned char rows[kRowBytes];
  alignas(bp_capability) unsigned char device_rows[kRowBytes];
  size_t row_count = 0, device_row_count = 0;
  uint32_t device_count = 0;
  std::vector<std::string> property_text;
  std::vector<const char *> property_keys, property_values;
  size_t property_count = 0;
  uint32_t device_flags = 0;
  bool unterminated_name = false;
  char unterminated[kMaxStrings];
  bp_plugin_functions functions{};
  unsigned char descriptor[sizeof(bp_plugin_descriptor) + 256];
};

FuzzState g_state;

int32_t device_count(bp_plugin_state *, uint32_t, uint32_t *count, bp_error_sink *) {
  *count = g_state.device_count;
  return BP_OK;
}

int32_t device_info(bp_plugin_state *, uint32_t, uint32_t, bp_plugin_device_info *info, bp_error_sink *) {
  info->name = g_state.unterminated_name ? g_state.unterminated : g_state.device_name.c_str();
  info->description = g_state.description.c_str();
  info->flags = g_state.device_flags;
  if (info->struct_size >= BP_PLUGIN_DEVICE_INFO_SIZE_V1_0) {
    info->capabilities = g_state.device_row_count ? reinterpret_cast<const bp_capability *>(g_state.device_rows)
                                                  : nullptr;
    info->capability_count = g_state.device_row_count;
  }
  if (info->struct_size >= BP_PLUGIN_DEVICE_INFO_SIZE_V1_1) {
    info->property_keys = g_state.property_keys.data();
    info->property_values = g_state.property_values.data();
    info->property_count = g_state.property_count;
  }
  return BP_OK;
}

int32_t refuse(bp_error_sink *) { return BP_DEVICE_FAILURE; }
void destroy(bp_plugin_state *) {}
int32_t buffer_create(bp_plugin_state *, uint32_t, uint32_t, size_t, bp_plugin_buffer **, bp_error_sink *s) {
  return refuse(s);
}
void buffer_destroy(bp_plugin_state *, bp_plugin_buffer *) {}
int32_t buffer_write(bp_plugin_state *, bp_plugin_buffer *, size_t, const void *, size_t, bp_error_sink *s) {
  return refuse(s);
}
int32_t buffer_read(bp_plugin_state *, const bp_plugin_buffer *, size_t, void *, size_t, bp_error_sink *s) {
  return refuse(s);
}
int32_t comm_create(bp_plugin_state *, uint32_t, const uint32_t *, size_t, bp_plugin_comm **, bp_error_sink *s) {
  return refuse(s);
}
void comm_destroy(bp_plugin_state *, bp_plugin_comm *) {}
int32_t collective_start(bp_plugin_state *, bp_plugin_comm *, const bp_collective_args *, bp_plugin_request **,
                         bp_error_sink *s) {
  return refuse(s);
}
int32_t request_test(bp_plugin_state *, bp_plugin_request *, bool *, bp_error_sink *s) { return refuse(s); }
int32_t request_wait(bp_plugin_state *, bp_plugin_request *, int64_t, bp_error_sink *s) { return refuse(s); }
void request_release(bp_plugin_state *, bp_plugin_request *) {}

// Fills `count` rows of `stride` bytes from the reader, within `backing`.
size_t fill_rows(ByteReader &in, unsigned char *backing, size_t stride_choice) {
  const size_t stride = std::max<size_t>(stride_choice, 1);
  const size_t count = std::min<size_t>(in.take<uint16_t>() % 64, kRowBytes / stride);
  std::memset(backing, 0, kRowBytes);
  for (size_t i = 0; i < count; ++i) {
    bp_capability row{};
    row.struct_size = i == 0 ? stride_choice : in.take<uint16_t>();
    row.device_kind = in.take<uint8_t>() % 10;
    row.collective = in.take<uint8_t>() % 12;
    row.dtypes = in.take<uint32_t>();
    row.reduce_ops = in.take<uint32_t>();
    row.flags = in.take<uint8_t>();
    row.max_bytes = in.take<uint8_t>() < 16 ? in.take<uint64_t>() : 0;
    std::memcpy(backing + i * stride, &row, std::min(stride, sizeof row));
  }
  return count;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void bp_fuzz_set_bytes(const uint8_t *data, size_t size) {
  g_state.bytes.assign(data, data + size);
}

__attribute__((visibility("default"))) int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  FuzzState &s = g_state;
  ByteReader in(s.bytes.data(), s.bytes.size());
  s.name = in.text(80);
  s.version = in.text(kMaxStrings);
  s.kinds.clear();
  s.kind_pointers.clear();
  const size_t kind_count = in.take<uint8_t>() % (kMaxKinds + 1);
  for (size_t k = 0; k < kind_count; ++k) s.kinds.push_back(in.text(80));
  for (const std::string &kind : s.kinds) s.kind_pointers.push_back(kind.c_str());
  const size_t stride = in.take<uint16_t>() % 2048;
  s.row_count = fill_rows(in, s.rows, stride);
  const size_t device_stride = in.take<uint16_t>() % 2048;
  s.device_row_count = fill_rows(in, s.device_rows, device_stride);
  const uint8_t count_choice = in.take<uint8_t>();
  s.device_count = count_choice == 255 ? in.take<uint32_t>() : count_choice % 5;
  s.device_name = in.text(kMaxStrings);
  s.description = in.text(kMaxStrings);
  s.device_flags = in.take<uint32_t>();
  s.unterminated_name = in.take<uint8_t>() == 1;
  std::memset(s.unterminated, 'x', sizeof s.unterminated);  // no NUL within the host's bound
  s.unterminated[sizeof s.unterminated - 1] = '\0';
  s.property_count = in.take<uint16_t>() % (kMaxProperties + 1);
  s.property_text.clear();
  for (size_t i = 0; i < 2 * s.property_count; ++i) s.property_text.push_back(in.text(64));
  s.property_keys.clear();
  s.property_values.clear();
  for (size_t i = 0; i < s.property_count; ++i) {
    s.property_keys.push_back(s.property_text[2 * i].c_str());
    s.property_values.push_back(s.property_text[2 * i + 1].c_str());
  }

  s.functions = bp_plugin_functions{};
  s.functions.struct_size = sizeof s.functions;
  s.functions.destroy = destroy;
  s.functions.device_count = device_count;
  s.functions.device_info = device_info;
  s.functions.buffer_create = buffer_create;
  s.functions.buffer_destroy = buffer_destroy;
  s.functions.buffer_write = buffer_write;
  s.functions.buffer_read = buffer_read;
  s.functions.comm_create = comm_create;
  s.functions.comm_destroy = comm_destroy;
  s.functions.collective_start = collective_start;
  s.functions.request_test = request_test;
  s.functions.request_wait = request_wait;
  s.functions.request_release = request_release;

  bp_plugin_descriptor descriptor{};
  descriptor.struct_size = in.take<uint8_t>() < 200 ? sizeof descriptor : in.take<uint16_t>() % sizeof s.descriptor;
  descriptor.abi_major = in.take<uint8_t>() < 240 ? BP_PLUGIN_ABI_MAJOR : in.take<uint8_t>();
  descriptor.abi_minor = in.take<uint8_t>() % 8;
  descriptor.name = s.name.c_str();
  descriptor.version = in.take<uint8_t>() == 7 ? nullptr : s.version.c_str();
  descriptor.device_kinds = s.kind_pointers.data();
  descriptor.device_kind_count = s.kind_pointers.size();
  descriptor.capabilities = reinterpret_cast<const bp_capability *>(s.rows);
  descriptor.capability_count = s.row_count;
  descriptor.functions = &s.functions;
  std::memset(s.descriptor, 0, sizeof s.descriptor);
  std::memcpy(s.descriptor, &descriptor, sizeof descriptor);
  args->descriptor = reinterpret_cast<const bp_plugin_descriptor *>(s.descriptor);
  args->state = reinterpret_cast<bp_plugin_state *>(&s);
  return BP_OK;
}

}  // extern "C"
