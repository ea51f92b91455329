"""A check, at the first CPU compile, that this machine's numba and LLVM compile vyre's kernels right.

LLVM's loop vectoriser miscompiles a family of integer indices (``x[gid % 4]`` next to
``out[gid]``; vyre/codegen/cpu_narrow.py) on numba 0.68.1 / llvmlite 0.50 / LLVM 22.1, and the
emitter keeps its kernels out of that family. Toolchains we have not seen may fail differently, so
the first CPU compile of a process compiles two things and runs them on 128 invocations:

* the plain numba reproducer of the report (no vyre code), which says whether this LLVM has the
  bug at all (``SelfCheck.llvm_miscompiles``, shown by ``vyre info``);
* vyre's own CPU kernels for the same family (``x[gid % 4]``, ``x[gid & 7]``, an atomic count into
  ``hist[gid & 3]`` next to a strided store), compared with the values they must produce.

When a vyre kernel comes out wrong, vyre warns once per process (:class:`CpuMiscompileWarning`) and
compiles every CPU kernel in *safe mode*: numba's loop vectoriser off while the module's kernels
compile (all of them eagerly; ``emit_cpu(vectorize=False)``). Slower, never wrong in this way.
The result is kept on disk per toolchain and CPU (``<cache>/selfcheck/``), so the check costs one
compile per machine, not per process; a file that cannot be read is ignored and rewritten.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..codegen.emit import CODEGEN_VERSION
from ..settings import cache_root


class CpuMiscompileWarning(RuntimeWarning):
    """This machine's numba/LLVM compiled one of vyre's CPU check kernels wrong; vyre fell back to
    compiling CPU kernels without the loop vectoriser."""


@dataclass(frozen=True)
class SelfCheck:
    llvm_miscompiles: bool  # the plain numba reproducer of the vectoriser bug gives a wrong answer
    vectorize: bool  # vyre's CPU kernels came out right with the vectoriser on
    detail: str  # which check failed, and how


#: The report's reproducer in plain numba: ``out[g] = x[g % 4]`` over 128 invocations.
RAW_REPRODUCER = '''
import numba
from numba import int64, uint32


@numba.njit
def repro(x, out, n):
    for g in range(n):
        g0 = uint32(g)
        i = uint32(int64(g0) % int64(uint32(4)))
        if i < x.shape[0]:
            out[g0] = x[i]
'''

_N = 128
_lock = threading.Lock()
_result: SelfCheck | None = None


def cpu_selfcheck() -> SelfCheck:
    """The check's result for this process (run, or read from disk, on the first call)."""
    global _result
    with _lock:
        if _result is None:
            _result = _load_or_run()
            if not _result.vectorize:
                warnings.warn(
                    f"vyre: this machine's numba/LLVM ({_toolchain()}) miscompiled vyre's CPU check "
                    f"kernels ({_result.detail}). CPU kernels are now compiled with numba's loop vectoriser "
                    "off (correct, slower). Fix: use numba 0.61 / llvmlite 0.44 or a release with the LLVM fix "
                    "(README 'Known limits'), and please report this toolchain",
                    CpuMiscompileWarning, stacklevel=3)
        return _result


def vectorize_ok() -> bool:
    """May CPU kernels be compiled with the loop vectoriser on?"""
    return cpu_selfcheck().vectorize


def reset() -> None:
    """Forget this process's result (tests)."""
    global _result
    with _lock:
        _result = None


def _toolchain() -> str:
    import llvmlite
    import llvmlite.binding as llvm
    import numba

    return (f"numba {numba.__version__}, llvmlite {llvmlite.__version__}, "
            f"LLVM {'.'.join(map(str, llvm.llvm_version_info))}, CPU {llvm.get_host_cpu_name()}")


def _record_path() -> Path:
    import blake3
    import llvmlite.binding as llvm

    key = blake3.blake3(f"{_toolchain()}|{llvm.get_host_cpu_features().flatten()}|v{CODEGEN_VERSION}"
                        .encode()).hexdigest()[:32]
    return cache_root() / "selfcheck" / f"cpu-{key}.json"


def _load_or_run() -> SelfCheck:
    path = _record_path()
    try:
        return SelfCheck(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass  # missing or unreadable: check again
    result = run_checks()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(result), f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the check again next time
    return result


def run_checks() -> SelfCheck:
    """Compile and run the reproducer and vyre's check kernels (about a second)."""
    raw = _raw_reproducer_wrong()
    failures = [name for name, ok in _vyre_kernels() if not ok]
    detail = f"wrong: {', '.join(failures)}" if failures else "vyre's check kernels are right"
    return SelfCheck(llvm_miscompiles=raw, vectorize=not failures, detail=detail)


def _raw_reproducer_wrong() -> bool:
    ns: dict[str, object] = {}
    exec(compile(RAW_REPRODUCER, "<vyre cpu self-check>", "exec"), ns)
    x = np.array([10, 11, 12, 13], np.uint32)
    out = np.zeros(_N, np.uint32)
    ns["repro"](x, out, _N)  # type: ignore[operator]
    return not np.array_equal(out, np.tile(x, _N // 4))


def _vyre_kernels() -> list[tuple[str, bool]]:
    """(name, came out right) for each of vyre's check kernels, compiled as dispatch would."""
    from ..codegen.cpu import emit_cpu
    from ..ir import U32, Program, atomic_add, gid, let, output, read, store, u32
    from . import cache

    x, out, hist = read("x", 0, U32), output("out", 1, U32), output("hist", 2, U32)
    g = gid()
    xs = np.array([10, 11, 12, 13], np.uint32)
    idx = np.arange(_N)
    tail = np.full(8, 0xDEAD, np.uint32)  # canaries: a write past a buffer's end changes them
    checks: list[tuple[str, Program, dict[str, np.ndarray]]] = [
        ("x[gid % 4]", Program.wrapped([x, out], 64, [store(out, g, x[g % u32(4)])]),
         {"out": np.tile(xs, _N // 4)}),
        ("x[gid & 7]", Program.wrapped([x, out], 64, [store(out, g, x[g & u32(7)])]),
         {"out": np.where(idx % 8 < 4, xs[idx % 4], 0).astype(np.uint32)}),
        ("atomic hist[gid & 3]", Program.wrapped([x, out, hist], 64, [
            let("old", atomic_add(hist, g & u32(3), u32(1))), store(out, g * u32(3), u32(1))]),
         {"hist": np.full(4, _N // 4, np.uint32),
          "out": np.array([1 if i % 3 == 0 else 0 for i in range(_N)], np.uint32)}),
    ]
    results = []
    for name, prog, want in checks:
        source = emit_cpu(prog, parallel=False)
        mod, _ = cache.load_module("cpu", f"selfcheck-{name}", source, use_disk=False)
        arrays = {"x": xs, "out": np.zeros(_N, np.uint32), "hist": np.zeros(4, np.uint32)}
        wholes = {k: np.concatenate([v, tail]) for k, v in arrays.items()}
        args = [wholes[b.name][: len(arrays[b.name])] for b in prog.buffers]
        mod.vyre_kernel(*args, _N, _N)
        ok = all(np.array_equal(wholes[k][: len(v)], v) for k, v in want.items())
        ok = ok and all((w[len(arrays[k]):] == tail).all() for k, w in wholes.items())
        results.append((name, ok))
    return results
