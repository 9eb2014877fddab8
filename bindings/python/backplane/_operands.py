"""From a collective's Python arguments to the bp_buffer arrays of one C call.

Each rank's operand is an array (anything with the buffer protocol in host
memory) or a Buffer. Arrays are wrapped without copying on host-addressable
devices and staged through a device buffer on the others.
"""

import ctypes
from functools import cached_property

import numpy as np

from . import _capi
from ._capi import lib
from .errors import check, invalid_argument

# Buffer-protocol format characters (struct module) by kind: float, signed, unsigned.
_FORMAT_KIND = {**dict.fromkeys("efd", "float"), **dict.fromkeys("bhilqn", "signed"),
                **dict.fromkeys("BHILQN", "unsigned")}
_DTYPE_OF_KIND_AND_SIZE = {
    ("float", 2): "f16", ("float", 4): "f32", ("float", 8): "f64",
    ("signed", 1): "i8", ("signed", 4): "i32", ("signed", 8): "i64",
    ("unsigned", 1): "u8", ("unsigned", 4): "u32", ("unsigned", 8): "u64",
}
_NATIVE_ORDER_PREFIXES = "@=" + ("<" if _capi.BYTE_ORDER_IS_LITTLE else ">!")
_NUMPY_OF_DTYPE = {"f16": np.float16, "bf16": np.uint16, "f32": np.float32, "f64": np.float64,
                   "i8": np.int8, "u8": np.uint8, "i32": np.int32, "u32": np.uint32,
                   "i64": np.int64, "u64": np.uint64}


def enum_value(kind, from_name, name, choices):
    """The C enum value of a name ("f32", "sum", "all_reduce"); InvalidArgumentError when unknown."""
    value = ctypes.c_uint32()
    if not isinstance(name, str) or not from_name(name.encode(), ctypes.byref(value)):
        raise invalid_argument(f"unknown {kind} {name!r}", alternatives=list(choices))
    return value.value


def dtype_value(name):
    return enum_value("element type", lib.bp_dtype_from_name, name, _NUMPY_OF_DTYPE)


def numpy_dtype(dtype):
    """A NumPy dtype for a Backplane element type name or anything np.dtype takes (bf16 reads as uint16)."""
    if isinstance(dtype, str) and dtype in _NUMPY_OF_DTYPE:
        return np.dtype(_NUMPY_OF_DTYPE[dtype])
    return np.dtype(dtype)


class HostArray:
    """A buffer-protocol object seen as flat bytes, with the element type its format implies."""

    def __init__(self, obj):
        try:
            self.view = memoryview(obj)
        except TypeError:
            raise invalid_argument(f"a {type(obj).__name__} is not an array: pass a NumPy array, memoryview, "
                                   "array.array or backplane.Buffer") from None
        self.obj = obj
        self.nbytes = self.view.nbytes
        self.itemsize = self.view.itemsize

    def require_contiguous(self, role):
        if not self.view.c_contiguous:
            raise invalid_argument(f"{role} is not C-contiguous; pass a contiguous array "
                                   "(np.ascontiguousarray) - the binding never copies behind your back")

    def require_writable(self, role):
        if self.view.readonly:
            raise invalid_argument(f"{role} is read-only, and a collective writes its results there")

    @cached_property
    def address(self):
        """The first byte's address (contiguous arrays only; read-only ones too, which ctypes cannot map)."""
        return np.frombuffer(self.view.cast("B"), np.uint8).ctypes.data if self.nbytes else None

    def element_type(self, role):
        """The Backplane element type name of the array's format, or InvalidArgumentError."""
        form = self.view.format
        if form[:1] in "@=<>!":
            if form[0] not in _NATIVE_ORDER_PREFIXES:
                raise invalid_argument(f"{role} has a non-native byte order ({form!r})")
            form = form[1:]
        dtype = _DTYPE_OF_KIND_AND_SIZE.get((_FORMAT_KIND.get(form), self.itemsize))
        if dtype is None:
            raise invalid_argument(f"{role} has elements of format {self.view.format!r} ({self.itemsize} bytes), "
                                   "which no Backplane element type is",
                                   alternatives=sorted(set(_DTYPE_OF_KIND_AND_SIZE.values())) + ["bf16 (dtype='bf16')"])
        return dtype

    def overlaps(self, other):
        if not self.nbytes or not other.nbytes:
            return False
        a, b = self.address, other.address
        return a < b + other.nbytes and b < a + self.nbytes


