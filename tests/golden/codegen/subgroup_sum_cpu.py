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
def _vy_seg0(_wg0, _wg1, _wg2, _arrays):
    b0_x, la1_v = _arrays
    _any = False
    for _l in range(64):
        _lid0 = uint32(_l)
        _lid1 = uint32(0)
        _lid2 = uint32(0)
        _gid0 = uint32(_wg0 * uint32(64) + _lid0)
        _gid1 = uint32(_wg1 * uint32(1) + _lid1)
        _gid2 = uint32(_wg2 * uint32(1) + _lid2)
        _lane = uint32((_l & _vy_k(int64(31))))
        la1_v[_l] = _vy_ld(b0_x, _gid0, float32(0))
    return _any


@numba.njit(cache=False, error_model='numpy')
def _vy_seg1(_wg0, _wg1, _wg2, _arrays):
    la1_v, la2_sgop_1 = _arrays
    _any = False
    for _l in range(64):
        _lid0 = uint32(_l)
        _lid1 = uint32(0)
        _lid2 = uint32(0)
        _gid0 = uint32(_wg0 * uint32(64) + _lid0)
        _gid1 = uint32(_wg1 * uint32(1) + _lid1)
        _gid2 = uint32(_wg2 * uint32(1) + _lid2)
        _lane = uint32((_l & _vy_k(int64(31))))
        la2_sgop_1[_l] = la1_v[_l]
    return _any


@numba.njit(cache=False, error_model='numpy')
def _vy_seg2(_wg0, _wg1, _wg2, _arrays):
    b1_out, la3_s = _arrays
    _any = False
    for _l in range(64):
        _lid0 = uint32(_l)
        _lid1 = uint32(0)
        _lid2 = uint32(0)
        _gid0 = uint32(_wg0 * uint32(64) + _lid0)
        _gid1 = uint32(_wg1 * uint32(1) + _lid1)
        _gid2 = uint32(_wg2 * uint32(1) + _lid2)
        _lane = uint32((_l & _vy_k(int64(31))))
        if (uint32(int64(_lid0) & int64(_vy_k(uint32(31)))) == uint32(0)):
            v4__old = _vy_at_add(b1_out, uint32(0), la3_s[_l], float32(0))
    return _any


@numba.njit(cache=False, error_model='numpy')
def _vy_workgroup(_w, _gx, _gy, _sbufs):
    b0_x, b1_out = _sbufs
    _wg0 = uint32(_w % _gx)
    _wg1 = uint32((_w // _gx) % _gy)
    _wg2 = uint32(_w // (_gx * _gy))
    la1_v = np.zeros(64, np.float32)
    la2_sgop_1 = np.zeros(64, np.float32)
    la3_s = np.zeros(64, np.float32)
    if _vy_seg0(_wg0, _wg1, _wg2, (b0_x, la1_v)):
        return
    if _vy_seg1(_wg0, _wg1, _wg2, (la1_v, la2_sgop_1)):
        return
    for _s in range(2):
        _b = _s * 32
        _acc = la2_sgop_1[_b]
        for _k in range(1, 32):
            _acc = (_acc + la2_sgop_1[_b + _k])
        for _k in range(32):
            la3_s[_b + _k] = _acc
    if _vy_seg2(_wg0, _wg1, _wg2, (b1_out, la3_s)):
        return


_SIG = _t.void(_t.Array(float32, 1, 'C', readonly=True), _t.Array(float32, 1, 'C', readonly=False), _t.int64, _t.int64, _t.int64)
@numba.njit(_SIG, cache=False, error_model='numpy')
def vyre_kernel(b0_x, b1_out, _gx, _gy, _gz):
    _sbufs = (b0_x, b1_out)
    for _w in range(_gx * _gy * _gz):
        _vy_workgroup(_w, _gx, _gy, _sbufs)


VYRE_FLAT = False
VYRE_PARALLEL = False
