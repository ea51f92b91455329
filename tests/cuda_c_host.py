"""Runs the NVRTC route's C++ kernels (vyre/codegen/cuda_c.py) on the host, to hold their
semantics to the reference interpreter without a GPU.

The printed source is compiled by the host's C++ compiler against a small shim of the CUDA
built-ins it uses: flat kernels block by block and thread by thread (each running its
invocations, interleaved where the kernel interleaves them), under several launches; other kernels
workgroup by workgroup with a host thread per invocation, ``__syncthreads`` a barrier of the
workgroup, warp shuffles and ballots exchanges between the 32 threads of a warp, workgroup memory
one zero-filled array per workgroup, atomics under a lock. So integer wrapping, the division and
shift rules, casts, bounds checks, select, loops, atomics, barriers and subgroup operations all run
as printed. What the shim cannot show -- the warp-aggregated adds' whole-warp path (``__activemask``
never reports a full warp here), NVRTC's own code generation, libdevice's transcendentals -- is the
GPU parity run's (bench/gpu_bench.py ``parity``).
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from vyre.codegen.c_ops import C_ELEM
from vyre.codegen.cuda_c import emit_cuda_c
from vyre.ir import Program

CXX = shutil.which("g++") or shutil.which("clang++")

SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
using std::fabs; using std::sqrt; using std::exp; using std::exp2; using std::log; using std::log2;
using std::sin; using std::cos; using std::tan; using std::asin; using std::acos; using std::atan;
using std::sinh; using std::cosh; using std::tanh; using std::floor; using std::ceil; using std::rint;
using std::trunc; using std::pow; using std::fmod;
#define __device__
#define __global__
#define __forceinline__ inline
#define VY_ASM(...)
struct vy_dim3 { unsigned x, y, z; };
static thread_local vy_dim3 threadIdx, blockIdx;
static vy_dim3 blockDim, gridDim;
static std::mutex vy_atomics, vy_wg_lock;
static long long vy_block_gen = 0;
static std::barrier<>* vy_block_barrier = nullptr;
struct vy_warp { std::barrier<>* bar; long long slots[32]; };
static std::vector<vy_warp> vy_warps;
inline unsigned vy_lin() { return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y; }
inline void __syncthreads() { vy_block_barrier->arrive_and_wait(); }
/* a warp's exchange: every lane posts its value, all wait, each reads lane `src`'s, all wait */
template <class T> T vy_exchange(T v, int src) {
    vy_warp& w = vy_warps[vy_lin() / 32];
    long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    w.slots[vy_lin() % 32] = bits;
    w.bar->arrive_and_wait();
    long long got = w.slots[src & 31];
    w.bar->arrive_and_wait();
    T out;
    std::memcpy(&out, &got, sizeof(T));
    return out;
}
template <class T> T __shfl_sync(unsigned, T v, int src) { return vy_exchange(v, src); }
inline unsigned __ballot_sync(unsigned, int p) {
    unsigned r = 0;
    for (int k = 0; k < 32; ++k) r |= vy_exchange<int>(p ? 1 : 0, k) ? (1u << k) : 0u;
    return r;
}
/* never a whole warp: the aggregated adds take their plain path (the GPU parity run checks the other) */
inline unsigned __activemask() { return 1u; }
inline unsigned __match_any_sync(unsigned, long long) { return 1u << (vy_lin() & 31u); }
template <class T> T __shfl_down_sync(unsigned, T v, int) { return v; }
inline int __all_sync(unsigned, int p) { return p; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
/* workgroup memory: one array per declaration, zero-filled once per workgroup (as the interpreter) */
template <class T, int N, int ID> T* vy_wg_buf() {
    static T buf[N];
    static long long gen = -1;
    std::lock_guard<std::mutex> g(vy_wg_lock);
    if (gen != vy_block_gen) { std::memset((void*)buf, 0, sizeof buf); gen = vy_block_gen; }
    return buf;
}
template <class T> struct vy_bits { typedef T type; };
template <> struct vy_bits<int> { typedef unsigned type; };
#define VY_ATOMIC(name, update) template <class T> T name(T* p, T v) { \
    std::lock_guard<std::mutex> g(vy_atomics); T o = *p; update; return o; }
VY_ATOMIC(atomicAdd, *p = (T)((typename vy_bits<T>::type)o + (typename vy_bits<T>::type)v))
VY_ATOMIC(atomicMin, if (v < o) *p = v)
VY_ATOMIC(atomicMax, if (v > o) *p = v)
VY_ATOMIC(atomicAnd, *p = o & v)
VY_ATOMIC(atomicOr, *p = o | v)
VY_ATOMIC(atomicXor, *p = o ^ v)
VY_ATOMIC(atomicExch, *p = v)
template <class T> T atomicCAS(T* p, T e, T v) {
    std::lock_guard<std::mutex> g(vy_atomics); T o = *p; if (o == e) *p = v; return o;
}
template <class F>
void vy_run_blocks(unsigned gx, unsigned gy, unsigned gz, unsigned wx, unsigned wy, unsigned wz, F kernel) {
    blockDim = {wx, wy, wz};
    gridDim = {gx, gy, gz};
    unsigned n = wx * wy * wz;
    for (unsigned bz = 0; bz < gz; ++bz) for (unsigned by = 0; by < gy; ++by) for (unsigned bx = 0; bx < gx; ++bx) {
        ++vy_block_gen;
        std::barrier<> block(n);
        vy_block_barrier = &block;
        std::vector<std::barrier<>*> bars;
        vy_warps.assign((n + 31) / 32, vy_warp{});
        for (unsigned w = 0; w < vy_warps.size(); ++w) {
            bars.push_back(new std::barrier<>(n - 32 * w < 32 ? n - 32 * w : 32));
            vy_warps[w].bar = bars.back();
        }
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < n; ++t)
            threads.emplace_back([=] {
                blockIdx = {bx, by, bz};
                threadIdx = {t % wx, (t / wx) % wy, t / (wx * wy)};
                kernel();
            });
        for (auto& th : threads) th.join();
        for (auto* b : bars) delete b;
    }
}
"""


