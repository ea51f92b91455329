# vyre generated kernel: target cuda, codegen v22. Do not edit.
import math
from numba import cuda, boolean, int32, int64, uint32, float32, float64

_dev = cuda.jit(device=True)


def _vy_fmod(a, b):
    return math.fmod(a, b)


_vy_fmod = _dev(_vy_fmod)


from vyre.codegen.cuda_runtime import opaque as _vy_k


def _vy_iabs(a):
    return int32(_vy_k(abs(int64(a))))  # not abs.s32: vyre/codegen/cuda_runtime.py


_vy_iabs = _dev(_vy_iabs)


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


def vyre_kernel_py(b0_x, b1_out):
    _lid0 = uint32(cuda.threadIdx.x)
    _wg0 = uint32(cuda.blockIdx.x)
    _gid0 = uint32(_wg0 * uint32(64) + _lid0)
    _lid1 = uint32(cuda.threadIdx.y)
    _wg1 = uint32(cuda.blockIdx.y)
    _gid1 = uint32(_wg1 * uint32(1) + _lid1)
    _lid2 = uint32(cuda.threadIdx.z)
    _wg2 = uint32(cuda.blockIdx.z)
    _gid2 = uint32(_wg2 * uint32(1) + _lid2)
    _lane = uint32((_lid0 + _lid1 * uint32(64) + _lid2 * uint32(64)) & uint32(31))
    _lin = uint32(_lid0 + _lid1 * uint32(64) + _lid2 * uint32(64))
    v1_v = _vy_ld(b0_x, _gid0, float32(0))
    _sg2 = v1_v
    _sg2 = (_sg2 + cuda.shfl_sync(0xFFFFFFFF, _sg2, int32(_lane ^ uint32(16))))
    _sg2 = (_sg2 + cuda.shfl_sync(0xFFFFFFFF, _sg2, int32(_lane ^ uint32(8))))
    _sg2 = (_sg2 + cuda.shfl_sync(0xFFFFFFFF, _sg2, int32(_lane ^ uint32(4))))
    _sg2 = (_sg2 + cuda.shfl_sync(0xFFFFFFFF, _sg2, int32(_lane ^ uint32(2))))
    _sg2 = (_sg2 + cuda.shfl_sync(0xFFFFFFFF, _sg2, int32(_lane ^ uint32(1))))
    v3_s = _sg2
    if (uint32(int64(_lid0) & int64(uint32(31))) == uint32(0)):
        v4__old = _vy_warp_add(b1_out, uint32(0), v3_s, float32(0), int64(1))


VYRE_FLAT = False
VYRE_SIGNATURE = 'void(float32[::1], float32[::1])'
vyre_kernel = cuda.jit(cache=False)(vyre_kernel_py)
