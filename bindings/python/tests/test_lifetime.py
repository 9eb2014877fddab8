"""Handle lifetimes whatever the order Python frees them in, and no leak over many calls."""

import gc
import os

import numpy as np
import pytest

import backplane


def test_a_group_outlives_del_host():
    host = backplane.Host(options={"cpu": {"devices": 2}})
    group = host.group(["cpu:0", "cpu:1"])
    device = host.devices[0]
    del host
    gc.collect()
    a, b = np.ones(8, np.float32), np.full(8, 2, np.float32)
    group.all_reduce([a, b])
    assert np.all(a == 3) and device.name == "cpu:0"


def test_an_event_keeps_its_arrays_and_group_alive():
    host = backplane.Host(options={"cpu": {"devices": 2}})
    group = host.group(["cpu:0", "cpu:1"])
    a = np.ones(1 << 16, np.float64)
    event = group.all_reduce_async([a, np.ones(1 << 16, np.float64)])
    del host, group
    gc.collect()
    event.wait()
    assert np.all(a == 2)
    del event  # destroying a waited event is fine, and so is dropping one never waited for
    group = backplane.Host().group(["cpu:0", "cpu:1"])
    group.all_reduce_async([np.ones(4), np.ones(4)])
    del group
    gc.collect()


def test_a_waited_event_can_be_waited_again(pair):
    a, b = np.ones(4, np.float32), np.ones(4, np.float32)
    event = pair.all_reduce_async([a, b])
    event.wait()
    event.wait(timeout=0)
    assert event.done and np.all(a == 2)


def test_a_failed_async_start_raises_and_leaves_nothing_in_flight(pair):
    a, b = np.ones(4, np.int32), np.ones(4, np.int32)
    with pytest.raises(backplane.UnsupportedError):
        pair.all_reduce_async([a, b], op="avg")


def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_ten_thousand_calls(pair):
    a, b = np.ones(256, np.float32), np.ones(256, np.float32)
    c, d = np.zeros(256, np.float32), np.zeros(256, np.float32)

    def calls(times):
        for _ in range(times):
            pair.all_reduce([a, b], out=[c, d])
            pair.all_reduce_async([a, b], out=[c, d]).wait()
            pair.check("all_reduce", dtype="i32", op="avg")
            try:
                pair.all_reduce([a, b], op="bogus")
            except backplane.InvalidArgumentError:
                pass

    calls(500)  # warm up allocator pools and caches
    gc.collect()
    before = resident_bytes()
    calls(10_000)
    gc.collect()
    grown = resident_bytes() - before
    # A leak of even one small buffer object per call would be several MiB here.
    assert grown < 1 << 20, f"resident memory grew by {grown} bytes over 10000 rounds"


def test_device_buffers_work_as_operands(host):
    group = host.group(["cpu:2", "cpu:3"])
    x, y = group.devices[0].buffer(16), group.devices[1].buffer(16)
    x.write(np.arange(4, dtype=np.float32))
    y.write(np.full(4, 10, np.float32))
    group.all_reduce([x, y], dtype="f32")
    assert x.size == 16 and np.array_equal(y.read("f32"), [10, 11, 12, 13])
    # mixed with arrays, which give the element type
    out = np.zeros(4, np.float32)
    group.all_reduce([x, np.ones(4, np.float32)], out=[np.zeros(4, np.float32), out])
    assert np.array_equal(out, [11, 12, 13, 14])
    with pytest.raises(backplane.InvalidArgumentError, match="dtype="):
        group.all_reduce([x, y])
    with pytest.raises(backplane.InvalidArgumentError):
        group.all_reduce([y, x], dtype="f32")  # each buffer at another rank's device
