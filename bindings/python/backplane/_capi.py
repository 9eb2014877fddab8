"""ctypes declarations of backplane.h: the library, its structs and prototypes.

Nothing here is public; the rest of the package goes through `lib`.
"""

import ctypes
import os
import sys
from ctypes import POINTER, Structure, c_bool, c_char_p, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

# The header this binding was written against (backplane.h BP_API_VERSION_*):
# the structs below are its layouts, and a library of an older minor lacks
# fields and functions they use.
REQUIRED_MAJOR = 1
REQUIRED_MINOR = 6

# types.h values the binding needs by number.
BP_DEVICE_HOST_ADDRESSABLE = 0x1
BP_POLICY_STAGE = 0
BP_POLICY_REJECT = 1
BP_ON_UNSUPPORTED_ERROR = 0
BP_ON_UNSUPPORTED_STAGE = 1

_LIBRARY_FILE = "libbackplane.so.1"


def _candidate_paths():
    """Where the library is looked for, first match wins."""
    from_env = os.environ.get("BACKPLANE_LIBRARY")
    if from_env:
        # An explicit choice is never second-guessed by a fallback.
        return [from_env]
    # Installed: <libdir>/python3/dist-packages/backplane/ is this folder, and
    # the library sits in <libdir>, three levels up.
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.normpath(os.path.join(here, "..", "..", "..", _LIBRARY_FILE))
    # Last, whatever the system loader finds (LD_LIBRARY_PATH, ld.so.cache).
    return [installed, _LIBRARY_FILE]


def _load():
    tried = []
    for path in _candidate_paths():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as error:
            tried.append(f"{path} ({error})")
    raise ImportError("backplane: libbackplane.so not found; set BACKPLANE_LIBRARY to its path. Tried: "
                      + "; ".join(tried))


lib = _load()

lib.bp_api_version.argtypes = []
lib.bp_api_version.restype = c_uint32
LIBRARY_VERSION = lib.bp_api_version()
LIBRARY_MAJOR, LIBRARY_MINOR = LIBRARY_VERSION >> 16, LIBRARY_VERSION & 0xFFFF
if LIBRARY_MAJOR != REQUIRED_MAJOR or LIBRARY_MINOR < REQUIRED_MINOR:
    raise ImportError(
        f"backplane: {lib._name} implements API {LIBRARY_MAJOR}.{LIBRARY_MINOR}; this binding needs "
        f"{REQUIRED_MAJOR}.{REQUIRED_MINOR} or a later {REQUIRED_MAJOR}.x (set BACKPLANE_LIBRARY to a newer library)")

BYTE_ORDER_IS_LITTLE = sys.byteorder == "little"

bp_handle = c_void_p  # every opaque handle (bp_host *, bp_device *, bp_error *, ...)
c_str_array = POINTER(c_char_p)


class HostOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("next", c_void_p),
                ("plugin_dirs", c_str_array), ("plugin_dir_count", c_size_t),
                ("flags", c_uint32), ("plugin_options_json", c_char_p), ("plugin_pins_json", c_char_p)]


class PluginInfo(Structure):
    _fields_ = [("struct_size", c_size_t), ("next", c_void_p),
                ("name", c_char_p), ("version", c_char_p), ("abi_major", c_uint32), ("abi_minor", c_uint32),
                ("file", c_char_p), ("device_kinds", c_str_array), ("device_kind_count", c_size_t),
                ("kind_status", c_str_array), ("sha256", c_char_p),
                ("layer_kinds", c_str_array), ("layer_kind_count", c_size_t), ("transport", c_char_p)]


class DeviceInfo(Structure):
    _fields_ = [("struct_size", c_size_t), ("next", c_void_p),
                ("name", c_char_p), ("kind", c_char_p), ("index", c_uint32), ("plugin", c_char_p),
                ("description", c_char_p), ("flags", c_uint32), ("memory_bytes", c_uint64),
                ("property_keys", c_str_array), ("property_values", c_str_array), ("property_count", c_size_t),
                ("layers", c_str_array), ("layer_count", c_size_t),
                ("over", c_char_p), ("base", c_char_p), ("chain", c_char_p)]


class GroupOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("next", c_void_p), ("name", c_char_p), ("policy", c_uint32),
                ("on_unsupported", c_uint64), ("local_first", c_uint64), ("span", c_uint64), ("guard", c_uint64)]


