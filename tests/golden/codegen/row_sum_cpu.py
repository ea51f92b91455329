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
def _vy_groups(b0_x, b1_out, _gx, _gy, _gz, _lo, _hi):
    s0_lanes_f64 = _vy_stack(64, np.float64)
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
        s0_lanes_f64[:] = 0
        for _l in range(1):
            _lid0 = uint32(_l)
            _lid1 = uint32(0)
            _lid2 = uint32(0)
            _gid0 = uint32(_wg0 * uint32(1) + _lid0)
            _gid1 = uint32(_wg1 * uint32(1) + _lid1)
            _gid2 = uint32(_wg2 * uint32(1) + _lid2)
            _lane = uint32(_l)
            v1_r = _gid0
            v2_cols = _vy_udiv(uint32(b0_x.shape[0]), uint32(b1_out.shape[0]))
            v3_base = uint32(v1_r * v2_cols)
            if (v1_r < uint32(b1_out.shape[0])):
                v4_s_res = float64(0.0)
                if (v2_cols >= uint32(64)):
                    v5_s_L_n = uint32(b0_x.shape[0])
                    v6_s_L_lo = min(v3_base, v5_s_L_n)
                    v7_s_L_len = min(v2_cols, uint32(v5_s_L_n - v6_s_L_lo))
                    v8_s_L_hi = uint32(v6_s_L_lo + v7_s_L_len)
                    for _it9 in range(int64(uint32(0)), int64(uint32(s0_lanes_f64.shape[0]))):
                        v10_k = uint32(_it9)
                        s0_lanes_f64[_it9] = float64(0.0)
                    v11_s_L_m2 = uint32(int64(v7_s_L_len) >> _vy_k(int64(7)))
                    for _it12 in range(int64(uint32(0)), int64(v11_s_L_m2)):
                        v13_s_L_j = uint32(_it12)
                        v14_s_L_p = uint32(v6_s_L_lo + uint32(v13_s_L_j * uint32(128)))
                        for _it15 in range(int64(uint32(0)), int64(uint32(s0_lanes_f64.shape[0]))):
                            v16_k = uint32(_it15)
                            v17_s_L_v0 = float64(b0_x[(int64(v14_s_L_p) + _it15)])
                            v18_s_L_v1 = float64(b0_x[((int64(v14_s_L_p) + _it15) + 64)])
                            v19_s_L_vt_l0_0 = (v17_s_L_v0 + v18_s_L_v1)
                            s0_lanes_f64[_it15] = (s0_lanes_f64[_it15] + v19_s_L_vt_l0_0)
                    v20_s_L_s0 = uint32(v6_s_L_lo + uint32(v11_s_L_m2 * uint32(128)))
                    v21_s_L_m1 = uint32(int64(uint32(v7_s_L_len - uint32(v11_s_L_m2 * uint32(128)))) >> _vy_k(int64(6)))
                    for _it22 in range(int64(uint32(0)), int64(v21_s_L_m1)):
                        v23_s_L_j1 = uint32(_it22)
                        v24_s_L_p1 = uint32(v20_s_L_s0 + uint32(v23_s_L_j1 * uint32(64)))
                        for _it25 in range(int64(uint32(0)), int64(uint32(s0_lanes_f64.shape[0]))):
                            v26_k = uint32(_it25)
                            v27_s_L_u = float64(b0_x[(int64(v24_s_L_p1) + _it25)])
                            s0_lanes_f64[_it25] = (s0_lanes_f64[_it25] + v27_s_L_u)
                    v28_s_L_t0 = uint32(v20_s_L_s0 + uint32(v21_s_L_m1 * uint32(64)))
                    for _it29 in range(int64(v28_s_L_t0), int64(v8_s_L_hi)):
                        v30_s_L_q = uint32(_it29)
                        v31_s_L_w = float64(b0_x[_it29])
                        s0_lanes_f64[(_it29 - int64(v28_s_L_t0))] = (s0_lanes_f64[(_it29 - int64(v28_s_L_t0))] + v31_s_L_w)
                    for _it32 in range(int64(uint32(0)), int64(uint32(32))):
                        v33_s_L_r32 = uint32(_it32)
                        v34_s_L_r32_a = s0_lanes_f64[_it32]
                        v35_s_L_r32_b = s0_lanes_f64[(_it32 + 32)]
                        s0_lanes_f64[_it32] = (v34_s_L_r32_a + v35_s_L_r32_b)
                    for _it36 in range(int64(uint32(0)), int64(uint32(16))):
                        v37_s_L_r16 = uint32(_it36)
                        v38_s_L_r16_a = s0_lanes_f64[_it36]
                        v39_s_L_r16_b = s0_lanes_f64[(_it36 + 16)]
                        s0_lanes_f64[_it36] = (v38_s_L_r16_a + v39_s_L_r16_b)
                    v40_s_L_r8_0a = s0_lanes_f64[uint32(0)]
                    v41_s_L_r8_0b = s0_lanes_f64[uint32(8)]
                    s0_lanes_f64[uint32(0)] = (v40_s_L_r8_0a + v41_s_L_r8_0b)
                    v42_s_L_r8_1a = s0_lanes_f64[uint32(1)]
                    v43_s_L_r8_1b = s0_lanes_f64[uint32(9)]
                    s0_lanes_f64[uint32(1)] = (v42_s_L_r8_1a + v43_s_L_r8_1b)
                    v44_s_L_r8_2a = s0_lanes_f64[uint32(2)]
                    v45_s_L_r8_2b = s0_lanes_f64[uint32(10)]
                    s0_lanes_f64[uint32(2)] = (v44_s_L_r8_2a + v45_s_L_r8_2b)
                    v46_s_L_r8_3a = s0_lanes_f64[uint32(3)]
                    v47_s_L_r8_3b = s0_lanes_f64[uint32(11)]
                    s0_lanes_f64[uint32(3)] = (v46_s_L_r8_3a + v47_s_L_r8_3b)
                    v48_s_L_r8_4a = s0_lanes_f64[uint32(4)]
                    v49_s_L_r8_4b = s0_lanes_f64[uint32(12)]
                    s0_lanes_f64[uint32(4)] = (v48_s_L_r8_4a + v49_s_L_r8_4b)
                    v50_s_L_r8_5a = s0_lanes_f64[uint32(5)]
                    v51_s_L_r8_5b = s0_lanes_f64[uint32(13)]
                    s0_lanes_f64[uint32(5)] = (v50_s_L_r8_5a + v51_s_L_r8_5b)
                    v52_s_L_r8_6a = s0_lanes_f64[uint32(6)]
                    v53_s_L_r8_6b = s0_lanes_f64[uint32(14)]
                    s0_lanes_f64[uint32(6)] = (v52_s_L_r8_6a + v53_s_L_r8_6b)
                    v54_s_L_r8_7a = s0_lanes_f64[uint32(7)]
                    v55_s_L_r8_7b = s0_lanes_f64[uint32(15)]
                    s0_lanes_f64[uint32(7)] = (v54_s_L_r8_7a + v55_s_L_r8_7b)
                    v56_s_L_r4_0a = s0_lanes_f64[uint32(0)]
                    v57_s_L_r4_0b = s0_lanes_f64[uint32(4)]
                    s0_lanes_f64[uint32(0)] = (v56_s_L_r4_0a + v57_s_L_r4_0b)
                    v58_s_L_r4_1a = s0_lanes_f64[uint32(1)]
                    v59_s_L_r4_1b = s0_lanes_f64[uint32(5)]
                    s0_lanes_f64[uint32(1)] = (v58_s_L_r4_1a + v59_s_L_r4_1b)
                    v60_s_L_r4_2a = s0_lanes_f64[uint32(2)]
                    v61_s_L_r4_2b = s0_lanes_f64[uint32(6)]
                    s0_lanes_f64[uint32(2)] = (v60_s_L_r4_2a + v61_s_L_r4_2b)
                    v62_s_L_r4_3a = s0_lanes_f64[uint32(3)]
                    v63_s_L_r4_3b = s0_lanes_f64[uint32(7)]
                    s0_lanes_f64[uint32(3)] = (v62_s_L_r4_3a + v63_s_L_r4_3b)
                    v64_s_L_r2_0a = s0_lanes_f64[uint32(0)]
                    v65_s_L_r2_0b = s0_lanes_f64[uint32(2)]
                    s0_lanes_f64[uint32(0)] = (v64_s_L_r2_0a + v65_s_L_r2_0b)
                    v66_s_L_r2_1a = s0_lanes_f64[uint32(1)]
                    v67_s_L_r2_1b = s0_lanes_f64[uint32(3)]
                    s0_lanes_f64[uint32(1)] = (v66_s_L_r2_1a + v67_s_L_r2_1b)
                    v68_s_L_r1_0a = s0_lanes_f64[uint32(0)]
                    v69_s_L_r1_0b = s0_lanes_f64[uint32(1)]
                    s0_lanes_f64[uint32(0)] = (v68_s_L_r1_0a + v69_s_L_r1_0b)
                    v70_s_L_tot = s0_lanes_f64[uint32(0)]
                    v4_s_res = v70_s_L_tot
                else:
                    v71_s_a0 = float64(0.0)
                    v72_s_a1 = float64(0.0)
                    v73_s_a2 = float64(0.0)
                    v74_s_a3 = float64(0.0)
                    v75_s_a4 = float64(0.0)
                    v76_s_a5 = float64(0.0)
                    v77_s_a6 = float64(0.0)
                    v78_s_a7 = float64(0.0)
                    for _it79 in range(int64(uint32(0)), int64(uint32(int64(v2_cols) >> _vy_k(int64(3))))):
                        v80_s_j = uint32(_it79)
                        v81_s_p = uint32(v80_s_j * uint32(8))
                        if _vy_and(_vy_and(_vy_and(_vy_and(_vy_and(_vy_and(_vy_and((uint32(v3_base + v81_s_p) < uint32(b0_x.shape[0])), (uint32(v3_base + uint32(v81_s_p + uint32(1))) < uint32(b0_x.shape[0]))), (uint32(v3_base + uint32(v81_s_p + uint32(2))) < uint32(b0_x.shape[0]))), (uint32(v3_base + uint32(v81_s_p + uint32(3))) < uint32(b0_x.shape[0]))), (uint32(v3_base + uint32(v81_s_p + uint32(4))) < uint32(b0_x.shape[0]))), (uint32(v3_base + uint32(v81_s_p + uint32(5))) < uint32(b0_x.shape[0]))), (uint32(v3_base + uint32(v81_s_p + uint32(6))) < uint32(b0_x.shape[0]))), (uint32(v3_base + uint32(v81_s_p + uint32(7))) < uint32(b0_x.shape[0]))):
                            v82_s_v0 = float64(b0_x[uint32(v3_base + v81_s_p)])
                            v71_s_a0 = (v71_s_a0 + v82_s_v0)
                            v83_s_v1 = float64(b0_x[uint32(v3_base + uint32(v81_s_p + uint32(1)))])
                            v72_s_a1 = (v72_s_a1 + v83_s_v1)
                            v84_s_v2 = float64(b0_x[uint32(v3_base + uint32(v81_s_p + uint32(2)))])
                            v73_s_a2 = (v73_s_a2 + v84_s_v2)
                            v85_s_v3 = float64(b0_x[uint32(v3_base + uint32(v81_s_p + uint32(3)))])
                            v74_s_a3 = (v74_s_a3 + v85_s_v3)
                            v86_s_v4 = float64(b0_x[uint32(v3_base + uint32(v81_s_p + uint32(4)))])
                            v75_s_a4 = (v75_s_a4 + v86_s_v4)
                            v87_s_v5 = float64(b0_x[uint32(v3_base + uint32(v81_s_p + uint32(5)))])
                            v76_s_a5 = (v76_s_a5 + v87_s_v5)
                            v88_s_v6 = float64(b0_x[uint32(v3_base + uint32(v81_s_p + uint32(6)))])
                            v77_s_a6 = (v77_s_a6 + v88_s_v6)
                            v89_s_v7 = float64(b0_x[uint32(v3_base + uint32(v81_s_p + uint32(7)))])
                            v78_s_a7 = (v78_s_a7 + v89_s_v7)
                    for _it90 in range(int64(uint32(uint32(int64(v2_cols) >> _vy_k(int64(3))) * uint32(8))), int64(v2_cols)):
                        v91_s_q = uint32(_it90)
                        if (uint32(v3_base + v91_s_q) < uint32(b0_x.shape[0])):
                            v92_s_v0 = float64(b0_x[uint32(v3_base + v91_s_q)])
                            v71_s_a0 = (v71_s_a0 + v92_s_v0)
                    v93_s_m_l0_0 = (v71_s_a0 + v72_s_a1)
                    v94_s_m_l0_1 = (v73_s_a2 + v74_s_a3)
                    v95_s_m_l0_2 = (v75_s_a4 + v76_s_a5)
                    v96_s_m_l0_3 = (v77_s_a6 + v78_s_a7)
                    v97_s_m_l1_0 = (v93_s_m_l0_0 + v94_s_m_l0_1)
                    v98_s_m_l1_1 = (v95_s_m_l0_2 + v96_s_m_l0_3)
                    v99_s_m_l2_0 = (v97_s_m_l1_0 + v98_s_m_l1_1)
                    v4_s_res = v99_s_m_l2_0
                b1_out[v1_r] = float32(v4_s_res)
        _w0 += 1
        if _w0 == _gx:
            _w0 = 0
            _w1 += 1
            if _w1 == _gy:
                _w1 = 0
                _w2 += 1


_SIG = _t.void(_t.Array(float32, 1, 'C', readonly=True), _t.Array(float32, 1, 'C', readonly=False), _t.int64, _t.int64, _t.int64)
@numba.njit(_SIG, cache=False, error_model='numpy')
def vyre_kernel(b0_x, b1_out, _gx, _gy, _gz):
    _vy_groups(b0_x, b1_out, _gx, _gy, _gz, int64(0), _gx * _gy * _gz)


@numba.njit(parallel=True, cache=False, error_model='numpy')
def vyre_kernel_parallel(b0_x, b1_out, _gx, _gy, _gz):
    _nw = _gx * _gy * _gz
    _nc = min(_nw, 256)
    for _c in numba.prange(_nc):
        _vy_groups(b0_x, b1_out, _gx, _gy, _gz, int64(_c * _nw // _nc), int64((_c + 1) * _nw // _nc))


VYRE_FLAT = False
VYRE_PARALLEL = True
