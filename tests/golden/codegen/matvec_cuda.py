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


def _vy_interleaved_py(_g, _stride, b0_m, b1_v, b2_out):
    _gid1 = uint32(0)
    _gid2 = uint32(0)
    _gid0_0 = uint32(_g + 0 * _stride)
    _gid0_1 = uint32(_g + 1 * _stride)
    _gid0_2 = uint32(_g + 2 * _stride)
    _gid0_3 = uint32(_g + 3 * _stride)
    v5_r = _gid0_0
    v6_r = _gid0_1
    v7_r = _gid0_2
    v8_r = _gid0_3
    _c9 = (v5_r < uint32(b2_out.shape[0]))
    _c10 = (v6_r < uint32(b2_out.shape[0]))
    _c11 = (v7_r < uint32(b2_out.shape[0]))
    _c12 = (v8_r < uint32(b2_out.shape[0]))
    if _c9 and _c10 and _c11 and _c12:
        v13_acc = float32(0.0)
        v14_acc = float32(0.0)
        v15_acc = float32(0.0)
        v16_acc = float32(0.0)
        for _it17 in range(int64(uint32(0)), int64(uint32(b1_v.shape[0]))):
            v18_j = uint32(_it17)
            v13_acc = (v13_acc + (_vy_ld(b0_m, uint32(uint32(v5_r * uint32(b1_v.shape[0])) + v18_j), float32(0)) * b1_v[v18_j]))
        for _it19 in range(int64(uint32(0)), int64(uint32(b1_v.shape[0]))):
            v20_j = uint32(_it19)
            v14_acc = (v14_acc + (_vy_ld(b0_m, uint32(uint32(v6_r * uint32(b1_v.shape[0])) + v20_j), float32(0)) * b1_v[v20_j]))
        for _it21 in range(int64(uint32(0)), int64(uint32(b1_v.shape[0]))):
            v22_j = uint32(_it21)
            v15_acc = (v15_acc + (_vy_ld(b0_m, uint32(uint32(v7_r * uint32(b1_v.shape[0])) + v22_j), float32(0)) * b1_v[v22_j]))
        for _it23 in range(int64(uint32(0)), int64(uint32(b1_v.shape[0]))):
            v24_j = uint32(_it23)
            v16_acc = (v16_acc + (_vy_ld(b0_m, uint32(uint32(v8_r * uint32(b1_v.shape[0])) + v24_j), float32(0)) * b1_v[v24_j]))
        _v25 = v13_acc
        _v26 = v14_acc
        _v27 = v15_acc
        _v28 = v16_acc
        b2_out[v5_r] = _v25
        b2_out[v6_r] = _v26
        b2_out[v7_r] = _v27
        b2_out[v8_r] = _v28
    elif not (_c9 or _c10 or _c11 or _c12):
        pass
    else:
        for _q in range(4):
            _vy_invocation(uint32(_g + _q * _stride), b0_m, b1_v, b2_out)
        return


_vy_interleaved = _dev(_vy_interleaved_py)


def vyre_kernel_py(b0_m, b1_v, b2_out, _n, _ipt):
    _t = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)
    _stride = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)
    _j = int64(0)
    while _j + 4 <= _ipt and _t + (_j + 3) * _stride < _n:
        _vy_interleaved(_t + _j * _stride, _stride, b0_m, b1_v, b2_out)
        _j += 4
    while _j < _ipt:
        _g = _t + _j * _stride
        if _g < _n:
            _vy_invocation(uint32(_g), b0_m, b1_v, b2_out)
        _j += 1


VYRE_FLAT = True
VYRE_SIGNATURE = 'void(float32[::1], float32[::1], float32[::1], int64, int64)'
vyre_kernel = cuda.jit(cache=False)(vyre_kernel_py)
