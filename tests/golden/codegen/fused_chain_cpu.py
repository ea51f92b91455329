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
def _vy_run(b0_x, b1_y, b2_out, _lo, _hi):
    for _g in range(_lo, _hi):
        _gid0 = uint32(_g)
        _gid1 = uint32(0)
        _gid2 = uint32(0)
        v1_i = _gid0
        if (v1_i < uint32(b2_out.shape[0])):
            v2_xi = _vy_ld(b0_x, v1_i, float32(0))
            b2_out[v1_i] = ((_vy_f32_exp(v2_xi) * _vy_ld(b1_y, v1_i, float32(0))) + (_vy_f32_sin(v2_xi) * v2_xi))


_SIG = _t.void(_t.Array(float32, 1, 'C', readonly=True), _t.Array(float32, 1, 'C', readonly=True), _t.Array(float32, 1, 'C', readonly=False), _t.int64, _t.int64)
@numba.njit(_SIG, cache=False, error_model='numpy')
def vyre_kernel(b0_x, b1_y, b2_out, _n, _chunk):
    _vy_run(b0_x, b1_y, b2_out, int64(0), _n)


@numba.njit(parallel=True, cache=False, error_model='numpy')
def vyre_kernel_parallel(b0_x, b1_y, b2_out, _n, _chunk):
    _nc = (_n + _chunk - 1) // _chunk
    for _c in numba.prange(_nc):
        _lo = _c * _chunk
        _vy_run(b0_x, b1_y, b2_out, int64(_lo), int64(min(_lo + _chunk, _n)))


VYRE_FLAT = True
VYRE_PARALLEL = True
