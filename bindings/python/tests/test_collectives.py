"""Every collective on two cpu ranks, for every element type and op, in place and out of place, against NumPy."""

import numpy as np
import pytest

from conftest import DTYPES, FLOAT_DTYPES, to_storage

RANKS, COUNT, ROOT = 2, 7, 1
REDUCE = {"sum": lambda x: x.sum(axis=0), "prod": lambda x: x.prod(axis=0), "min": lambda x: x.min(axis=0),
          "max": lambda x: x.max(axis=0), "avg": lambda x: x.sum(axis=0) / RANKS}


def ops_of(dtype):
    """The ops the cpu plugin runs for a type: all but avg on integers."""
    return [op for op in REDUCE if op != "avg" or dtype[0] in FLOAT_DTYPES]


def values(rng, blocks):
    # 1..4: every sum, product and mean of two is exact in every element type.
    return rng.integers(1, 5, size=blocks * COUNT).astype(np.float64)


def block(x, index):
    return x[index * COUNT:(index + 1) * COUNT]


def case(collective, op, in_place, rng):
    """(inputs, outs, kwargs, expected): float64 values per rank, and what each checked array must then hold.

    outs is None in place; expected maps ("in"|"out", rank, block or None) to values.
    """
    n = RANKS
    reduce = REDUCE.get(op)
    if collective == "all_reduce":
        inputs = [values(rng, 1) for _ in range(n)]
        result = reduce(np.stack(inputs))
        return inputs, None if in_place else [np.zeros(COUNT)] * n, {"op": op}, \
            {("in" if in_place else "out", r, None): result for r in range(n)}
    if collective == "reduce":
        inputs = [values(rng, 1) for _ in range(n)]
        result = reduce(np.stack(inputs))
        expected = {("in" if in_place else "out", ROOT, None): result, ("in", 0, None): inputs[0]}
        if not in_place:
            expected[("out", 0, None)] = np.zeros(COUNT)  # off the root, out is not touched
        return inputs, None if in_place else [np.zeros(COUNT)] * n, {"op": op, "root": ROOT}, expected
    if collective == "broadcast":
        inputs = [values(rng, 1) for _ in range(n)]
        if in_place:
            return inputs, None, {"root": ROOT}, {("in", r, None): inputs[ROOT] for r in range(n)}
        expected = {("out", r, None): inputs[ROOT] for r in range(n)}
        expected[("in", 0, None)] = inputs[0]
        return inputs, [np.zeros(COUNT)] * n, {"root": ROOT}, expected
    if collective == "all_gather":
        if in_place:
            inputs = [values(rng, n) for _ in range(n)]
            gathered = np.concatenate([block(inputs[r], r) for r in range(n)])
            return inputs, None, {}, {("in", r, None): gathered for r in range(n)}
        inputs = [values(rng, 1) for _ in range(n)]
        return inputs, [np.zeros(n * COUNT)] * n, {}, {("out", r, None): np.concatenate(inputs) for r in range(n)}
    if collective == "reduce_scatter":
        inputs = [values(rng, n) for _ in range(n)]
        result = reduce(np.stack(inputs))
        if in_place:
            return inputs, None, {"op": op}, {("in", r, r): block(result, r) for r in range(n)}
        return inputs, [np.zeros(COUNT)] * n, {"op": op}, {("out", r, None): block(result, r) for r in range(n)}
    if collective == "gather":
        if in_place:
            inputs = [values(rng, n if r == ROOT else 1) for r in range(n)]
            gathered = np.concatenate([block(inputs[r], ROOT) if r == ROOT else inputs[r] for r in range(n)])
            return inputs, None, {"root": ROOT}, {("in", ROOT, None): gathered, ("in", 0, None): inputs[0]}
        inputs = [values(rng, 1) for _ in range(n)]
        return inputs, [np.zeros(n * COUNT)] * n, {"root": ROOT}, \
            {("out", ROOT, None): np.concatenate(inputs), ("out", 0, None): np.zeros(n * COUNT)}
    if collective == "scatter":
        if in_place:
            inputs = [values(rng, n if r == ROOT else 1) for r in range(n)]
            return inputs, None, {"root": ROOT}, \
                {("in", 0, None): block(inputs[ROOT], 0), ("in", ROOT, None): inputs[ROOT]}
        inputs = [values(rng, n) for _ in range(n)]
        expected = {("out", r, None): block(inputs[ROOT], r) for r in range(n)}
        expected[("in", 0, None)] = inputs[0]
        return inputs, [np.zeros(COUNT)] * n, {"root": ROOT}, expected
    if collective == "all_to_all":
        inputs = [values(rng, n) for _ in range(n)]
        exchanged = [np.concatenate([block(inputs[i], j) for i in range(n)]) for j in range(n)]
        return inputs, None if in_place else [np.zeros(n * COUNT)] * n, {}, \
            {("in" if in_place else "out", r, None): exchanged[r] for r in range(n)}
    raise AssertionError(collective)


