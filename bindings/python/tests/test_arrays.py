"""Arrays the binding refuses, each with its code, leaving every array as it was."""

import numpy as np
import pytest

import backplane


def refused(call, *arrays):
    """Run `call`, expect INVALID_ARGUMENT, and check that no array changed."""
    before = [np.array(a, copy=True) for a in arrays]
    with pytest.raises(backplane.InvalidArgumentError) as caught:
        call()
    assert caught.value.code == "INVALID_ARGUMENT"
    for array, saved in zip(arrays, before):
        assert np.array_equal(array, saved)
    return caught.value


def test_a_read_only_out_is_refused(pair):
    a, b = np.ones(4, np.float32), np.ones(4, np.float32)
    c, d = np.zeros(4, np.float32), np.zeros(4, np.float32)
    d.setflags(write=False)
    error = refused(lambda: pair.all_reduce([a, b], out=[c, d]), a, b, c, d)
    assert "rank 1's out is read-only" in error.message


def test_read_only_arrays_in_place_are_refused_but_read_only_sends_are_fine(pair):
    a = np.ones(4, np.float32)
    a.setflags(write=False)
    b = np.ones(4, np.float32)
    refused(lambda: pair.all_reduce([a, b]), a, b)
    c, d = np.zeros(4, np.float32), np.zeros(4, np.float32)
    pair.all_reduce([a, b], out=[c, d])
    assert np.all(c == 2) and np.all(d == 2)
    e, f = bytearray(4), bytearray(4)
    pair.all_reduce([bytes([1, 1, 1, 1]), bytes([1, 2, 3, 4])], out=[memoryview(e), f])
    assert list(e) == [2, 3, 4, 5] and list(f) == [2, 3, 4, 5]


def test_a_non_contiguous_array_is_refused_not_copied(pair):
    wide = np.ones(8, np.float32)
    a, b = wide[::2], np.ones(4, np.float32)
    error = refused(lambda: pair.all_reduce([a, b]), wide, b)
    assert "not C-contiguous" in error.message
    error = refused(lambda: pair.all_reduce([b, np.ones(4, np.float32)], out=[a, np.zeros(4, np.float32)]), wide, b)
    assert "rank 0's out" in error.message


def test_sizes_that_do_not_match_are_refused(pair):
    a, b = np.ones(4, np.float32), np.ones(5, np.float32)
    error = refused(lambda: pair.all_reduce([a, b]), a, b)
    assert error.fields["rank"] == 1 and "20 bytes" in error.message
    # all_gather out must hold two blocks of the send count
    c, d = np.zeros(8, np.float32), np.zeros(7, np.float32)
    refused(lambda: pair.all_gather([a, a.copy()], out=[c, d]), a, c, d)
    # reduce_scatter sends that do not split into whole blocks
    refused(lambda: pair.reduce_scatter([b, b.copy()], out=[np.zeros(2, np.float32)] * 2), b)


def test_mismatched_element_types_are_refused(pair):
    a, b = np.ones(4, np.float32), np.ones(4, np.int32)
    error = refused(lambda: pair.all_reduce([a, b]), a, b)
    assert "f32" in error.message and "i32" in error.message
    c, d = np.ones(4, np.float64), np.ones(4, np.float64)
    refused(lambda: pair.all_reduce([c, d], out=[np.zeros(4, np.float32), np.zeros(4, np.float32)]), c, d)


def test_element_types_backplane_has_not_are_refused(pair):
    for numpy_type in (np.int16, np.complex64, np.bool_):
        a, b = np.ones(4, numpy_type), np.ones(4, numpy_type)
        refused(lambda: pair.all_reduce([a, b]), a, b)
    swapped = np.ones(4, ">f4")
    refused(lambda: pair.all_reduce([swapped, swapped.copy()]), swapped)


def test_a_dtype_of_another_width_is_refused(pair):
    a, b = np.ones(4, np.float32), np.ones(4, np.float32)
    refused(lambda: pair.all_reduce([a, b], dtype="bf16"), a, b)
    refused(lambda: pair.all_reduce([a, b], dtype="f33"), a, b)


def test_the_wrong_number_of_arrays_and_non_arrays_are_refused(pair):
    a = np.ones(4, np.float32)
    refused(lambda: pair.all_reduce([a]), a)
    refused(lambda: pair.all_reduce([a, a.copy()], out=[a]), a)
    refused(lambda: pair.all_reduce([a, [1.0, 2.0, 3.0, 4.0]]), a)
    refused(lambda: pair.all_reduce([a, None]), a)


def test_an_unknown_op_is_refused(pair):
    a, b = np.ones(4, np.float32), np.ones(4, np.float32)
    error = refused(lambda: pair.all_reduce([a, b], op="mean"), a, b)
    assert "avg" in error.alternatives


def test_a_send_and_out_that_partly_overlap_are_refused(pair):
    memory = np.ones(6, np.float32)
    refused(lambda: pair.all_reduce([memory[:4], np.ones(4, np.float32)],
                                    out=[memory[2:], np.zeros(4, np.float32)]), memory)


def test_the_same_memory_as_send_and_out_is_in_place(pair):
    a, b = np.ones(4, np.float32), np.ones(4, np.float32)
    pair.all_reduce([a, b], out=[a[:], b])
    assert np.all(a == 2) and np.all(b == 2)


def test_two_ranks_writing_one_array_are_refused_by_the_library(pair):
    a = np.ones(4, np.float32)
    refused(lambda: pair.all_reduce([a, a]), a)
