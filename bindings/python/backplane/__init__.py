"""Python binding of Backplane: hosts, devices, groups and collectives over libbackplane's C API (ctypes).

    import numpy as np, backplane
    host = backplane.Host()
    group = host.group(["cpu:0", "cpu:1"])
    a, b = np.ones(1024, np.float32), np.full(1024, 2, np.float32)
    group.all_reduce([a, b])  # both now hold 3.0

The library is $BACKPLANE_LIBRARY, else the libbackplane.so.1 installed three
levels above this package, else whatever the system loader finds.
"""

from ._capi import LIBRARY_MAJOR, LIBRARY_MINOR
from .errors import (ConfigError, DeviceError, Error, InvalidArgumentError, PluginError, TimeoutError,
                     UnsupportedError)
from .group import Event, Group
from .host import Buffer, Device, Host, Plugin

library_version = (LIBRARY_MAJOR, LIBRARY_MINOR)

__all__ = ["Host", "Device", "Plugin", "Buffer", "Group", "Event", "Error", "UnsupportedError",
           "InvalidArgumentError", "ConfigError", "PluginError", "DeviceError", "TimeoutError", "library_version"]
