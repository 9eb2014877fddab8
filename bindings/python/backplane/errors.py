"""Backplane's structured errors as Python exceptions, one class per family of codes."""

import builtins
import json

from ._capi import lib, text


class Error(Exception):
    """An error of the Backplane C API (or of the binding's own argument checks).

    code: the stable code name, e.g. "UNSUPPORTED_DTYPE"; message: one line;
    hint: what to do, or None; alternatives: what would run instead (a list of
    dicts, as in the JSON); fields: the whole structured error as a dict;
    problems: for errors that gather several (a fleet file), each as an Error.
    """

    def __init__(self, fields, problems=()):
        super().__init__(fields.get("message", ""))
        self.fields = fields
        self.problems = list(problems)

    @property
    def code(self):
        return self.fields.get("code")

    @property
    def message(self):
        return self.fields.get("message", "")

    @property
    def hint(self):
        return self.fields.get("hint")

    @property
    def alternatives(self):
        return self.fields.get("alternatives", [])

    def __str__(self):
        return f"{self.code}: {self.message}"

    def __repr__(self):
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class UnsupportedError(Error):
    """The group's devices cannot run the request (UNSUPPORTED_*, MIXED_DEVICE_KINDS, NESTED_LAYER)."""


class InvalidArgumentError(Error, ValueError):
    """A call's arguments are wrong (INVALID_ARGUMENT)."""


class ConfigError(Error):
    """Plugin options or a fleet file are wrong (CONFIG)."""


class PluginError(Error):
    """A plugin could not be found, loaded or started (PLUGIN_*)."""


class DeviceError(Error):
    """A device failed or ran out of memory (DEVICE_FAILURE, OUT_OF_MEMORY)."""


class TimeoutError(Error, builtins.TimeoutError):
    """A wait ran out of time (TIMEOUT); the event stays valid."""


_CLASS_OF_CODE = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "MIXED_DEVICE_KINDS": UnsupportedError,
    "NESTED_LAYER": UnsupportedError,
    "CONFIG": ConfigError,
    "DEVICE_FAILURE": DeviceError,
    "OUT_OF_MEMORY": DeviceError,
    "TIMEOUT": TimeoutError,
}


def error_class(code):
    """The exception class for a code name; Error itself for INTERNAL and codes newer than the binding."""
    if code in _CLASS_OF_CODE:
        return _CLASS_OF_CODE[code]
    if code.startswith("UNSUPPORTED_"):
        return UnsupportedError
    if code.startswith("PLUGIN_"):
        return PluginError
    return Error


def from_handle(handle):
    """Copy a bp_error (owned or borrowed: it is not destroyed here) into an Error."""
    code = text(lib.bp_code_name(lib.bp_error_code(handle))) or "INTERNAL"
    fields = json.loads(text(lib.bp_error_json(handle)))
    # The code comes from bp_code_name rather than the JSON so that the class
    # follows the C enum even if the JSON's spelling ever changed.
    fields["code"] = code
    problems = [from_handle(lib.bp_error_problem(handle, i)) for i in range(lib.bp_error_problem_count(handle))]
    return error_class(code)(fields, problems)


def take(handle):
    """Turn a returned bp_error * into an Error and free it; None for success (NULL)."""
    if not handle:
        return None
    try:
        return from_handle(handle)
    finally:
        lib.bp_error_destroy(handle)


def check(handle):
    """Raise the error a fallible call returned, if any."""
    error = take(handle)
    if error is not None:
        raise error


def invalid_argument(message, **context):
    """An INVALID_ARGUMENT raised by the binding itself, shaped like the library's."""
    return InvalidArgumentError({"code": "INVALID_ARGUMENT", "message": message, **context})
