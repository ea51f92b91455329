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
