"""Hosts, their plugins and devices, and device buffers."""

import ctypes
import json
import weakref
from dataclasses import dataclass

from . import _capi
from ._capi import lib, text, texts
from .errors import check, from_handle, invalid_argument

_POLICIES = {"stage": _capi.BP_POLICY_STAGE, "reject": _capi.BP_POLICY_REJECT}
_ON_UNSUPPORTED = {"error": _capi.BP_ON_UNSUPPORTED_ERROR, "stage": _capi.BP_ON_UNSUPPORTED_STAGE}


@dataclass(frozen=True)
class Plugin:
    """A loaded plugin, as bp_plugin_info describes it."""
    name: str
    version: str
    abi: tuple
    file: str
    sha256: str
    device_kinds: list
    kind_status: dict  # device kind -> the plugin's one line on it (why it has no device), or None
    layer_kinds: list
    transport: str


def _host_options(plugin_dirs, options):
    """A bp_host_options, and what must stay alive while the library reads it."""
    dirs = [str(d).encode() for d in (plugin_dirs or [])]
    dir_array = (ctypes.c_char_p * len(dirs))(*dirs)
    options_json = None if options is None else (options if isinstance(options, str) else json.dumps(options))
    struct = _capi.HostOptions(struct_size=ctypes.sizeof(_capi.HostOptions),
                               plugin_dirs=ctypes.cast(dir_array, _capi.c_str_array), plugin_dir_count=len(dirs),
                               plugin_options_json=None if options_json is None else options_json.encode())
    return struct, dir_array


class Host:
    """A Backplane host: the plugins it loaded, their devices, and the groups made of them.

    Host(plugin_dirs=None, options=None): plugin_dirs are searched first, then
    BACKPLANE_PLUGIN_PATH, then the plugins installed beside libbackplane.
    options is a dict per device kind, e.g. {"cpu": {"devices": 4}}, handed to
    each kind's plugin before its devices are enumerated. Devices and groups
    keep their host alive; the host is released when the last of them goes.
    """

    def __init__(self, plugin_dirs=None, options=None):
        struct, _keep = _host_options(plugin_dirs, options)
        handle = _capi.bp_handle()
        check(lib.bp_host_create(ctypes.byref(struct), ctypes.byref(handle)))
        self._adopt(handle)

    @classmethod
    def from_fleet(cls, path, plugin_dirs=None, options=None):
        """A host for a fleet file (configs/*.json): its devices, groups (find_group) and workload.

        A fleet with mistakes raises the error of its first problem (usually a
        ConfigError) with every problem in .problems.
        """
        struct, _keep = _host_options(plugin_dirs, options)
        handle = _capi.bp_handle()
        check(lib.bp_host_create_from_fleet_file(str(path).encode(), ctypes.byref(struct), ctypes.byref(handle)))
        host = cls.__new__(cls)
        host._adopt(handle)
        return host

    def _adopt(self, handle):
        self._handle = handle.value
        self._release = weakref.finalize(self, lib.bp_host_destroy, self._handle)

    @property
    def devices(self):
        return [Device(self, lib.bp_host_device(self._handle, i)) for i in range(lib.bp_host_device_count(self._handle))]

    def device(self, name):
        """The device named "kind:index" (e.g. "cpu:0")."""
        handle = _capi.bp_handle()
        check(lib.bp_host_find_device(self._handle, name.encode(), ctypes.byref(handle)))
        return Device(self, handle.value)

    @property
    def plugins(self):
        plugins = []
        for i in range(lib.bp_host_plugin_count(self._handle)):
            info = _capi.PluginInfo(struct_size=ctypes.sizeof(_capi.PluginInfo))
            check(lib.bp_host_plugin(self._handle, i, ctypes.byref(info)))
            kinds = texts(info.device_kinds, info.device_kind_count)
            plugins.append(Plugin(
                name=text(info.name), version=text(info.version), abi=(info.abi_major, info.abi_minor),
                file=text(info.file), sha256=text(info.sha256), device_kinds=kinds,
                kind_status=dict(zip(kinds, texts(info.kind_status, info.device_kind_count))),
                layer_kinds=texts(info.layer_kinds, info.layer_kind_count), transport=text(info.transport)))
        return plugins

    @property
    def refused(self):
        """Plugin files found but refused, each as the Error that says why (its fields name the file)."""
        return [from_handle(lib.bp_host_refused(self._handle, i)) for i in range(lib.bp_host_refused_count(self._handle))]

    def group(self, devices, policy="stage", on_unsupported="error", name=None):
        """A group of ranks, one per device (a name such as "cpu:0", or a Device), in rank order.

        policy: what a group of several device kinds does, "stage" (through
        host memory) or "reject" (MIXED_DEVICE_KINDS). on_unsupported: what a
        group of one kind does with a request its kind does not declare,
        "error" or "stage".
        """
        from .group import Group
        if policy not in _POLICIES:
            raise invalid_argument(f"unknown group policy {policy!r}", alternatives=list(_POLICIES))
        if on_unsupported not in _ON_UNSUPPORTED:
            raise invalid_argument(f"unknown on_unsupported action {on_unsupported!r}",
                                   alternatives=list(_ON_UNSUPPORTED))
        ranks = [d if isinstance(d, Device) else self.device(d) for d in devices]
        for device in ranks:
            if device._host is not self:
                raise invalid_argument(f"device '{device.name}' belongs to another host")
        rank_array = (_capi.bp_handle * len(ranks))(*[d._handle for d in ranks])
        options = _capi.GroupOptions(struct_size=ctypes.sizeof(_capi.GroupOptions),
                                     name=None if name is None else name.encode(),
                                     policy=_POLICIES[policy], on_unsupported=_ON_UNSUPPORTED[on_unsupported])
        handle = _capi.bp_handle()
        check(lib.bp_group_create(self._handle, rank_array, len(ranks), ctypes.byref(options), ctypes.byref(handle)))
        return Group(self, handle.value, owned=True)

    def find_group(self, name):
        """A group the fleet file created, by name."""
        from .group import Group
        handle = _capi.bp_handle()
        check(lib.bp_host_find_group(self._handle, name.encode(), ctypes.byref(handle)))
        return Group(self, handle.value, owned=False)


