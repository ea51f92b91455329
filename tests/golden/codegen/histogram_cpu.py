# vyre generated kernel: target cpu, codegen v22. Do not edit.
import math
import numba
import numpy as np
from numba import boolean, int32, int64, uint32, float32, float64
from numba import types as _t
from vyre.codegen.cpu_runtime import both as _vy_and, either as _vy_or, fmuladd as _vy_fma, opaque as _vy_k, select as _vy_sel, stack_array as _vy_stack

_dev = numba.njit(cache=False, error_model='numpy', inline='always')
# <vyre.codegen.prelude.PRELUDE>
# <vyre.codegen.cpu.CPU_PRELUDE>

@_dev
def _vy_sdiv_p2(a, k, negative_divisor):
    x = int64(a)
    q = abs(x) >> k
    if (x < 0) != negative_divisor:
        q = -q
    return int32(q)


@_dev
def _vy_smod_p2(a, mask):
    x = int64(a)
    r = abs(x) & mask
    if x < 0:
        r = -r
    return int32(r)



@numba.njit(cache=False, error_model='numpy')
def _vy_run(b0_keys, b1_counts, _lo, _hi):
    for _g in range(_lo, _hi):
        _gid0 = uint32(_g)
        _gid1 = uint32(0)
        _gid2 = uint32(0)
        v1_i = _gid0
        if (v1_i < uint32(b0_keys.shape[0])):
            v2__old = _vy_at_add(b1_counts, _vy_umod(b0_keys[v1_i], uint32(b1_counts.shape[0])), uint32(1), uint32(0))


_SIG = _t.void(_t.Array(uint32, 1, 'C', readonly=True), _t.Array(uint32, 1, 'C', readonly=False), _t.int64, _t.int64)
@numba.njit(_SIG, cache=False, error_model='numpy')
def vyre_kernel(b0_keys, b1_counts, _n, _chunk):
    _vy_run(b0_keys, b1_counts, int64(0), _n)


@numba.njit(cache=False, error_model='numpy')
def _vy_private_run(b0_keys, _q0, _lo, _hi):
    for _g in range(_lo, _hi):
        _gid0 = uint32(_g)
        _gid1 = uint32(0)
        _gid2 = uint32(0)
        v1_i = _gid0
        if (v1_i < uint32(b0_keys.shape[0])):
            v2__old = _vy_at_add(_q0, _vy_umod(b0_keys[v1_i], uint32(_q0.shape[0])), uint32(1), uint32(0))


@numba.njit(parallel=True, cache=False, error_model='numpy')
def vyre_kernel_parallel(b0_keys, b1_counts, _n, _chunk):
    _nc = (_n + _chunk - 1) // _chunk
    if _nc * (b1_counts.shape[0]) > 4194304:
        vyre_kernel(b0_keys, b1_counts, _n, _chunk)  # the copies would not pay for themselves
        return
    _q0_all = np.empty((_nc, b1_counts.shape[0]), b1_counts.dtype)
    for _c in numba.prange(_nc):
        _q0 = _q0_all[_c]
        _q0[:] = uint32(0)
        _lo = _c * _chunk
        _vy_private_run(b0_keys, _q0, int64(_lo), int64(min(_lo + _chunk, _n)))
    for _j in numba.prange(b1_counts.shape[0]):
        _acc = b1_counts[_j]
        for _k in range(_nc):
            _acc = uint32(_acc + _q0_all[_k, _j])
        b1_counts[_j] = _acc


VYRE_FLAT = True
VYRE_PARALLEL = True