def rank_buffers_of(collective, ranks, is_root):
    """(send blocks, recv blocks) of one rank, 0 for a buffer it does not use.

    types.h's bp_rank_buffers_of, which is a static inline function and so
    not in the library: kept here in step with it.
    """
    return {
        "all_reduce": (1, 1),
        "reduce": (1, 1 if is_root else 0),
        "broadcast": (1 if is_root else 0, 1),
        "all_gather": (1, ranks),
        "reduce_scatter": (ranks, 1),
        "gather": (1, ranks if is_root else 0),
        "scatter": (ranks if is_root else 0, 1),
        "all_to_all": (ranks, ranks),
    }.get(collective, (0, 0))


class PreparedCall:
    """The bp_buffer arrays of one collective call, and what they hold on to until release()."""

    def __init__(self, group, collective, arrays, out, dtype, root):
        from .host import Buffer
        ranks = len(group.devices)
        if arrays is None:
            arrays = [None] * ranks
        arrays = list(arrays)
        outs = arrays if out is None else list(out)
        if len(arrays) != ranks or len(outs) != ranks:
            raise invalid_argument(f"{collective}: the group has {ranks} ranks; pass one array per rank "
                                   f"(got {len(arrays)}{'' if out is None else f' and {len(outs)} out'})")

        # Which operand each rank reads and writes, and how many blocks each holds.
        self.operands = []  # (rank, operand, read, written, blocks) with one entry per distinct operand
        for rank in range(ranks):
            send_blocks, recv_blocks = rank_buffers_of(collective, ranks, rank == root)
            send = self._operand(arrays[rank], collective, rank, "send", Buffer) if send_blocks else None
            recv = self._operand(outs[rank], collective, rank, "out", Buffer) if recv_blocks else None
            if send is not None and recv is not None and _same_memory(send, recv):
                self.operands.append((rank, send, True, True, max(send_blocks, recv_blocks)))
                continue
            if send is not None and recv is not None and isinstance(send, HostArray) and isinstance(recv, HostArray) \
                    and send.overlaps(recv):
                raise invalid_argument(f"{collective}: rank {rank}'s send and out overlap without being the same array")
            if send is not None:
                self.operands.append((rank, send, True, False, send_blocks))
            if recv is not None:
                self.operands.append((rank, recv, False, True, recv_blocks))

        self.dtype_name = self._element_type(collective, dtype)
        self.dtype = dtype_value(self.dtype_name)
        self.count = self._count(collective, lib.bp_dtype_size(self.dtype))

        self.send = (_capi.bp_handle * ranks)()
        self.recv = (_capi.bp_handle * ranks)()
        self._owned = []       # bp_buffer handles this call made, destroyed by release()
        self._read_backs = []  # (staging buffer, array) pairs copied back once the collective completed
        try:
            for rank, operand, read, written, _ in self.operands:
                handle = self._buffer_for(operand, group.devices[rank], read, written)
                if read:
                    self.send[rank] = handle
                if written:
                    self.recv[rank] = handle
        except BaseException:
            self.release()
            raise

    @staticmethod
    def _operand(obj, collective, rank, role, buffer_class):
        if obj is None:
            raise invalid_argument(f"{collective}: rank {rank}'s {role} is None, and {collective} uses it")
        if isinstance(obj, buffer_class):
            return obj
        array = HostArray(obj)
        array.require_contiguous(f"{collective}: rank {rank}'s {role}")
        if role == "out":
            array.require_writable(f"{collective}: rank {rank}'s {role}")
        return array

    def _element_type(self, collective, dtype):
        arrays = [(rank, operand) for rank, operand, *_ in self.operands if isinstance(operand, HostArray)]
        if dtype is not None:
            size = lib.bp_dtype_size(dtype_value(dtype))
            for rank, array in arrays:
                if array.itemsize != size:
                    raise invalid_argument(f"{collective}: rank {rank}'s array has {array.itemsize}-byte elements, "
                                           f"and {dtype} has {size}-byte ones")
            return dtype
        if not arrays:
            if self.operands:
                raise invalid_argument(f"{collective}: every operand is a Buffer, so name the element type with dtype=")
            return "u8"  # a barrier: nothing to type
        first_rank, first = arrays[0]
        found = first.element_type(f"{collective}: rank {first_rank}'s array")
        for rank, array in arrays[1:]:
            other = array.element_type(f"{collective}: rank {rank}'s array")
            if other != found:
                raise invalid_argument(f"{collective}: rank {first_rank}'s array holds {found} and rank {rank}'s {other}; "
                                       "every array of a call holds one element type")
        return found

    def _count(self, collective, element_size):
        if not self.operands:
            return 0
        first_rank, first, *_, first_blocks = self.operands[0]
        count = _nbytes(first) // element_size // first_blocks
        for rank, operand, _, _, blocks in self.operands:
            if _nbytes(operand) != blocks * count * element_size:
                raise invalid_argument(
                    f"{collective}: rank {rank}'s operand holds {_nbytes(operand)} bytes, but {blocks} block(s) of "
                    f"{count} {self.dtype_name} elements (the count rank {first_rank}'s operand gives) are "
                    f"{blocks * count * element_size} bytes", rank=rank)
        return count

    def _buffer_for(self, operand, device, read, written):
        if not isinstance(operand, HostArray):
            return operand._handle
        handle = _capi.bp_handle()
        if device.host_addressable:
            # Zero copy: the buffer is the array's own memory.
            check(lib.bp_buffer_wrap_host(device._handle, operand.address, operand.nbytes, ctypes.byref(handle)))
            self._owned.append(handle.value)
            return handle.value
        check(lib.bp_buffer_create(device._handle, operand.nbytes, ctypes.byref(handle)))
        self._owned.append(handle.value)
        if read:
            check(lib.bp_buffer_write(handle.value, 0, operand.address, operand.nbytes))
        if written:
            self._read_backs.append((handle.value, operand))
        return handle.value

    def request(self, collective_value, op_value, root):
        return _capi.CollectiveRequest(
            struct_size=ctypes.sizeof(_capi.CollectiveRequest), collective=collective_value, dtype=self.dtype,
            reduce_op=op_value, root=root, count=self.count,
            send=ctypes.cast(self.send, ctypes.POINTER(_capi.bp_handle)),
            recv=ctypes.cast(self.recv, ctypes.POINTER(_capi.bp_handle)))

    def read_back(self):
        """Copy the results of staged ranks into their arrays (after the collective completed)."""
        for handle, array in self._read_backs:
            check(lib.bp_buffer_read(handle, 0, array.address, array.nbytes))
        self._read_backs = []

    def release(self):
        """Destroy the buffers this call made and let go of the arrays; safe to call twice."""
        owned, self._owned = self._owned, []
        for handle in owned:
            lib.bp_buffer_destroy(handle)
        self._read_backs = []
        self.operands = []


def _nbytes(operand):
    return operand.nbytes if isinstance(operand, HostArray) else operand.size


def _same_memory(a, b):
    if a is b:
        return True
    if isinstance(a, HostArray) and isinstance(b, HostArray):
        return a.obj is b.obj or (a.nbytes == b.nbytes and a.nbytes > 0 and a.address == b.address)
    return False
