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
# <vyre.codegen.prelude.PRELUDE>


def _vy_invocation_py(_gid0, b0_a, b1_x, b2_y, b3_out):
    _gid1 = uint32(0)
    _gid2 = uint32(0)
    v1_i = _gid0
    if (v1_i < uint32(b3_out.shape[0])):
        b3_out[v1_i] = ((_vy_ld(b0_a, uint32(0), float32(0)) * _vy_ld(b1_x, v1_i, float32(0))) + _vy_ld(b2_y, v1_i, float32(0)))


_vy_invocation = _dev(_vy_invocation_py)


def _vy_interleaved_py(_g, _stride, b0_a, b1_x, b2_y, b3_out):
    _gid1 = uint32(0)
    _gid2 = uint32(0)
    _gid0_0 = uint32(_g + 0 * _stride)
    _gid0_1 = uint32(_g + 1 * _stride)
    _gid0_2 = uint32(_g + 2 * _stride)
    _gid0_3 = uint32(_g + 3 * _stride)
    v2_i = _gid0_0
    v3_i = _gid0_1
    v4_i = _gid0_2
    v5_i = _gid0_3
    _c6 = (v2_i < uint32(b3_out.shape[0]))
    _c7 = (v3_i < uint32(b3_out.shape[0]))
    _c8 = (v4_i < uint32(b3_out.shape[0]))
    _c9 = (v5_i < uint32(b3_out.shape[0]))
    if _c6 and _c7 and _c8 and _c9:
        _v10 = ((_vy_ld(b0_a, uint32(0), float32(0)) * _vy_ld(b1_x, v2_i, float32(0))) + _vy_ld(b2_y, v2_i, float32(0)))
        _v11 = ((_vy_ld(b0_a, uint32(0), float32(0)) * _vy_ld(b1_x, v3_i, float32(0))) + _vy_ld(b2_y, v3_i, float32(0)))
        _v12 = ((_vy_ld(b0_a, uint32(0), float32(0)) * _vy_ld(b1_x, v4_i, float32(0))) + _vy_ld(b2_y, v4_i, float32(0)))
        _v13 = ((_vy_ld(b0_a, uint32(0), float32(0)) * _vy_ld(b1_x, v5_i, float32(0))) + _vy_ld(b2_y, v5_i, float32(0)))
        b3_out[v2_i] = _v10
        b3_out[v3_i] = _v11
        b3_out[v4_i] = _v12
        b3_out[v5_i] = _v13
    elif not (_c6 or _c7 or _c8 or _c9):
        pass
    else:
        for _q in range(4):
            _vy_invocation(uint32(_g + _q * _stride), b0_a, b1_x, b2_y, b3_out)
        return


_vy_interleaved = _dev(_vy_interleaved_py)


def vyre_kernel_py(b0_a, b1_x, b2_y, b3_out, _n, _ipt):
    _t = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)
    _stride = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)
    _j = int64(0)
    while _j + 4 <= _ipt and _t + (_j + 3) * _stride < _n:
        _vy_interleaved(_t + _j * _stride, _stride, b0_a, b1_x, b2_y, b3_out)
        _j += 4
    while _j < _ipt:
        _g = _t + _j * _stride
        if _g < _n:
            _vy_invocation(uint32(_g), b0_a, b1_x, b2_y, b3_out)
        _j += 1


VYRE_FLAT = True
VYRE_SIGNATURE = 'void(float32[::1], float32[::1], float32[::1], float32[::1], int64, int64)'
vyre_kernel = cuda.jit(cache=False)(vyre_kernel_py)
