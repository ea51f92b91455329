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
def _vy_groups(b0_out, _gx, _gy, _gz, _lo, _hi):
    _w0 = 0
    _w1 = 0
    _w2 = 0
    if _lo != 0:
        _w0 = _lo % _gx
        _w1 = (_lo // _gx) % _gy
        _w2 = _lo // (_gx * _gy)
    for _w in range(_lo, _hi):
        _wg0 = uint32(_w0)
        _wg1 = uint32(_w1)
        _wg2 = uint32(_w2)
        for _l in range(64):
            _lid0 = uint32(_l)
            _lid1 = uint32(0)
            _lid2 = uint32(0)
            _gid0 = uint32(_wg0 * uint32(64) + _lid0)
            _gid1 = uint32(_wg1 * uint32(1) + _lid1)
            _gid2 = uint32(_wg2 * uint32(1) + _lid2)
            _lane = uint32((_l & _vy_k(int64(31))))
            _i1 = _gid0
            if _i1 < b0_out.shape[0]:
                b0_out[_i1] = _wg0
        _w0 += 1
        if _w0 == _gx:
            _w0 = 0
            _w1 += 1
            if _w1 == _gy:
                _w1 = 0
                _w2 += 1


_SIG = _t.void(_t.Array(uint32, 1, 'C', readonly=False), _t.int64, _t.int64, _t.int64)
@numba.njit(_SIG, cache=False, error_model='numpy')
def vyre_kernel(b0_out, _gx, _gy, _gz):
    _vy_groups(b0_out, _gx, _gy, _gz, int64(0), _gx * _gy * _gz)


@numba.njit(parallel=True, cache=False, error_model='numpy')
def vyre_kernel_parallel(b0_out, _gx, _gy, _gz):
    _nw = _gx * _gy * _gz
    _nc = min(_nw, 256)
    for _c in numba.prange(_nc):
        _vy_groups(b0_out, _gx, _gy, _gz, int64(_c * _nw // _nc), int64((_c + 1) * _nw // _nc))


VYRE_FLAT = False
VYRE_PARALLEL = True