class CollectiveRequest(Structure):
    _fields_ = [("struct_size", c_size_t), ("next", c_void_p),
                ("collective", c_uint32), ("dtype", c_uint32), ("reduce_op", c_uint32), ("root", c_uint32),
                ("count", c_size_t), ("send", POINTER(bp_handle)), ("recv", POINTER(bp_handle))]


def _declare(name, restype, *argtypes):
    function = getattr(lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)


_out = POINTER(bp_handle)
_u32_out = POINTER(c_uint32)

for _name, _restype, _argtypes in [
    # errors and names
    ("bp_error_code", c_uint32, [bp_handle]),
    ("bp_error_message", c_char_p, [bp_handle]),
    ("bp_error_json", c_char_p, [bp_handle]),
    ("bp_error_destroy", None, [bp_handle]),
    ("bp_error_problem_count", c_size_t, [bp_handle]),
    ("bp_error_problem", bp_handle, [bp_handle, c_size_t]),
    ("bp_code_name", c_char_p, [c_uint32]),
    ("bp_dtype_size", c_size_t, [c_uint32]),
    ("bp_dtype_from_name", c_bool, [c_char_p, _u32_out]),
    ("bp_reduce_op_from_name", c_bool, [c_char_p, _u32_out]),
    ("bp_collective_from_name", c_bool, [c_char_p, _u32_out]),
    # hosts
    ("bp_host_create", bp_handle, [POINTER(HostOptions), _out]),
    ("bp_host_create_from_fleet_file", bp_handle, [c_char_p, POINTER(HostOptions), _out]),
    ("bp_host_destroy", None, [bp_handle]),
    ("bp_host_plugin_count", c_size_t, [bp_handle]),
    ("bp_host_plugin", bp_handle, [bp_handle, c_size_t, POINTER(PluginInfo)]),
    ("bp_host_refused_count", c_size_t, [bp_handle]),
    ("bp_host_refused", bp_handle, [bp_handle, c_size_t]),
    ("bp_host_find_group", bp_handle, [bp_handle, c_char_p, _out]),
    # devices
    ("bp_host_device_count", c_size_t, [bp_handle]),
    ("bp_host_device", bp_handle, [bp_handle, c_size_t]),
    ("bp_host_find_device", bp_handle, [bp_handle, c_char_p, _out]),
    ("bp_device_get_info", bp_handle, [bp_handle, POINTER(DeviceInfo)]),
    # buffers
    ("bp_buffer_create", bp_handle, [bp_handle, c_size_t, _out]),
    ("bp_buffer_wrap_host", bp_handle, [bp_handle, c_void_p, c_size_t, _out]),
    ("bp_buffer_write", bp_handle, [bp_handle, c_size_t, c_void_p, c_size_t]),
    ("bp_buffer_read", bp_handle, [bp_handle, c_size_t, c_void_p, c_size_t]),
    ("bp_buffer_size", c_size_t, [bp_handle]),
    ("bp_buffer_destroy", None, [bp_handle]),
    # groups and collectives
    ("bp_group_create", bp_handle, [bp_handle, POINTER(bp_handle), c_size_t, POINTER(GroupOptions), _out]),
    ("bp_group_destroy", None, [bp_handle]),
    ("bp_group_size", c_size_t, [bp_handle]),
    ("bp_group_device", bp_handle, [bp_handle, c_size_t]),
    ("bp_group_name", c_char_p, [bp_handle]),
    ("bp_group_route", c_char_p, [bp_handle]),
    ("bp_group_check", bp_handle, [bp_handle, c_uint32, c_uint32, c_uint32]),
    ("bp_run_collective", bp_handle, [bp_handle, POINTER(CollectiveRequest)]),
    ("bp_run_collective_async", bp_handle, [bp_handle, POINTER(CollectiveRequest), _out]),
    # events
    ("bp_event_wait", bp_handle, [bp_handle, c_int64]),
    ("bp_event_test", c_bool, [bp_handle]),
    ("bp_event_destroy", None, [bp_handle]),
]:
    _declare(_name, _restype, *_argtypes)


def text(value):
    """A C string of the API as str (NULL as None)."""
    return None if value is None else value.decode("utf-8")


def texts(array, count):
    """A C array of `count` strings as a list of str (NULL entries as None)."""
    if not array:
        return [None] * count
    return [text(array[i]) for i in range(count)]
