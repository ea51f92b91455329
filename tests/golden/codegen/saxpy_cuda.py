# vyre generated kernel: target cuda, codegen v1. Do not edit.
import math
from numba import cuda, boolean, int32, int64, uint32, float32, float64

_dev = cuda.jit(device=True)


def _vy_fmod(a, b):
    return math.fmod(a, b)


_vy_fmod = _dev(_vy_fmod)


def _vy_exp32(a):
    return math.exp(a)


_vy_exp32 = _dev(_vy_exp32)


def _vy_sin32(a):
    return math.sin(a)


_vy_sin32 = _dev(_vy_sin32)


def _vy_cos32(a):
    return math.cos(a)


_vy_cos32 = _dev(_vy_cos32)
# <vyre.codegen.prelude.PRELUDE>


def _vy_invocation_py(_gid0, b0_a, b1_x, b2_y, b3_out):
    _gid1 = uint32(0)
    _gid2 = uint32(0)
    v1_i = _gid0
    if (v1_i < uint32(b3_out.shape[0])):
        b3_out[v1_i] = ((_vy_ld(b0_a, uint32(0), float32(0)) * _vy_ld(b1_x, v1_i, float32(0))) + _vy_ld(b2_y, v1_i, float32(0)))


_vy_invocation = _dev(_vy_invocation_py)


def vyre_kernel_py(b0_a, b1_x, b2_y, b3_out, _n, _ipt):
    _t = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)
    _stride = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)
    for _k in range(_ipt):
        _g = _t + _k * _stride
        if _g < _n:
            _vy_invocation(uint32(_g), b0_a, b1_x, b2_y, b3_out)


VYRE_FLAT = True
VYRE_SIGNATURE = 'void(float32[::1], float32[::1], float32[::1], float32[::1], int64, int64)'
vyre_kernel = cuda.jit(cache=False)(vyre_kernel_py)
