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


def _vy_invocation_py(_gid0, b0_m, b1_v, b2_out):
    _gid1 = uint32(0)
    _gid2 = uint32(0)
    v1_r = _gid0
    if (v1_r < uint32(b2_out.shape[0])):
        v2_acc = float32(0.0)
        for _it3 in range(int64(uint32(0)), int64(uint32(b1_v.shape[0]))):
            v4_j = uint32(_it3)
            v2_acc = (v2_acc + (_vy_ld(b0_m, uint32(uint32(v1_r * uint32(b1_v.shape[0])) + v4_j), float32(0)) * b1_v[v4_j]))
        b2_out[v1_r] = v2_acc


_vy_invocation = _dev(_vy_invocation_py)


def vyre_kernel_py(b0_m, b1_v, b2_out, _n, _ipt):
    _t = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)
    _stride = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)
    for _k in range(_ipt):
        _g = _t + _k * _stride
        if _g < _n:
            _vy_invocation(uint32(_g), b0_m, b1_v, b2_out)


VYRE_FLAT = True
VYRE_SIGNATURE = 'void(float32[::1], float32[::1], float32[::1], int64, int64)'
vyre_kernel = cuda.jit(cache=False)(vyre_kernel_py)
