"""Shared fixtures: one host for the whole run (plugin loading is the slow part) and a group of two cpu ranks."""

import numpy as np
import pytest

import backplane


@pytest.fixture(scope="session")
def host():
    return backplane.Host(options={"cpu": {"devices": 4}})


@pytest.fixture(scope="session")
def pair(host):
    return host.group(["cpu:0", "cpu:1"])


# Every element type: (Backplane name, NumPy storage type). bf16 is stored as
# uint16 bit patterns, since NumPy has no bfloat16.
DTYPES = [("f16", np.float16), ("bf16", np.uint16), ("f32", np.float32), ("f64", np.float64),
          ("i8", np.int8), ("u8", np.uint8), ("i32", np.int32), ("u32", np.uint32),
          ("i64", np.int64), ("u64", np.uint64)]
FLOAT_DTYPES = {"f16", "bf16", "f32", "f64"}


def to_storage(values, dtype):
    """Exact small values (float64) as an array of the element type."""
    name, storage = dtype
    if name == "bf16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(storage)


def from_storage(array, dtype):
    if dtype[0] == "bf16":
        return (array.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return array.astype(np.float64)
