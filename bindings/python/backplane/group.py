"""Groups of ranks and the collectives they run, blocking and asynchronous."""

import ctypes
import weakref

from . import _capi
from ._capi import lib, text
from ._operands import PreparedCall, dtype_value, enum_value
from .errors import check, take
from .host import Device

_REDUCE_OPS = ("sum", "prod", "min", "max", "avg")
_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "scatter",
                "all_to_all", "barrier")


def _op_value(op):
    return enum_value("reduce op", lib.bp_reduce_op_from_name, op, _REDUCE_OPS)


def _collective_value(name):
    return enum_value("collective", lib.bp_collective_from_name, name, _COLLECTIVES)


class Group:
    """Ranks that run collectives together: rank r is devices[r].

    Every collective takes one array per rank (any buffer-protocol object in
    host memory: NumPy arrays, memoryview, array.array; or a Buffer) and
    writes its results in place, or into `out` (one array per rank) when
    given. The element type comes from the arrays; dtype="bf16" reads 16-bit
    arrays as bfloat16. The count is derived from the array sizes and the
    collective's layout (types.h), and every array must hold exactly what it
    implies. On host-addressable devices (cpu) the arrays are the buffers,
    without a copy; on the others (opencl) each rank's array is staged: copied
    into a device buffer, run, and its results copied back.

    Ranks that do not use an operand (the receive side of a reduce off the
    root, the send side of a broadcast off it) may pass None there; what they
    pass is not touched. The group keeps its host alive.
    """

    def __init__(self, host, handle, owned):
        self._host = host
        self._handle = handle
        self.devices = [Device(host, lib.bp_group_device(handle, r)) for r in range(lib.bp_group_size(handle))]
        if owned:
            self._release = weakref.finalize(self, lib.bp_group_destroy, handle)

    @property
    def size(self):
        return len(self.devices)

    def __len__(self):
        return len(self.devices)

    @property
    def name(self):
        return text(lib.bp_group_name(self._handle))

    @property
    def route(self):
        """How the group's plugin moves data between its ranks (one line, "" when it says nothing)."""
        return text(lib.bp_group_route(self._handle))

    def check(self, collective, dtype="f32", op="sum"):
        """None when the collective would run with this element type and op, else the Error it would raise."""
        return take(lib.bp_group_check(self._handle, _collective_value(collective), dtype_value(dtype), _op_value(op)))

    def _prepare(self, collective, arrays, out, dtype, op, root):
        call = PreparedCall(self, collective, arrays, out, dtype, root)
        return call, call.request(_collective_value(collective), _op_value(op), root)

    def _run(self, collective, arrays, out=None, dtype=None, op="sum", root=0):
        call, request = self._prepare(collective, arrays, out, dtype, op, root)
        try:
            check(lib.bp_run_collective(self._handle, ctypes.byref(request)))
            call.read_back()
        finally:
            call.release()

    def _start(self, collective, arrays, out=None, dtype=None, op="sum", root=0):
        call, request = self._prepare(collective, arrays, out, dtype, op, root)
        handle = _capi.bp_handle()
        try:
            check(lib.bp_run_collective_async(self._handle, ctypes.byref(request), ctypes.byref(handle)))
        except BaseException:
            call.release()
            raise
        return Event(self, handle.value, call)

    def all_reduce(self, arrays, out=None, op="sum", dtype=None):
        """Every rank gets the reduction of every rank's array (count elements each)."""
        self._run("all_reduce", arrays, out, dtype, op)

    def all_reduce_async(self, arrays, out=None, op="sum", dtype=None):
        return self._start("all_reduce", arrays, out, dtype, op)

    def reduce(self, arrays, out=None, op="sum", root=0, dtype=None):
        """The root gets the reduction of every rank's array; only the root's out is written."""
        self._run("reduce", arrays, out, dtype, op, root)

    def reduce_async(self, arrays, out=None, op="sum", root=0, dtype=None):
        return self._start("reduce", arrays, out, dtype, op, root)

    def broadcast(self, arrays, out=None, root=0, dtype=None):
        """Every rank gets the root's array; only the root's send is read."""
        self._run("broadcast", arrays, out, dtype, root=root)

    def broadcast_async(self, arrays, out=None, root=0, dtype=None):
        return self._start("broadcast", arrays, out, dtype, root=root)

    def all_gather(self, arrays, out=None, dtype=None):
        """Every rank's out (n blocks) gets rank r's array at block r; in place, each array holds n blocks
        and its own block r is the contribution."""
        self._run("all_gather", arrays, out, dtype)

    def all_gather_async(self, arrays, out=None, dtype=None):
        return self._start("all_gather", arrays, out, dtype)

    def reduce_scatter(self, arrays, out=None, op="sum", dtype=None):
        """Each rank's array holds n blocks; rank r gets the reduction of block r (in place: into its block r)."""
        self._run("reduce_scatter", arrays, out, dtype, op)

    def reduce_scatter_async(self, arrays, out=None, op="sum", dtype=None):
        return self._start("reduce_scatter", arrays, out, dtype, op)

    def gather(self, arrays, out=None, root=0, dtype=None):
        """The root's out (n blocks) gets rank r's array at block r."""
        self._run("gather", arrays, out, dtype, root=root)

    def gather_async(self, arrays, out=None, root=0, dtype=None):
        return self._start("gather", arrays, out, dtype, root=root)

    def scatter(self, arrays, out=None, root=0, dtype=None):
        """Rank r gets block r of the root's array (n blocks)."""
        self._run("scatter", arrays, out, dtype, root=root)

    def scatter_async(self, arrays, out=None, root=0, dtype=None):
        return self._start("scatter", arrays, out, dtype, root=root)

    def all_to_all(self, arrays, out=None, dtype=None):
        """Block j of rank i's array goes to block i of rank j's out (n blocks each)."""
        self._run("all_to_all", arrays, out, dtype)

    def all_to_all_async(self, arrays, out=None, dtype=None):
        return self._start("all_to_all", arrays, out, dtype)

    def barrier(self):
        """Returns once every rank reached it."""
        self._run("barrier", None)

    def barrier_async(self):
        return self._start("barrier", None)

    def __repr__(self):
        return f"<backplane.Group {self.name or ''}[{', '.join(d.name for d in self.devices)}]>"


