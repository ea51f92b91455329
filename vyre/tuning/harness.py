"""The kernel bench the tuner measures candidates on (:mod:`vyre.tuning.autotune`).

:class:`Harness` runs one flat kernel over scratch copies of every buffer the program writes
(restored from the caller's contents before every run, so timing never changes results), estimates
one run from probes over the first invocations, and builds the backend's timer: ``perf_counter``
under a budget on the CPU, CUDA events around :data:`CUDA_LAUNCHES_PER_SAMPLE` launches per sample
(budget-gated per candidate) on the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DispatchError, TunerError
from ..driver.bind import bind_host_arrays, storage_buffers
from ..driver.dispatch import Grid, Kernel, Launch
from ..driver.geometry import flat_invocations, grid3
from ..driver.work import work_per_invocation
from .search_space import TUNABLE_BACKENDS
from .timers import (
    BackendTimer, Budget, BudgetedTimer, BudgetExhausted, CudaEventTimer, PerfCounterTimer, SafeTimer,
)

#: Back-to-back launches between the two CUDA events of one sample (amortises launch overhead).
CUDA_LAUNCHES_PER_SAMPLE = 3


def _length(obj: Any) -> int:
    if isinstance(obj, np.ndarray):
        return obj.size
    shape = getattr(obj, "shape", None)
    if shape is None:
        try:
            return len(obj)
        except TypeError:
            raise DispatchError(f"got a {type(obj).__name__}, which has no length or shape. Fix: pass a "
                                "numpy array (on the CPU) or a device array (CUDA)") from None
    n = 1
    for d in shape:
        n *= int(d)
    return n


def invocations_for(kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None) -> int:
    """How many invocations along x ``kernel(inputs, grid=grid)`` runs per row (what the launch
    knobs split; rows along y and z repeat it: geometry.flat_invocations)."""
    g = grid3(grid) if grid is not None else kernel.grid_for({k: _length(v) for k, v in inputs.items()})
    return flat_invocations(kernel.program, g)


def check_tunable(kernel: Kernel) -> None:
    """Raise :class:`TunerError` unless ``kernel`` is flat and on a backend with launch knobs."""
    if not kernel.flat or kernel.backend not in TUNABLE_BACKENDS:
        raise TunerError(
            f"kernel for backend {kernel.backend!r} is not tunable (flat={kernel.flat}): its results "
            "depend on the launch shape (workgroup/local ids, barriers, workgroup memory, subgroups "
            "or 2-D ids) or the backend has no launch knobs. Fix: tune a 1-D program that uses only "
            "invocation ids, on cpu or cuda")


class Harness:
    """Scratch buffers and a timer for one flat kernel, its inputs and grid.

    Buffers the program writes are copied (host copies on the CPU, device copies on CUDA) and
    restored from the caller's contents before every run; read-only inputs are shared. The
    caller's arrays are never written. Binding errors are the ones the real call would raise."""

    def __init__(self, kernel: Kernel, inputs: Mapping[str, Any], grid: Grid | None, *,
                 warmup: int = 1, repeats: int = 5) -> None:
        check_tunable(kernel)
        self.kernel = kernel
        self.warmup, self.repeats = warmup, repeats
        self.invocations = invocations_for(kernel, inputs, grid)
        self.grid = (-(-self.invocations // kernel.program.workgroup_size[0]), 1, 1)
        self._restore: list[tuple[Any, Any]] = []
        self.host = kernel.impl.memory == "host"
        if self.host:
            arrays = bind_host_arrays(kernel.program, inputs)
            self.args: dict[str, Any] = {}
            for b in storage_buffers(kernel.program):
                a = arrays[b.name]
                if b.access.writable:
                    s = a.copy()
                    self._restore.append((s, a))
                    a = s
                self.args[b.name] = a
        else:
            self._bind_device(inputs)

    def _bind_device(self, inputs: Mapping[str, Any]) -> None:
        from numba import cuda

        from ..driver.cuda_launch import device_arg

        self.dev_args: list[Any] = []
        for b in storage_buffers(self.kernel.program):
            src, _ = device_arg(b, inputs.get(b.name))
            if b.access.writable:
                scratch = cuda.device_array(src.shape, dtype=src.dtype)
                self._restore.append((scratch, src))
                src = scratch
            self.dev_args.append(src)

    def restore(self, _launch: Launch | None = None) -> None:
        """Reset every scratch buffer to the caller's contents."""
        for scratch, src in self._restore:
            if isinstance(scratch, np.ndarray):
                np.copyto(scratch, src)
            else:
                scratch.copy_to_device(src)

    def run(self, launch: Launch, invocations: int | None = None) -> None:
        """One run of ``launch`` on the scratch buffers (CUDA: enqueued, not synchronised);
        ``invocations`` (rounded up to whole workgroups) runs only the first ones (a probe)."""
        k = self.kernel
        n = self.invocations if invocations is None else min(self.invocations, invocations)
        if self.host:
            previous = k.launch
            k.launch = launch
            try:
                wg = k.program.workgroup_size[0]
                k(self.args, grid=self.grid if invocations is None else (-(-n // wg), 1, 1), tune=False)
            finally:
                k.launch = previous
        else:
            blocks = max(1, -(-n // (launch.wg * launch.ipt)))
            k._fn[blocks, launch.wg](*self.dev_args, n, launch.ipt)

    def sync(self) -> None:
        """Wait for the runs enqueued so far (a no-op where launches are synchronous: the CPU, the
        simulator)."""
        if self.kernel.impl.timer == "cuda-events":
            from numba import cuda

            cuda.synchronize()

    def estimate_seconds(self, launch: Launch, budget: Budget) -> float:
        """Wall time of one full run of ``launch``, estimated from runs over the first
        invocations only (4096, then 4x more until a run takes a millisecond or covers every
        invocation; the last size runs twice and the faster counts, so a one-time cost such as
        compiling the parallel entry is not taken for the kernel's), so that a kernel too slow to
        tune costs a small fraction of one run to find out. Assumes work spread evenly over the
        invocations."""
        n = self.invocations
        m = min(n, 4096)
        while True:
            t = self._probe(launch, m, budget)
            if m >= n or t >= 1e-3 or budget.left() <= 0:
                if budget.left() > t:
                    t = min(t, self._probe(launch, m, budget))
                return t * n / m
            m = min(n, m * 4)

    def warm(self, launch: Launch) -> None:
        """Pay the one-time costs the real dispatch would pay anyway, over a few invocations and
        outside any budget: loading the module into the GPU context, compiling the CPU's parallel
        entry (compiled on its first call) when the real run will take it. Without this a cold
        first dispatch charged them to the kernel and judged it too slow to tune."""
        k = self.kernel
        m = min(self.invocations, 4096)
        self.restore()
        if self.host:
            n = self.invocations
            if k._fn_parallel is not None and k._cpu_entry(n, True, work_per_invocation(k.program, self.args)) \
                    is k._fn_parallel:
                k._fn_parallel(*(self.args[b.name] for b in storage_buffers(k.program)), m, 1024)
            return
        self.run(launch, m)
        self.sync()

    def _probe(self, launch: Launch, m: int, budget: Budget) -> float:
        self.restore()
        self.sync()  # the restore's copies are not the kernel's time
        start = budget.clock()
        self.run(launch, m)
        self.sync()
        budget.runs += 1
        return budget.clock() - start

    def _sample(self, launch: Launch) -> None:
        for _ in range(CUDA_LAUNCHES_PER_SAMPLE):
            self.run(launch)

    def raw_timer(self, budget: Budget | None = None) -> BackendTimer[Launch]:
        """Median latency per run in nanoseconds; exceptions propagate. Under ``budget`` the
        search stops (:class:`BudgetExhausted`) when it is spent (see :class:`BudgetedTimer`)."""
        b = Budget(math.inf) if budget is None else budget
        if self.host:
            return BudgetedTimer(self.run, b, self.warmup, self.repeats, setup=self.restore)
        if self.kernel.impl.timer == "wall":  # the simulator runs synchronously; its events are fake
            return _Gated(_Scaled(PerfCounterTimer(self._sample, self.warmup, self.repeats, setup=self.restore),
                                  1.0 / CUDA_LAUNCHES_PER_SAMPLE), b)
        events = CudaEventTimer(self._sample, self.warmup, self.repeats, setup=self.restore)
        return _Gated(_Scaled(events, 1.0 / CUDA_LAUNCHES_PER_SAMPLE), b)

    def timer(self, budget: Budget | None = None) -> SafeTimer[Launch]:
        """:meth:`raw_timer` with failing candidates scored ``inf``."""
        return SafeTimer(self.raw_timer(budget))


@dataclass(frozen=True, slots=True)
class _Gated:
    """Stop the search before a candidate once the budget is spent (GPU timers, whose runs are
    short: the budget is checked per candidate, not per run)."""

    inner: BackendTimer[Launch]
    budget: Budget

    def time_ns(self, candidate: Launch) -> float:
        if self.budget.left() <= 0:
            raise BudgetExhausted
        return self.inner.time_ns(candidate)


@dataclass(frozen=True, slots=True)
class _Scaled:
    inner: BackendTimer[Launch]
    factor: float

    def time_ns(self, candidate: Launch) -> float:
        return float(self.inner.time_ns(candidate)) * self.factor
