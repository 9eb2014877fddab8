"""Each error class, raised with the structured fields the C API gave it."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import backplane


def test_an_unsupported_op_is_an_unsupported_error_with_alternatives(pair):
    a, b = np.ones(4, np.int32), np.ones(4, np.int32)
    with pytest.raises(backplane.UnsupportedError) as caught:
        pair.all_reduce([a, b], op="avg")
    error = caught.value
    assert error.code == "UNSUPPORTED_REDUCE_OP"
    assert "avg" in error.message
    assert error.fields["code"] == "UNSUPPORTED_REDUCE_OP" and error.fields["reduce_op"] == "avg"
    assert error.fields["dtype"] == "i32"
    assert error.alternatives == error.fields.get("alternatives", []) and isinstance(error.alternatives, list)
    assert np.array_equal(a, [1, 1, 1, 1]) and np.array_equal(b, [1, 1, 1, 1])


def test_check_returns_the_error_instead_of_raising(pair):
    assert pair.check("all_reduce", dtype="f16", op="avg") is None
    error = pair.check("all_reduce", dtype="i32", op="avg")
    assert isinstance(error, backplane.UnsupportedError) and error.code == "UNSUPPORTED_REDUCE_OP"
    with pytest.raises(backplane.InvalidArgumentError) as caught:
        pair.check("all_reduce", dtype="f17")
    assert caught.value.code == "INVALID_ARGUMENT" and "f32" in caught.value.fields["alternatives"]


def test_a_bad_root_is_an_invalid_argument_and_a_value_error(pair):
    a, b = np.ones(4, np.float32), np.ones(4, np.float32)
    with pytest.raises(ValueError) as caught:
        pair.broadcast([a, b], root=2)
    error = caught.value
    assert isinstance(error, backplane.InvalidArgumentError)
    assert error.code == "INVALID_ARGUMENT" and "root 2" in error.message
    assert error.fields["operation"] == "broadcast"


def test_a_device_that_does_not_exist(host):
    with pytest.raises(backplane.InvalidArgumentError) as caught:
        host.group(["cpu:0", "cpu:99"])
    assert caught.value.code == "INVALID_ARGUMENT" and caught.value.hint == "use an index below 4"
    with pytest.raises(backplane.PluginError) as caught:
        host.group(["cpu:0", "tpu:0"])
    assert caught.value.code == "PLUGIN_NOT_FOUND" and "cpu" in caught.value.fields["known_kinds"]


def test_mixed_kinds_under_reject_policy(host):
    if not any(d.kind == "opencl" for d in host.devices):
        pytest.skip("no opencl device")
    group = host.group(["cpu:0", "opencl:0"], policy="reject")
    error = group.check("all_reduce")
    assert isinstance(error, backplane.UnsupportedError) and error.code == "MIXED_DEVICE_KINDS"


def test_a_fleet_with_mistakes_is_a_config_error_listing_every_problem(tmp_path):
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({
        "version": 1,
        "devices": [{"name": "cpu", "kind": "cpu", "count": "two"}],
        "groups": [{"name": "g", "devices": ["cpu"], "polcy": "stage"}]}))
    with pytest.raises(backplane.ConfigError) as caught:
        backplane.Host.from_fleet(fleet)
    error = caught.value
    assert error.code == "CONFIG" and error.fields["file"] == str(fleet)
    assert len(error.problems) == 2
    assert [p.fields["pointer"] for p in error.problems] == ["/devices/0/count", "/groups/0/polcy"]
    assert error.problems[0].fields["value"] == "two"
    assert error.problems[1].hint == "did you mean 'policy'?"
    assert all(isinstance(p, backplane.Error) and p.fields["file"] == str(fleet) for p in error.problems)


def test_a_fleet_file_and_its_groups():
    config = os.path.join(os.path.dirname(__file__), "..", "..", "..", "configs", "cpu.json")
    host = backplane.Host.from_fleet(config)
    group = host.find_group("pair_a")
    assert group.name == "pair_a" and [d.name for d in group.devices] == ["cpu:0", "cpu:1"]
    a, b = np.ones(3, np.int64), np.full(3, 7, np.int64)
    group.all_reduce([a, b], op="max")
    assert np.array_equal(a, [7, 7, 7])
    with pytest.raises(backplane.InvalidArgumentError):
        host.find_group("no_such_group")


def test_bad_plugin_options_refuse_the_plugin_with_a_config_error():
    host = backplane.Host(options={"cpu": {"devices": "four"}})
    refused = [e for e in host.refused if e.fields["file"].endswith("/libbackplane_cpu.so")]
    assert len(refused) == 1 and isinstance(refused[0], backplane.ConfigError) and refused[0].code == "CONFIG"
    assert '"devices" must be an integer' in refused[0].message
    with pytest.raises(backplane.ConfigError):
        host.device("cpu:0")


def test_a_timeout_is_both_backplane_and_builtin_timeout_error():
    assert issubclass(backplane.TimeoutError, backplane.Error)
    assert issubclass(backplane.TimeoutError, TimeoutError)
    assert backplane.errors.error_class("TIMEOUT") is backplane.TimeoutError


@pytest.mark.parametrize("code,cls", [
    ("UNSUPPORTED_DEVICE", "UnsupportedError"), ("UNSUPPORTED_COLLECTIVE", "UnsupportedError"),
    ("UNSUPPORTED_DTYPE", "UnsupportedError"), ("UNSUPPORTED_REDUCE_OP", "UnsupportedError"),
    ("MIXED_DEVICE_KINDS", "UnsupportedError"), ("NESTED_LAYER", "UnsupportedError"),
    ("INVALID_ARGUMENT", "InvalidArgumentError"), ("CONFIG", "ConfigError"),
    ("PLUGIN_NOT_FOUND", "PluginError"), ("PLUGIN_LOAD", "PluginError"), ("PLUGIN_ABI", "PluginError"),
    ("PLUGIN_INIT", "PluginError"), ("PLUGIN_CONFLICT", "PluginError"),
    ("DEVICE_FAILURE", "DeviceError"), ("OUT_OF_MEMORY", "DeviceError"), ("TIMEOUT", "TimeoutError"),
    ("INTERNAL", "Error")])
def test_every_code_of_the_library_maps_to_its_class(code, cls):
    from backplane._capi import lib
    names = [lib.bp_code_name(value).decode() for value in range(1, 18)]
    assert code in names  # the table above spells the library's names
    assert backplane.errors.error_class(code) is getattr(backplane, cls)


def test_refused_plugins_are_errors_naming_the_file(tmp_path):
    (tmp_path / "libbackplane_broken.so").write_bytes(b"not an ELF file at all")
    host = backplane.Host(plugin_dirs=[tmp_path])
    refused = [e for e in host.refused if "libbackplane_broken.so" in e.fields.get("file", "")]
    assert len(refused) == 1
    assert isinstance(refused[0], backplane.PluginError) and refused[0].code == "PLUGIN_LOAD"


def test_a_missing_library_is_an_import_error_naming_it():
    env = {**os.environ, "BACKPLANE_LIBRARY": "/nonexistent/libbackplane.so.1"}
    result = subprocess.run([sys.executable, "-c", "import backplane"], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "/nonexistent/libbackplane.so.1" in result.stderr