def _unit(i: int, program: Program) -> tuple[str, bool]:
    k = emit_cuda_c(program)
    src = k.source.replace('extern "C" __global__ void vyre_kernel(', "void vyre_kernel(")
    src = src.replace('asm volatile("mov.u32 %0, %%laneid;" : "=r"(r));', "r = vy_lin() & 31u;")
    src = src.replace('asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(r));', "r = (1u << (vy_lin() & 31u)) - 1u;")
    src = src.replace("asm(", "VY_ASM(")
    decls = iter(range(1 << 20))  # one array per declaration: the template's id is unique in the library
    src = re.sub(r"__shared__ (.+?) (\w+)\[(\d+)\];",
                 lambda m: f"{m[1]}* {m[2]} = vy_wg_buf<{m[1]}, {m[3]}, {1000 * i + next(decls)}>();", src)
    storage = [b for b in program.buffers if not b.is_workgroup]
    args: list[str] = []
    for j, b in enumerate(storage):
        base = 7 * j
        args += [f"(void*)a[{base}]", f"(void*)a[{base + 1}]", f"a[{base + 2}]", f"a[{base + 3}]",
                 f"({C_ELEM[b.element]}*)a[{base + 4}]", f"a[{base + 5}]", f"a[{base + 6}]"]
    m = 7 * len(storage)
    call = f"k{i}::vyre_kernel({', '.join([*args, f'a[{m}]', f'a[{m + 1}]'] if k.flat else args)});"
    wx, wy, wz = program.workgroup_size
    if k.flat:  # gx blocks of gy threads, one after the other; gz rows (the y and z rows repeat the x-row)
        body = ("blockDim = {gy, 1u, 1u}; gridDim = {gx, 1u, 1u};\n"
                "    for (unsigned r = 0; r < gz; ++r) for (unsigned b = 0; b < gx; ++b)\n"
                "    for (unsigned t = 0; t < gy; ++t) {\n"
                f"        blockIdx = {{b, 0u, 0u}}; threadIdx = {{t, 0u, 0u}}; {call}\n    }}")
    else:  # workgroup by workgroup, a thread per invocation
        body = f"vy_run_blocks(gx, gy, gz, {wx}u, {wy}u, {wz}u, [=] {{ {call} }});"
    return (f"namespace k{i} {{\n{src}\n}}\n"
            f'extern "C" void vy_run_{i}(const long long* a, unsigned gx, unsigned gy, unsigned gz) {{\n'
            f"    {body}\n}}\n"), k.flat


