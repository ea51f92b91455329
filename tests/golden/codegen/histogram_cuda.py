# vyre generated kernel: target cuda, codegen v9. Do not edit.
import math
from numba import cuda, boolean, int32, int64, uint32, float32, float64

_dev = cuda.jit(device=True)


def _vy_fmod(a, b):
    return math.fmod(a, b)


_vy_fmod = _dev(_vy_fmod)


def _vy_f32_exp(a):
    return math.exp(a)


_vy_f32_exp = _dev(_vy_f32_exp)


def _vy_f32_exp2(a):
    return math.exp2(a)


_vy_f32_exp2 = _dev(_vy_f32_exp2)


def _vy_f32_log(a):
    return math.log(a)


_vy_f32_log = _dev(_vy_f32_log)


def _vy_f32_log2(a):
    return math.log2(a)


_vy_f32_log2 = _dev(_vy_f32_log2)


def _vy_f32_tanh(a):
    return math.tanh(a)


_vy_f32_tanh = _dev(_vy_f32_tanh)


def _vy_f32_sinh(a):
    return math.sinh(a)


_vy_f32_sinh = _dev(_vy_f32_sinh)


def _vy_f32_cosh(a):
    return math.cosh(a)


_vy_f32_cosh = _dev(_vy_f32_cosh)


def _vy_f32_sin(a):
    return math.sin(a)


_vy_f32_sin = _dev(_vy_f32_sin)


def _vy_f32_cos(a):
    return math.cos(a)


_vy_f32_cos = _dev(_vy_f32_cos)


def _vy_f32_tan(a):
    return math.tan(a)


_vy_f32_tan = _dev(_vy_f32_tan)


def _vy_warp_add(buf, idx, val, zero, site):
    mask = cuda.activemask()
    if mask == 0xFFFFFFFF:
        key = int64(idx) | (site << 32)
        if cuda.all_sync(mask, cuda.shfl_sync(mask, key, 0) == key):
            v = val
            v += cuda.shfl_down_sync(mask, v, 16)
            v += cuda.shfl_down_sync(mask, v, 8)
            v += cuda.shfl_down_sync(mask, v, 4)
            v += cuda.shfl_down_sync(mask, v, 2)
            v += cuda.shfl_down_sync(mask, v, 1)
            if cuda.laneid == 0 and idx < buf.shape[0]:
                cuda.atomic.add(buf, idx, v)
            return zero
    if idx < buf.shape[0]:
        cuda.atomic.add(buf, idx, val)
    return zero


_vy_warp_add = _dev(_vy_warp_add)


def _vy_warp_count(buf, idx, val, zero, site):
    mask = cuda.activemask()
    key = int64(idx) | (site << 32)
    peers = cuda.match_any_sync(mask, key)
    if (peers & cuda.lanemask_lt()) == 0 and idx < buf.shape[0]:
        cuda.atomic.add(buf, idx, val * cuda.popc(peers))  # wraps to the element type, as n adds would
    return zero


_vy_warp_count = _dev(_vy_warp_count)
# <vyre.codegen.prelude.PRELUDE>


def _vy_invocation_py(_gid0, b0_keys, b1_counts):
    _gid1 = uint32(0)
    _gid2 = uint32(0)
    v1_i = _gid0
    if (v1_i < uint32(b0_keys.shape[0])):
        v2__old = _vy_warp_count(b1_counts, _vy_umod(b0_keys[v1_i], uint32(b1_counts.shape[0])), uint32(1), uint32(0), int64(1))


_vy_invocation = _dev(_vy_invocation_py)


def _vy_interleaved_py(_g, _stride, b0_keys, b1_counts):
    _gid1 = uint32(0)
    _gid2 = uint32(0)
    _gid0_0 = uint32(_g + 0 * _stride)
    _gid0_1 = uint32(_g + 1 * _stride)
    _gid0_2 = uint32(_g + 2 * _stride)
    _gid0_3 = uint32(_g + 3 * _stride)
    v3_i = _gid0_0
    v4_i = _gid0_1
    v5_i = _gid0_2
    v6_i = _gid0_3
    _c7 = (v3_i < uint32(b0_keys.shape[0]))
    _c8 = (v4_i < uint32(b0_keys.shape[0]))
    _c9 = (v5_i < uint32(b0_keys.shape[0]))
    _c10 = (v6_i < uint32(b0_keys.shape[0]))
    if _c7 and _c8 and _c9 and _c10:
        v11__old = _vy_warp_count(b1_counts, _vy_umod(b0_keys[v3_i], uint32(b1_counts.shape[0])), uint32(1), uint32(0), int64(2))
        v12__old = _vy_warp_count(b1_counts, _vy_umod(b0_keys[v4_i], uint32(b1_counts.shape[0])), uint32(1), uint32(0), int64(3))
        v13__old = _vy_warp_count(b1_counts, _vy_umod(b0_keys[v5_i], uint32(b1_counts.shape[0])), uint32(1), uint32(0), int64(4))
        v14__old = _vy_warp_count(b1_counts, _vy_umod(b0_keys[v6_i], uint32(b1_counts.shape[0])), uint32(1), uint32(0), int64(5))
    elif not (_c7 or _c8 or _c9 or _c10):
        pass
    else:
        for _q in range(4):
            _vy_invocation(uint32(_g + _q * _stride), b0_keys, b1_counts)
        return


_vy_interleaved = _dev(_vy_interleaved_py)


def vyre_kernel_py(b0_keys, b1_counts, _n, _ipt):
    _t = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)
    _stride = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)
    _j = int64(0)
    while _j + 4 <= _ipt and _t + (_j + 3) * _stride < _n:
        _vy_interleaved(_t + _j * _stride, _stride, b0_keys, b1_counts)
        _j += 4
    while _j < _ipt:
        _g = _t + _j * _stride
        if _g < _n:
            _vy_invocation(uint32(_g), b0_keys, b1_counts)
        _j += 1


VYRE_FLAT = True
VYRE_SIGNATURE = 'void(uint32[::1], uint32[::1], int64, int64)'
vyre_kernel = cuda.jit(cache=False)(vyre_kernel_py)
