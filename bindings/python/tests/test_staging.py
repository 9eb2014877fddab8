"""Ranks on a device that is not host-addressable (OpenCL): arrays staged through device buffers."""

import os

import numpy as np
import pytest

import backplane


@pytest.fixture(scope="module")
def opencl(host):
    devices = [d for d in host.devices if d.kind == "opencl"]
    if not devices:
        if os.environ.get("BACKPLANE_REQUIRE_OPENCL") == "1":
            pytest.fail("BACKPLANE_REQUIRE_OPENCL=1 but the host has no opencl device")
        pytest.skip("no opencl device")
    assert not devices[0].host_addressable
    return devices[0]


def test_an_opencl_group_runs_on_staged_arrays(host, opencl):
    group = host.group([opencl])
    a = np.arange(1000, dtype=np.float32)
    out = np.zeros(1000, np.float32)
    group.all_reduce([a], out=[out], op="max")
    assert np.array_equal(out, np.arange(1000)) and np.array_equal(a, np.arange(1000))


def test_a_mixed_cpu_and_opencl_group(host, opencl):
    group = host.group(["cpu:0", opencl], policy="stage")
    a, b = np.arange(64, dtype=np.int64), np.full(64, 100, np.int64)
    group.all_reduce([a, b])
    assert np.array_equal(a, np.arange(64) + 100) and np.array_equal(b, a)
    x, y = np.zeros(128, np.int32), np.zeros(128, np.int32)
    group.all_gather([np.full(64, 1, np.int32), np.full(64, 2, np.int32)], out=[x, y])
    assert np.array_equal(y, np.repeat(np.array([1, 2], np.int32), 64)) and np.array_equal(x, y)


def test_async_staged_results_reach_the_array_on_wait(host, opencl):
    group = host.group(["cpu:1", opencl])
    a, b = np.full(4096, 2, np.float64), np.full(4096, 3, np.float64)
    event = group.all_reduce_async([a, b], op="prod")
    event.wait(timeout=30.0)
    assert np.all(a == 6) and np.all(b == 6)


def test_a_staged_error_leaves_the_array_untouched(host, opencl):
    group = host.group([opencl])
    a = np.ones(4, np.float16)
    error = group.check("all_reduce", dtype="f16")
    if error is None:
        pytest.skip("this opencl device runs f16")
    assert error.code == "UNSUPPORTED_DTYPE" and error.hint and error.alternatives
    assert {"device_kind": "cpu", "plugin": "cpu"} in error.alternatives
    with pytest.raises(backplane.UnsupportedError):
        group.all_reduce([a])
    assert np.all(a == 1)
