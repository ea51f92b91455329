# vyre generated kernel: target cuda (simulator), codegen v22. Do not edit.
import types
import math as _m
import numpy as _np
_np.seterr(all='ignore')
def _sim_pow(a, b):
    try:
        return type(a)(_m.pow(a, b))
    except (ValueError, OverflowError, ZeroDivisionError):
        return _np.power(a, b)
math = types.SimpleNamespace(
    sqrt=_np.sqrt, exp=_np.exp, exp2=_np.exp2, log=_np.log, log2=_np.log2, sin=_np.sin, cos=_np.cos,
    tan=_np.tan, asin=_np.arcsin, acos=_np.arccos, atan=_np.arctan, sinh=_np.sinh, cosh=_np.cosh,
    tanh=_np.tanh, isnan=_np.isnan, isinf=_np.isinf, isfinite=_np.isfinite, copysign=_np.copysign,
    fmod=_np.fmod, pow=_sim_pow, nan=_np.nan, inf=_np.inf,
)
from numba import cuda, boolean, int32, int64, uint32, float32, float64

_dev = cuda.jit(device=True)


def _vy_fmod(a, b):
    return math.fmod(a, b)


_vy_fmod = _dev(_vy_fmod)


def _vy_iabs(a):
    return int32(abs(int64(a)))


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
    _sgs_f32 = cuda.shared.array(64, float32)
    v1_v = _vy_ld(b0_x, _gid0, float32(0))
    _sgs_f32[_lin] = v1_v
    cuda.syncthreads()
    _sg2 = _sgs_f32[_lin - _lane]
    for _k in range(1, 32):
        _sg2 = (_sg2 + _sgs_f32[_lin - _lane + _k])
    cuda.syncthreads()
    v3_s = _sg2
    if (uint32(int64(_lid0) & int64(uint32(31))) == uint32(0)):
        v4__old = (cuda.atomic.add(b1_out, uint32(0), v3_s) if uint32(0) < b1_out.shape[0] else float32(0))


VYRE_FLAT = False
VYRE_SIGNATURE = 'void(float32[::1], float32[::1])'
vyre_kernel = cuda.jit(cache=False)(vyre_kernel_py)