class Device:
    """A device of a host (borrowed from it: the Device keeps its Host alive)."""

    def __init__(self, host, handle):
        self._host = host
        self._handle = handle
        info = _capi.DeviceInfo(struct_size=ctypes.sizeof(_capi.DeviceInfo))
        check(lib.bp_device_get_info(handle, ctypes.byref(info)))
        self.name = text(info.name)
        self.kind = text(info.kind)
        self.index = info.index
        self.plugin = text(info.plugin)
        self.description = text(info.description)
        self.flags = info.flags
        self.memory_bytes = info.memory_bytes
        self.properties = dict(zip(texts(info.property_keys, info.property_count),
                                   texts(info.property_values, info.property_count)))
        self.layers = texts(info.layers, info.layer_count)

    @property
    def host_addressable(self):
        """Whether buffers of this device can be the caller's host memory (zero copy)."""
        return bool(self.flags & _capi.BP_DEVICE_HOST_ADDRESSABLE)

    def buffer(self, nbytes):
        """A new buffer of `nbytes` in this device's memory (zero-filled on cpu)."""
        return Buffer(self, nbytes)

    def __eq__(self, other):
        return isinstance(other, Device) and other._handle == self._handle

    def __hash__(self):
        return hash(self._handle)

    def __repr__(self):
        return f"<backplane.Device {self.name}>"


class Buffer:
    """Memory of one device, accepted by a collective at that device's rank wherever arrays are.

    A buffer has no element type of its own: a call whose operands are all
    buffers names it with dtype=.
    """

    def __init__(self, device, nbytes):
        if nbytes < 0:
            raise invalid_argument(f"buffer size {nbytes} is negative")
        handle = _capi.bp_handle()
        check(lib.bp_buffer_create(device._handle, nbytes, ctypes.byref(handle)))
        self.device = device
        self._handle = handle.value
        self._release = weakref.finalize(self, lib.bp_buffer_destroy, self._handle)

    @property
    def size(self):
        """Its size in bytes."""
        return lib.bp_buffer_size(self._handle)

    def write(self, array, offset=0):
        """Copy a contiguous array (any buffer-protocol object) into the buffer at byte `offset`."""
        from ._operands import HostArray
        source = HostArray(array)
        source.require_contiguous("source")
        check(lib.bp_buffer_write(self._handle, offset, source.address, source.nbytes))

    def read(self, dtype="u8", offset=0, count=None):
        """The buffer's contents from byte `offset` as a new NumPy array of `dtype` (NumPy or Backplane name)."""
        import numpy as np
        from ._operands import numpy_dtype
        element = numpy_dtype(dtype)
        if count is None:
            available = max(self.size - offset, 0)
            count = available // element.itemsize
        result = np.empty(count, element)
        check(lib.bp_buffer_read(self._handle, offset, result.ctypes.data, result.nbytes))
        return result

    def __repr__(self):
        return f"<backplane.Buffer {self.size} bytes on {self.device.name}>"
