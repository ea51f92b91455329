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
    b0_x, s0_tile, la1_i = _arrays
    _any = False
    for _l in range(256):
        _lid0 = uint32(_l)
        _lid1 = uint32(0)
        _lid2 = uint32(0)
        _gid0 = uint32(_wg0 * uint32(256) + _lid0)
        _gid1 = uint32(_wg1 * uint32(1) + _lid1)
        _gid2 = uint32(_wg2 * uint32(1) + _lid2)
        _lane = uint32((_l & _vy_k(int64(31))))
        la1_i[_l] = _gid0
        s0_tile[_lid0] = _vy_ld(b0_x, la1_i[_l], float32(0))
    return _any


@numba.njit(cache=False, error_model='numpy')
def _vy_seg1(_wg0, _wg1, _wg2, _arrays, v3_k):
    s0_tile, la4_s = _arrays
    _any = False
    for _l in range(256):
        _lid0 = uint32(_l)
        _lid1 = uint32(0)
        _lid2 = uint32(0)
        _gid0 = uint32(_wg0 * uint32(256) + _lid0)
        _gid1 = uint32(_wg1 * uint32(1) + _lid1)
        _gid2 = uint32(_wg2 * uint32(1) + _lid2)
        _lane = uint32((_l & _vy_k(int64(31))))
        la4_s[_l] = uint32(int64(uint32(128)) >> (int64(v3_k) & 31))
        if (_lid0 < la4_s[_l]):
            s0_tile[_lid0] = (s0_tile[_lid0] + _vy_ld(s0_tile, uint32(_lid0 + la4_s[_l]), float32(0)))
    return _any


@numba.njit(cache=False, error_model='numpy')
def _vy_seg2(_wg0, _wg1, _wg2, _arrays):
    b1_out, s0_tile = _arrays
    _any = False
    for _l in range(256):
        _lid0 = uint32(_l)
        _lid1 = uint32(0)
        _lid2 = uint32(0)
        _gid0 = uint32(_wg0 * uint32(256) + _lid0)
        _gid1 = uint32(_wg1 * uint32(1) + _lid1)
        _gid2 = uint32(_wg2 * uint32(1) + _lid2)
        _lane = uint32((_l & _vy_k(int64(31))))
        if (_lid0 == uint32(0)):
            v5__old = _vy_at_add(b1_out, uint32(0), s0_tile[uint32(0)], float32(0))
    return _any


@numba.njit(cache=False, error_model='numpy')
def _vy_workgroup(_w, _gx, _gy, _sbufs):
    b0_x, b1_out = _sbufs
    _wg0 = uint32(_w % _gx)
    _wg1 = uint32((_w // _gx) % _gy)
    _wg2 = uint32(_w // (_gx * _gy))
    s0_tile = np.zeros(256, np.float32)
    la1_i = np.zeros(256, np.uint32)
    la4_s = np.zeros(256, np.uint32)
    if _vy_seg0(_wg0, _wg1, _wg2, (b0_x, s0_tile, la1_i)):
        return
    for _it2 in range(int64(uint32(0)), int64(uint32(8))):
        v3_k = uint32(_it2)
        if _vy_seg1(_wg0, _wg1, _wg2, (s0_tile, la4_s), v3_k):
            return
    if _vy_seg2(_wg0, _wg1, _wg2, (b1_out, s0_tile)):
        return


_SIG = _t.void(_t.Array(float32, 1, 'C', readonly=True), _t.Array(float32, 1, 'C', readonly=False), _t.int64, _t.int64, _t.int64)
@numba.njit(_SIG, cache=False, error_model='numpy')
def vyre_kernel(b0_x, b1_out, _gx, _gy, _gz):
    _sbufs = (b0_x, b1_out)
    for _w in range(_gx * _gy * _gz):
        _vy_workgroup(_w, _gx, _gy, _sbufs)


VYRE_FLAT = False
VYRE_PARALLEL = False
