"""Whole steps as CUDA graphs: capture a sequence of vyre dispatches once, replay it for a few
microseconds of host time.

```python
step = vyre.autodiff.value_and_grad_fn(model, "loss", ["w"])
step(args); vyre.dispatch(update, uargs)                 # run once first (compile, tune, pin)
with vyre.graph.capture() as g:
    loss_parts, grads = step(args)                       # forward + fused backward (+ zero fills)
    vyre.dispatch(update, uargs)                         # the parameter update
for _ in range(1000):
    g.replay()                                           # one cuGraphLaunch for the whole step
```

Inside a ``capture`` block every vyre launch goes to the capture stream (a fresh non-blocking
stream, or ``stream=`` to capture into someone else's capture, e.g. CuPy's
``Stream.begin_capture``), as do the zero fills of :func:`vyre.autodiff.value_and_grad_fn`.
Nothing runs during capture. Only the **cached launch** can be captured (it is one driver call
over arrays fixed at capture time); a dispatch that would take the checked path (first call of a
kernel, new arrays, a tuner still deciding) is a ``DispatchError`` that says to run the step
once first. The graph replays over the very same device arrays: write new data into them (in
place) between replays; keep them alive as long as the graph.

Inside a capture, ``value_and_grad_fn`` returns the float64 loss *partials* buffer instead of a
reduced loss (a library reduction would run outside the capture stream): one element up to 8192
outputs; sum it after replay.

Mechanism: ``cuStreamBeginCapture`` (relaxed mode) / ``cuStreamEndCapture`` /
``cuGraphInstantiate`` through ``cuda.bindings``; :meth:`Graph.replay` calls ``cuGraphLaunch``
through ctypes (about 0.3 us of Python, against 1-2 us for a ``cuda.bindings`` call).
PyTorch users can also capture vyre inside ``torch.cuda.graph(...)``: vyre launches for PyTorch
tensors go to PyTorch's current stream, which that block sets to its capture stream.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .driver.fast_launch import CAPTURE
from .errors import DispatchError


class GraphError(DispatchError):
    """A CUDA graph could not be captured or replayed."""


def _check(result: Any, what: str) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise GraphError(f"{what} failed (CUDA error {int(err)}: {err!r}). Fix: run each dispatch of the step "
                         "once before capturing, and keep only vyre dispatches (or work on the capture "
                         "stream) inside the block")
    return rest[0] if len(rest) == 1 else rest


_graph_launch: Any = None


def _launcher() -> Any:
    global _graph_launch
    if _graph_launch is None:
        fn = ctypes.CDLL("libcuda.so.1").cuGraphLaunch
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        _graph_launch = fn
    return _graph_launch


class Graph:
    """An instantiated CUDA graph of captured vyre launches."""

    def __init__(self) -> None:
        self._graph: Any = None
        self._exec: Any = None
        self._handle = ctypes.c_void_p(0)
        self.kernels = 0

    def replay(self, stream: int = 0) -> None:
        """Launch the whole graph on ``stream`` (0: the legacy default stream, ordered with vyre's
        other launches and CuPy's / PyTorch's default streams). Asynchronous, like a launch."""
        if self._exec is None:
            raise GraphError("the graph was not captured (the capture block raised). Fix: capture it again")
        err = _launcher()(self._handle, stream or None)
        if err:
            raise GraphError(f"cuGraphLaunch failed (CUDA error {err}). Fix: check the device state")

    def __del__(self) -> None:
        try:
            from cuda.bindings import driver as cu

            if self._exec is not None:
                cu.cuGraphExecDestroy(self._exec)
            if self._graph is not None:
                cu.cuGraphDestroy(self._graph)
        except Exception:  # interpreter shutdown: the driver frees it with the context
            pass


@contextmanager
def capture(stream: int | None = None) -> Iterator[Graph]:
    """Capture the vyre launches of the block into a :class:`Graph` (module docs). ``stream``: an
    already capturing stream to add them to (the caller ends that capture); default: a fresh
    stream that this block captures and instantiates."""
    from cuda.bindings import driver as cu
    from numba import cuda

    if CAPTURE.stream is not None:
        raise GraphError("vyre.graph.capture blocks do not nest. Fix: capture one step at a time")
    cuda.current_context()  # numba's primary context, current on this thread (the arrays' context)
    g = Graph()
    own = stream is None
    if own:
        s = _check(cu.cuStreamCreate(int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")
        _check(cu.cuStreamBeginCapture(s, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
               "cuStreamBeginCapture")
        sid = int(s)
    else:
        sid = int(stream)  # type: ignore[arg-type]
    CAPTURE.stream = sid
    ok = False
    try:
        yield g
        ok = True
    finally:
        CAPTURE.stream = None
        if own:
            graph = _check(cu.cuStreamEndCapture(s), "cuStreamEndCapture")
            if ok:
                g._graph = graph
                g._exec = _check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
                g._handle = ctypes.c_void_p(int(g._exec))
                nodes = _check(cu.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")
                g.kernels = int(nodes[1]) if isinstance(nodes, list) else 0
            elif graph is not None:
                cu.cuGraphDestroy(graph)
            cu.cuStreamDestroy(s)