class HostKernels:
    """``programs`` compiled into one host library; :meth:`run` runs one like ``Kernel.__call__``."""

    def __init__(self, programs: Sequence[Program], workdir: Path | None = None) -> None:
        if CXX is None:
            raise RuntimeError("no host C++ compiler (g++ or clang++)")
        self.programs = list(programs)
        units = [_unit(i, p) for i, p in enumerate(self.programs)]
        self.flat = [f for _, f in units]
        d = Path(workdir or tempfile.mkdtemp(prefix="vyre-cuda-c-host-"))
        cpp, so = d / "kernels.cpp", d / "kernels.so"
        cpp.write_text(SHIM + "\n".join(u for u, _ in units))
        # no contraction, no fast math: IEEE operations one at a time, as the interpreter does them; no
        # -fwrapv: the printed code must not rely on signed overflow, and the optimiser may exploit it
        flags = ["-std=c++20", "-pthread", "-O1", "-ffp-contract=off", "-fno-fast-math", "-w", "-shared", "-fPIC"]
        out = subprocess.run([CXX, *flags, "-o", str(so), str(cpp)], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"the host compiler refused the printed kernels:\n{out.stderr[-6000:]}")
        self.lib = ctypes.CDLL(str(so))

    def run(self, i: int, arrays: Mapping[str, np.ndarray], grid: object = None,
            launch: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
        """One dispatch of program ``i``; a flat kernel with ``launch`` = (threads per block,
        invocations per thread), default one thread running them all."""
        from vyre.driver.geometry import flat_invocations, grid3
        from vyre.driver.dispatch import compile as vcompile

        program = self.programs[i]
        storage = [b for b in program.buffers if not b.is_workgroup]
        bufs: dict[str, np.ndarray] = {}
        for b in storage:
            a = arrays.get(b.name)
            dt = b.element.np_dtype
            bufs[b.name] = (np.zeros(b.count, dt) if a is None else np.array(a, dt, copy=True)).reshape(-1)
        kernel = vcompile(program, "interp")
        g = grid3(grid) if grid is not None else kernel.grid_for({k: v.size for k, v in bufs.items()})
        vals: list[int] = []
        for b in storage:
            a = bufs[b.name]
            vals += [0, 0, a.size, a.itemsize, a.ctypes.data if a.size else 0, a.size, a.itemsize]
        dims = g
        if self.flat[i]:
            n = flat_invocations(program, g)
            wg, ipt = launch or (1, max(1, n))
            vals += [n, ipt]
            dims = (max(1, -(-n // (wg * ipt))), wg, g[1] * g[2])
        packed = (ctypes.c_longlong * max(1, len(vals)))(*vals)
        getattr(self.lib, f"vy_run_{i}")(packed, *(ctypes.c_uint(d) for d in dims))
        return {b.name: bufs[b.name] for b in storage if b.access.writable}


def host_parity(count: int) -> None:
    """Prints one JSON line per case: generated programs (barriers, subgroups, atomics; exact
    floats), flat generated ones, op tables, examples, integer edge cases, the index family."""
    import json
    import warnings

    from tests import int_edge_cases, optable
    from tests.backend_runner import cases, flat_generated_cases, generated_cases
    from tests.interleave_cases import interleave_cases
    from tests.parity import differences
    from tests.test_cpu_index_family import family_cases
    from vyre.driver.dispatch import compile as vcompile

    warnings.simplefilter("ignore")
    todo: list[tuple[str, Program, dict[str, np.ndarray], object, object]] = list(cases())
    todo += [(n, p, a, g, None) for n, p, a, g, _ in generated_cases(count)]
    todo += [(n, p, a, g, None) for n, p, a, g in flat_generated_cases(count)]
    todo += [(n, p, a, None, None) for n, p, a in int_edge_cases.cases()]
    todo += [(n, p, a, g, None) for n, p, a, g, _ in family_cases(6)]
    todo += [(f"interleave_{n}", p, a, None, None) for n, p, a in interleave_cases()]
    kernels = HostKernels([t[1] for t in todo])
    for i, (name, prog, arrays, grid, layout) in enumerate(todo):
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
        problems: list[str] = []
        # flat kernels also under launches that interleave (vyre/codegen/interleave.py), cut groups
        # short and leave threads idle, as tests/backend_runner.py's interleave mode does
        for launch in [None, (4, 4), (3, 9), (8, 1)] if kernels.flat[i] else [None]:
            got = kernels.run(i, arrays, grid, launch)
            if layout is not None:
                found = optable.compare(name, got, ref, layout, len(next(iter(arrays.values()))))
            else:  # the examples' floats may round differently (host libm); the rest is exact
                found = differences(got, ref, exact=not name.startswith("example_"))
            problems += [f"{launch}: {p}" for p in found]
        print(json.dumps({"case": name, "problems": problems}), flush=True)
