"""The tuner's search space and how its decisions are filed (:mod:`vyre.tuning.autotune`).

Launch candidates per backend (:func:`candidates`, see the autotune module's docs), the adapter
fingerprint decisions belong to (:func:`adapter_fingerprint`), the power-of-two size class and the
decision key of a program (:func:`program_key`), and a launch as the cache's ``[wg, ipt, 1]``
triple (:func:`encode_decision`, :func:`decode_decision`).
"""

from __future__ import annotations

import functools
import os
import platform

from ..errors import DispatchError, TunerError
from ..ir import Program
from ..driver.dispatch import Launch
from ..driver.launch_policy import MIN_TUNE_INVOCATIONS
from .tuner import StaticProgramShape, TunerProgramKey

CUDA_WORKGROUPS: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
CUDA_IPT: tuple[int, ...] = (1, 2, 4, 8, 16)
#: The CPU's unit of work: a parallel chunk is ``CPU_UNIT * ipt`` invocations.
CPU_UNIT = 1024
CPU_IPT: tuple[int, ...] = tuple(2**k for k in range(10))
#: Chunks finer than CPU_UNIT, offered below MIN_TUNE_INVOCATIONS (only heavy invocations are
#: tuned there: rows of a softmax).
CPU_SMALL_CHUNKS: tuple[int, ...] = (64, 256)
#: One chunk of 2^22 invocations: for problems up to that size, the serial entry.
CPU_SERIAL = Launch(CPU_UNIT, 4096)
_CUDA_LIKE = ("cuda", "cudasim")
#: Backends whose flat kernels have launch knobs.
TUNABLE_BACKENDS = ("cpu", *_CUDA_LIKE)
_U32_MAX = 2**32 - 1


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or "unknown"


@functools.cache
def adapter_fingerprint(backend: str) -> str:
    """A stable string naming the hardware that tuning results belong to.

    CPU: model, architecture and usable core count; CUDA: device name, compute capability and
    driver version; the simulator: a fixed name."""
    match backend:
        case "cpu":
            return f"cpu {_cpu_model()} {platform.machine()} x{_usable_cores()}"
        case "cuda":
            # the driver's answers (vyre/driver/cuda_driver.py), as numba gave them: no numba import
            from ..driver.cuda_driver import driver

            drv = driver()
            dev = drv.current_device()
            try:
                ver = ".".join(str(v) for v in drv.version())
            except Exception:  # an old or odd driver: the rest still identifies the GPU
                ver = "?"
            cc = "{}.{}".format(*drv.compute_capability(dev))
            return f"cuda {drv.name(dev)} sm {cc} driver {ver}"
        case "cudasim":
            return "cudasim numba simulator"
        case _:
            raise TunerError(f"backend {backend!r} has no tunable launch knobs (expected one of "
                             f"{', '.join(TUNABLE_BACKENDS)}). Fix: tune on cpu or cuda")


def candidates(backend: str, invocations: int) -> list[Launch]:
    """Launch candidates for ``invocations`` on ``backend`` (see :mod:`vyre.tuning.autotune`)."""
    if backend in _CUDA_LIKE:
        full = [Launch(w, i) for w in CUDA_WORKGROUPS for i in CUDA_IPT]
    elif backend == "cpu":
        # parallel chunks smaller than the problem, and one chunk covering it all: the serial
        # entry (CPU_SERIAL), which wins when the pool's wake-up costs more than it saves
        split = [Launch(CPU_UNIT, i) for i in CPU_IPT if CPU_UNIT * i < invocations]
        if invocations < MIN_TUNE_INVOCATIONS:  # few heavy invocations (tuned for their work): finer chunks
            split = [Launch(c, 1) for c in CPU_SMALL_CHUNKS if c < invocations] + split
        return [*split, CPU_SERIAL] if invocations <= CPU_SERIAL.wg * CPU_SERIAL.ipt else split
    else:
        adapter_fingerprint(backend)  # raises the error that names the backends
        raise AssertionError(backend)
    keep = [c for c in full if c.wg * c.ipt <= 2 * invocations]
    return keep or [min(full, key=lambda c: (c.wg * c.ipt, c.wg))]


def size_class(invocations: int) -> int:
    """Power-of-two bucket: class ``k`` holds ``2**(k-1) <= invocations < 2**k``."""
    return max(1, int(invocations)).bit_length()


def program_key(program: Program, invocations: int) -> TunerProgramKey:
    """The decision key: the seed's key with the workgroup-count field set to the number of
    declared workgroups of the size class's upper bound, ``ceil(2**k / workgroup_x)``."""
    wg = program.workgroup_size
    count = min(-(-(1 << size_class(invocations)) // wg[0]), _U32_MAX)
    return TunerProgramKey.from_program(program, StaticProgramShape(wg, (count, 1, 1)))


def encode_decision(launch: Launch) -> tuple[int, int, int]:
    """A launch as the tuner cache's triple ``[wg, ipt, 1]``."""
    return (launch.wg, launch.ipt, 1)


def decode_decision(triple: tuple[int, int, int] | None) -> Launch | None:
    """The launch a cached triple stands for, or None when it is not ``[wg, ipt, 1]`` with valid
    knobs (a decision written by something else: ignored, the program is re-tuned)."""
    if triple is None or triple[2] != 1:
        return None
    try:
        return Launch(triple[0], triple[1])
    except DispatchError:
        return None