REDUCING = ["all_reduce", "reduce", "reduce_scatter"]
MOVING = ["broadcast", "all_gather", "gather", "scatter", "all_to_all"]
CASES = [(c, d, op) for c in REDUCING for d in DTYPES for op in ops_of(d)] + \
        [(c, d, None) for c in MOVING for d in DTYPES]


def start(group, collective, arrays, outs, kwargs, dtype, asynchronous):
    if dtype[0] == "bf16":
        kwargs = {**kwargs, "dtype": "bf16"}
    if asynchronous:
        event = getattr(group, collective + "_async")(arrays, outs, **kwargs)
        event.wait(timeout=10.0)
        assert event.done
    else:
        getattr(group, collective)(arrays, outs, **kwargs)


def run_and_check(group, collective, dtype, op, in_place, asynchronous=False):
    rng = np.random.default_rng(abs(hash((collective, dtype[0], op, in_place))) % 2**32)
    inputs, outs, kwargs, expected = case(collective, op, in_place, rng)
    arrays = [to_storage(x, dtype) for x in inputs]
    out_arrays = None if outs is None else [to_storage(x, dtype) for x in outs]
    start(group, collective, arrays, out_arrays, kwargs, dtype, asynchronous)
    for (side, rank, index), want in expected.items():
        got = (arrays if side == "in" else out_arrays)[rank]
        if index is not None:
            got = block(got, index)
        assert np.array_equal(got, to_storage(want, dtype)), f"{side}[{rank}] block {index}: {got} != {want}"


@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out_of_place"])
@pytest.mark.parametrize("collective,dtype,op", CASES,
                         ids=[f"{c}-{d[0]}" + (f"-{op}" if op else "") for c, d, op in CASES])
def test_collective_matches_numpy(pair, collective, dtype, op, in_place):
    run_and_check(pair, collective, dtype, op, in_place)


@pytest.mark.parametrize("collective", REDUCING + MOVING)
@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out_of_place"])
def test_async_collective_matches_numpy(pair, collective, in_place):
    run_and_check(pair, collective, ("f32", np.float32), "sum" if collective in REDUCING else None, in_place,
                  asynchronous=True)


def test_root_zero(pair):
    a, b = np.arange(4, dtype=np.int32), np.zeros(4, np.int32)
    pair.broadcast([a, b], root=0)
    assert np.array_equal(b, np.arange(4))


def test_barrier_and_its_event(pair):
    pair.barrier()
    event = pair.barrier_async()
    event.wait(timeout=5.0)
    assert event.done


def test_unused_operands_may_be_none(pair):
    a = np.full(3, 5, np.uint8)
    out = np.zeros(3, np.uint8)
    pair.reduce([a, np.ones(3, np.uint8)], out=[None, out], op="sum", root=1)
    assert np.array_equal(out, [6, 6, 6])


def test_memoryview_and_array_array_work_like_numpy(pair):
    import array
    a = array.array("d", [1.0, 2.0])
    b = memoryview(np.array([3.0, 4.0]))
    pair.all_reduce([a, b], op="max")
    assert list(a) == [3.0, 4.0] and b.tolist() == [3.0, 4.0]


def test_a_larger_all_reduce_on_a_four_rank_group(host):
    group = host.group([f"cpu:{i}" for i in range(4)])
    arrays = [np.full(100_000, i + 1, np.float64) for i in range(4)]
    group.all_reduce(arrays, op="avg")
    for array in arrays:
        assert np.all(array == 2.5)


def test_zero_elements(pair):
    a, b = np.zeros(0, np.float32), np.zeros(0, np.float32)
    pair.all_reduce([a, b])
    pair.all_gather([a, b], out=[np.zeros(0, np.float32), np.zeros(0, np.float32)])
