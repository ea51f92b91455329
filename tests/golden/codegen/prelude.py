# <vyre.codegen.prelude.PRELUDE>

@_dev
def _vy_udiv(a, b):
    if b == 0:
        return uint32(4294967295)
    return uint32(int64(a) // int64(b))


@_dev
def _vy_umod(a, b):
    if b == 0:
        return uint32(0)
    return uint32(int64(a) % int64(b))


@_dev
def _vy_sdiv(a, b):
    if b == 0:
        return int32(-1)
    x = int64(a)
    y = int64(b)
    q = abs(x) // abs(y)
    if (x < 0) != (y < 0):
        q = -q
    return int32(q)


@_dev
def _vy_smod(a, b):
    if b == 0:
        return int32(0)
    x = int64(a)
    r = abs(x) % abs(int64(b))
    if x < 0:
        r = -r
    return int32(r)


@_dev
def _vy_fmul_u32(a, b):
    x = int64(a)
    y = int64(b)
    if x >= 2147483648:
        x -= 4294967296
    if y >= 2147483648:
        y -= 4294967296
    return uint32((x * y) >> 16)


@_dev
def _vy_fmul_i32(a, b):
    return int32((int64(a) * int64(b)) >> 16)


@_dev
def _vy_fmin(a, b):
    if a != a:
        return b
    if b != b:
        return a
    return a if a <= b else b


@_dev
def _vy_fmax(a, b):
    if a != a:
        return b
    if b != b:
        return a
    return a if a >= b else b


@_dev
def _vy_trunc(x):
    if not (abs(x) < 4503599627370496.0):
        return float64(x)
    return math.copysign(float64(int64(x)), x)


@_dev
def _vy_floor(x):
    t = _vy_trunc(x)
    if t > x:
        t -= 1.0
    return t


@_dev
def _vy_ceil(x):
    t = _vy_trunc(x)
    if t < x:
        t += 1.0
    return math.copysign(t, x) if t == 0.0 else t


@_dev
def _vy_round(x):
    if not (abs(x) < 4503599627370496.0):
        return float64(x)
    r = _vy_floor(x)
    d = float64(x) - r
    if d > 0.5 or (d == 0.5 and (int64(r) & 1) != 0):
        r += 1.0
    return math.copysign(r, x) if r == 0.0 else r


@_dev
def _vy_fsign(x):
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return float64(x)


@_dev
def _vy_isign(a):
    if a > 0:
        return int32(1)
    if a < 0:
        return int32(-1)
    return int32(0)


@_dev
def _vy_f2u(x):
    if x != x or x <= 0.0:
        return uint32(0)
    if x >= 4294967295.0:
        return uint32(4294967295)
    return uint32(int64(x))


@_dev
def _vy_f2i(x):
    if x != x:
        return int32(0)
    if x >= 2147483647.0:
        return int32(2147483647)
    if x <= -2147483648.0:
        return int32(-2147483648)
    return int32(int64(x))


@_dev
def _vy_popc(v):
    x = int64(v) & 4294967295
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return uint32(((x * 0x01010101) & 4294967295) >> 24)


@_dev
def _vy_clz(v):
    x = int64(v) & 4294967295
    if x == 0:
        return uint32(32)
    n = 0
    if x <= 0x0000FFFF:
        n += 16
        x <<= 16
    if x <= 0x00FFFFFF:
        n += 8
        x <<= 8
    if x <= 0x0FFFFFFF:
        n += 4
        x <<= 4
    if x <= 0x3FFFFFFF:
        n += 2
        x <<= 2
    if x <= 0x7FFFFFFF:
        n += 1
    return uint32(n)


@_dev
def _vy_ctz(v):
    x = int64(v) & 4294967295
    if x == 0:
        return uint32(32)
    return _vy_popc((x & -x) - 1)


@_dev
def _vy_ld(buf, i, zero):
    if i < buf.shape[0]:
        return buf[i]
    return zero

# <vyre.codegen.cpu.CPU_PRELUDE>

@_dev
def _vy_at_add(b, i, v, zero):
    if i < b.shape[0]:
        old = b[i]
        b[i] = old + v
        return old
    return zero


@_dev
def _vy_at_min(b, i, v, zero):
    if i < b.shape[0]:
        old = b[i]
        b[i] = min(old, v)
        return old
    return zero


@_dev
def _vy_at_max(b, i, v, zero):
    if i < b.shape[0]:
        old = b[i]
        b[i] = max(old, v)
        return old
    return zero


@_dev
def _vy_at_and(b, i, v, zero):
    if i < b.shape[0]:
        old = b[i]
        b[i] = old & v
        return old
    return zero


@_dev
def _vy_at_or(b, i, v, zero):
    if i < b.shape[0]:
        old = b[i]
        b[i] = old | v
        return old
    return zero


@_dev
def _vy_at_xor(b, i, v, zero):
    if i < b.shape[0]:
        old = b[i]
        b[i] = old ^ v
        return old
    return zero


@_dev
def _vy_at_exchange(b, i, v, zero):
    if i < b.shape[0]:
        old = b[i]
        b[i] = v
        return old
    return zero

@_dev
def _vy_at_compare_exchange(b, i, expected, v, zero):
    if i < b.shape[0]:
        old = b[i]
        if old == expected:
            b[i] = v
        return old
    return zero


@_dev
def _vy_fmod(a, b):
    return np.fmod(a, b)


@_dev
def _vy_iabs(a):
    return int32(abs(int64(a)))

_VY_INV_PIO4 = np.array([
    0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
    0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
    0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
], dtype=np.uint32)


@_dev
def _vy_exp64(c):
    # e**c for c in [-104, 90] (callers clamp), relative error below 3e-13: 2**n * Taylor(r)
    n = math.floor(c * 1.4426950408889634 + 0.5)
    r = (c - n * 0.6931471803691238) - n * 1.9082149292705877e-10
    p = 1.0 + r * (1.0 + r * (0.5 + r * (0.16666666666666666 + r * (0.041666666666666664 + r * (
        0.008333333333333333 + r * (0.001388888888888889 + r * (0.0001984126984126984 + r * (
            2.48015873015873e-05 + r * 2.7557319223985893e-06))))))))
    return p * np.int64((int64(n) + 1023) << 52).view(np.float64)


@_dev
def _vy_f32_exp(a):
    d = float64(a)
    res = float32(_vy_exp64(min(max(d, -104.0), 89.0)))
    return res if d == d else float32(d)


@_dev
def _vy_f32_exp2(a):
    d = float64(a)
    res = float32(_vy_exp64(min(max(d, -151.0), 128.5) * 0.6931471805599453))
    return res if d == d else float32(d)


@_dev
def _vy_log64(d):
    # (e, log(m)) with d = 2**e * m, m in (sqrt(1/2), sqrt(2)], for positive finite d (every positive
    # f32 is a normal f64); log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.1716: error < 2e-13
    bits = np.float64(d).view(np.int64)
    m = np.int64((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000).view(np.float64)
    big = m > 1.4142135623730951
    e = float64((bits >> 52) - 1023) + (1.0 if big else 0.0)
    m = m * 0.5 if big else m
    f = m - 1.0
    s = f / (2.0 + f)
    s2 = s * s
    lm = 2.0 * s * (1.0 + s2 * (0.3333333333333333 + s2 * (0.2 + s2 * (0.14285714285714285 + s2 * (
        0.1111111111111111 + s2 * (0.09090909090909091 + s2 * (0.07692307692307693 + s2 * (
            0.06666666666666667))))))))
    return e, lm


@_dev
def _vy_log_special(d, r):
    # log of 0 is -inf, of +inf is +inf, of anything negative or NaN is NaN (one select each)
    r = r if d > 0.0 else float32(math.nan)
    r = float32(-math.inf) if d == 0.0 else r
    return float32(math.inf) if d == math.inf else r


@_dev
def _vy_f32_log(a):
    d = float64(a)
    e, lm = _vy_log64(d)
    return _vy_log_special(d, float32(e * 0.6931471805599453 + lm))


@_dev
def _vy_f32_log2(a):
    d = float64(a)
    e, lm = _vy_log64(d)
    return _vy_log_special(d, float32(e + lm * 1.4426950408889634))


@_dev
def _vy_f32_tanh(a):
    d = float64(a)
    c = min(max(d, -20.0), 20.0)
    e2 = _vy_exp64(2.0 * c)
    c2 = c * c
    # Taylor below 1/8, where (e2 - 1) would cancel; written as c * (...) so that tanh(-0) = -0
    small = c * (1.0 + c2 * (-0.3333333333333333 + c2 * (0.13333333333333333 + c2 * (
        -0.05396825396825397 + c2 * (0.021869488536155203 + c2 * -0.008863235529902197)))))
    r = small if abs(c) < 0.125 else (e2 - 1.0) / (e2 + 1.0)
    return float32(r) if d == d else float32(d)


@_dev
def _vy_sincos_core(a):
    # (sin r, cos r, q) with |a| = q pi/2 + r, |r| <= pi/4
    ad = abs(float64(a))
    nf = math.floor(ad * 0.6366197723675814 + 0.5)
    rs = (ad - nf * 1.5707963267341256) - nf * 6.077100506506192e-11
    xi = np.uint64(np.float32(ad).view(np.uint32))
    idx = (xi >> np.uint64(26)) & np.uint64(15)
    m = ((xi & np.uint64(0xffffff)) | np.uint64(0x800000)) << ((xi >> np.uint64(23)) & np.uint64(7))
    # 32-bit table entries widened here: LLVM then knows both factors fit 32 bits (cheap multiplies)
    res0 = (m * np.uint64(_VY_INV_PIO4[idx])) & np.uint64(0xffffffff)
    res1 = m * np.uint64(_VY_INV_PIO4[idx + np.uint64(4)])
    res2 = m * np.uint64(_VY_INV_PIO4[idx + np.uint64(8)])
    res0 = ((res2 >> np.uint64(32)) | (res0 << np.uint64(32))) + res1
    nl = (res0 + (np.uint64(1) << np.uint64(61))) >> np.uint64(62)
    rl = float64(np.int64(res0 - (nl << np.uint64(62)))) * 3.4061215800865545e-19
    large = ad >= 120.0
    r = rl if large else rs
    q = int64(nl) if large else int64(nf)
    r2 = r * r
    s = r * (1.0 + r2 * (-0.16666666666666666 + r2 * (0.008333333333333333 + r2 * (
        -0.0001984126984126984 + r2 * (2.7557319223985893e-06 + r2 * (-2.505210838544172e-08
                                                                     + r2 * 1.6059043836821613e-10))))))
    c = 1.0 + r2 * (-0.5 + r2 * (0.041666666666666664 + r2 * (-0.001388888888888889 + r2 * (
        2.48015873015873e-05 + r2 * (-2.755731922398589e-07 + r2 * (2.08767569878681e-09
                                                                    + r2 * -1.1470745597729725e-11))))))
    return s, c, q


@_dev
def _vy_sincos64(a, quarter):
    s, c, q = _vy_sincos_core(a)
    q = q + quarter
    sgn = 1.0 - 2.0 * float64((q >> 1) & 1)
    return (c if (q & 1) == 1 else s) * sgn


@_dev
def _vy_f32_sin(a):
    d = float64(a)
    v = _vy_sincos64(a, 0) * math.copysign(1.0, d)
    return float32(v) if math.isfinite(d) else float32(math.nan)


@_dev
def _vy_f32_cos(a):
    d = float64(a)
    v = _vy_sincos64(a, 1)
    return float32(v) if math.isfinite(d) else float32(math.nan)


@_dev
def _vy_f32_tan(a):
    # from one reduction: tan |a| = sin r / cos r in even quadrants, -cos r / sin r in odd ones (each
    # polynomial is accurate relative to itself, so the quotient stays accurate next to the poles)
    d = float64(a)
    s, c, q = _vy_sincos_core(a)
    odd = (q & 1) == 1
    v = (-c if odd else s) / (s if odd else c) * math.copysign(1.0, d)
    return float32(v) if math.isfinite(d) else float32(math.nan)


@_dev
def _vy_f32_sinh(a):
    d = float64(a)
    c = min(max(d, -95.0), 95.0)
    e = _vy_exp64(c)
    c2 = c * c
    # Taylor below 1/8, where e - 1/e would cancel; c * (...) keeps sinh(-0) = -0
    small = c * (1.0 + c2 * (0.16666666666666666 + c2 * (0.008333333333333333 + c2 * (
        0.0001984126984126984 + c2 * 2.7557319223985893e-06))))
    r = small if abs(c) < 0.125 else 0.5 * (e - 1.0 / e)
    return float32(r) if d == d else float32(d)


@_dev
def _vy_f32_cosh(a):
    d = float64(a)
    e = _vy_exp64(min(max(d, -95.0), 95.0))
    r = 0.5 * (e + 1.0 / e)
    return float32(r) if d == d else float32(d)