class Event:
    """A collective in flight. Until it completed, it holds the call's arrays and buffers, which must not
    be touched; results of staged ranks reach their arrays when wait() returns or done first says True."""

    def __init__(self, group, handle, call):
        self._group = group
        self._handle = handle
        self._call = call
        self._finished = False
        # Destroying the event waits for its collective, so the buffers go after it.
        self._release = weakref.finalize(self, _destroy_event, handle, call)

    def wait(self, timeout=None):
        """Wait up to `timeout` seconds (None: no limit); raise the collective's error, or TimeoutError
        (the event then stays in flight: wait again)."""
        limit = -1 if timeout is None else max(int(timeout * 1e9), 0)
        error = take(lib.bp_event_wait(self._handle, limit))
        if error is not None and error.code == "TIMEOUT":
            raise error
        self._finish(succeeded=error is None)
        if error is not None:
            raise error

    @property
    def done(self):
        """Whether the collective completed (successfully or not: wait() then gives the outcome)."""
        if not self._finished and lib.bp_event_test(self._handle):
            self._finish(succeeded=take(lib.bp_event_wait(self._handle, 0)) is None)
        return self._finished

    def _finish(self, succeeded):
        if self._finished:
            return
        self._finished = True
        try:
            if succeeded:
                self._call.read_back()
        finally:
            self._call.release()


def _destroy_event(handle, call):
    lib.bp_event_destroy(handle)
    call.release()
