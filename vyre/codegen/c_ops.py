"""Per-op emission rules for the CUDA C++ printer (vyre/codegen/cuda_c.py), keyed by the op enums,
beside the numba ones (vyre/codegen/ops.py), with the same meaning (docs/semantics.md).

Every rule takes the operand type and the operand source strings and returns a C++ expression of
the result type. C's signed overflow is undefined, so i32 ``+ - *``, negation and left shifts are
done on the unsigned bit patterns and converted back (NVRTC, like every CUDA compiler, converts an
out-of-range unsigned to int by wrapping). Division, remainder, saturating casts and the float
helpers are the functions of :data:`C_PRELUDE`, the C forms of vyre/codegen/prelude.py.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import BinOpKind, DataType, UnOpKind


BinRule = Callable[[DataType, str, str], str]
UnRule = Callable[[DataType, str], str]

#: the C++ type of a value (a local, an operand)
C_TYPE = {DataType.BOOL: "bool", DataType.I32: "int", DataType.U32: "unsigned", DataType.F32: "float",
          DataType.F64: "double"}
#: the C++ type of a buffer element: numba stores booleans as one byte, as numpy does
C_ELEM = {**C_TYPE, DataType.BOOL: "unsigned char"}


def _wrapping(sym: str) -> BinRule:
    def rule(t: DataType, a: str, b: str) -> str:
        if t is DataType.I32:
            return f"((int)((unsigned)({a}) {sym} (unsigned)({b})))"
        return f"({a} {sym} {b})"
    return rule


def _plain(sym: str) -> BinRule:
    return lambda t, a, b: f"({a} {sym} {b})"


def _mod(t: DataType, a: str, b: str) -> str:
    if t.is_int:
        return f"vy_mod({a}, {b})"
    return f"{'fmodf' if t is DataType.F32 else 'fmod'}({a}, {b})"


def _div(t: DataType, a: str, b: str) -> str:
    return f"vy_div({a}, {b})" if t.is_int else f"({a} / {b})"


def _shl(t: DataType, a: str, b: str) -> str:
    shifted = f"((unsigned)({a}) << ((unsigned)({b}) & 31u))"
    return f"((int){shifted})" if t is DataType.I32 else shifted


def _shr(t: DataType, a: str, b: str) -> str:
    # >> of an int is arithmetic on every CUDA compiler; of an unsigned, logical
    return f"({a} >> ((unsigned)({b}) & 31u))"


def _absdiff(t: DataType, a: str, b: str) -> str:
    if t.is_int:
        return f"vy_absdiff({a}, {b})"
    return f"{'fabsf' if t is DataType.F32 else 'fabs'}({a} - {b})"


C_BINOP: dict[BinOpKind, BinRule] = {
    BinOpKind.ADD: _wrapping("+"),
    BinOpKind.SUB: _wrapping("-"),
    BinOpKind.MUL: _wrapping("*"),
    BinOpKind.DIV: _div,
    BinOpKind.MOD: _mod,
    BinOpKind.BIT_AND: _plain("&"),
    BinOpKind.BIT_OR: _plain("|"),
    BinOpKind.BIT_XOR: _plain("^"),
    BinOpKind.SHL: _shl,
    BinOpKind.SHR: _shr,
    BinOpKind.EQ: _plain("=="),
    BinOpKind.NE: _plain("!="),
    BinOpKind.LT: _plain("<"),
    BinOpKind.GT: _plain(">"),
    BinOpKind.LE: _plain("<="),
    BinOpKind.GE: _plain(">="),
    BinOpKind.AND: _plain("&&"),  # operands are pure: no short circuit can be observed
    BinOpKind.OR: _plain("||"),
    BinOpKind.MIN: lambda t, a, b: f"vy_min({a}, {b})",
    BinOpKind.MAX: lambda t, a, b: f"vy_max({a}, {b})",
    BinOpKind.ABS_DIFF: _absdiff,
    BinOpKind.FIXED_MUL_Q16: lambda t, a, b: f"vy_fixed_mul({a}, {b})",
    BinOpKind.POW: lambda t, a, b: f"{'powf' if t is DataType.F32 else 'pow'}({a}, {b})",  # libdevice, as numba
}


def _math(fn: str) -> UnRule:
    """libdevice's ``fn`` (``fnf`` on f32): what numba's ``math.fn`` calls on CUDA."""
    return lambda t, a: f"{fn}{'f' if t is DataType.F32 else ''}({a})"


def _one(t: DataType) -> str:
    return "1.0f" if t is DataType.F32 else "1.0"


def _neg(t: DataType, a: str) -> str:
    if t is DataType.I32:
        return f"((int)(0u - (unsigned)({a})))"
    return f"(0u - {a})" if t is DataType.U32 else f"(-{a})"


def _abs(t: DataType, a: str) -> str:
    if t is DataType.U32:
        return a
    if t is DataType.I32:
        return f"vy_iabs({a})"  # not abs.s32: C_PRELUDE and vyre/codegen/cuda_runtime.py say why
    return _math("fabs")(t, a)


def _sign(t: DataType, a: str) -> str:
    return f"vy_isign({a})" if t is DataType.I32 else f"vy_fsign({a})"


C_UNOP: dict[UnOpKind, UnRule] = {
    UnOpKind.NEGATE: _neg,
    UnOpKind.BIT_NOT: lambda t, a: f"(~{a})",
    UnOpKind.LOGICAL_NOT: lambda t, a: f"(!{a})",
    UnOpKind.ABS: _abs,
    UnOpKind.SQRT: _math("sqrt"),
    UnOpKind.INVERSE_SQRT: lambda t, a: f"({_one(t)} / {_math('sqrt')(t, a)})",
    UnOpKind.EXP: _math("exp"),
    UnOpKind.EXP2: _math("exp2"),
    UnOpKind.LOG: _math("log"),
    UnOpKind.LOG2: _math("log2"),
    UnOpKind.SIN: _math("sin"),
    UnOpKind.COS: _math("cos"),
    UnOpKind.TAN: _math("tan"),
    UnOpKind.ASIN: _math("asin"),
    UnOpKind.ACOS: _math("acos"),
    UnOpKind.ATAN: _math("atan"),
    UnOpKind.SINH: _math("sinh"),
    UnOpKind.COSH: _math("cosh"),
    UnOpKind.TANH: _math("tanh"),
    UnOpKind.FLOOR: _math("floor"),  # exact, sign of zero kept: what numba's _vy_floor computes
    UnOpKind.CEIL: _math("ceil"),
    UnOpKind.ROUND: _math("rint"),  # half to even in the default rounding mode
    UnOpKind.TRUNC: _math("trunc"),
    UnOpKind.SIGN: _sign,
    UnOpKind.RECIPROCAL: lambda t, a: f"({_one(t)} / {a})",
    UnOpKind.POPCOUNT: lambda t, a: f"((unsigned)__popc((unsigned)({a})))",
    UnOpKind.CLZ: lambda t, a: f"((unsigned)__clz((int)({a})))",  # __clz(0) == 32
    UnOpKind.CTZ: lambda t, a: f"vy_ctz((unsigned)({a}))",
    UnOpKind.IS_NAN: lambda t, a: f"vy_isnan({a})",
    UnOpKind.IS_INF: lambda t, a: f"vy_isinf({a})",
    UnOpKind.IS_FINITE: lambda t, a: f"vy_isfinite({a})",
    UnOpKind.STOP_GRADIENT: lambda t, a: f"({a})",
}


def c_cast(target: DataType, source: DataType, a: str) -> str:
    """docs/semantics.md "Casts" (vyre/codegen/ops.py ``emit_cast`` for numba)."""
    if target is source:
        return a
    if target is DataType.BOOL:
        return f"({a} != 0)"
    if source is DataType.BOOL:
        return f"(({C_TYPE[target]})({a} ? 1 : 0))"
    if target.is_int and source.is_float:
        return f"vy_f2u({a})" if target is DataType.U32 else f"vy_f2i({a})"
    return f"(({C_TYPE[target]})({a}))"


C_PRELUDE = r'''
typedef unsigned long long vy_u64;

__device__ __forceinline__ unsigned vy_div(unsigned a, unsigned b) { return b == 0u ? 4294967295u : a / b; }
__device__ __forceinline__ unsigned vy_mod(unsigned a, unsigned b) { return b == 0u ? 0u : a % b; }
__device__ __forceinline__ int vy_div(int a, int b) {
    if (b == 0) return -1;
    if (b == -1) return (int)(0u - (unsigned)a);  /* INT_MIN / -1 == INT_MIN (C: undefined) */
    return a / b;  /* truncates toward zero */
}
__device__ __forceinline__ int vy_mod(int a, int b) { return (b == 0 || b == -1) ? 0 : a % b; }

/* i32 abs wraps (abs(INT_MIN) == INT_MIN). The 64-bit abs of the sign-extended value goes through
   an opaque mov: NVVM would fold it into abs.s32, whose result ptxas treats as non-negative
   (vyre/codegen/cuda_runtime.py). */
__device__ __forceinline__ int vy_iabs(int a) {
    long long w = (long long)a;
    w = w < 0 ? -w : w;
    asm("mov.b64 %0, %1;" : "=l"(w) : "l"(w));
    return (int)(unsigned)(vy_u64)w;
}
__device__ __forceinline__ int vy_isign(int a) { return a > 0 ? 1 : (a < 0 ? -1 : 0); }
__device__ __forceinline__ float vy_fsign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
__device__ __forceinline__ double vy_fsign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x); }

__device__ __forceinline__ int vy_min(int a, int b) { return a <= b ? a : b; }
__device__ __forceinline__ unsigned vy_min(unsigned a, unsigned b) { return a <= b ? a : b; }
__device__ __forceinline__ int vy_max(int a, int b) { return a >= b ? a : b; }
__device__ __forceinline__ unsigned vy_max(unsigned a, unsigned b) { return a >= b ? a : b; }
/* IEEE minNum / maxNum: a NaN operand gives the other one; ties give the first */
template <typename T> __device__ __forceinline__ T vy_min(T a, T b) {
    if (a != a) return b;
    if (b != b) return a;
    return a <= b ? a : b;
}
template <typename T> __device__ __forceinline__ T vy_max(T a, T b) {
    if (a != a) return b;
    if (b != b) return a;
    return a >= b ? a : b;
}

__device__ __forceinline__ unsigned vy_absdiff(int a, int b) {
    long long d = (long long)a - (long long)b;
    return (unsigned)(vy_u64)(d < 0 ? -d : d);
}
__device__ __forceinline__ unsigned vy_absdiff(unsigned a, unsigned b) { return a >= b ? a - b : b - a; }

/* 16.16 fixed point: both bit patterns read as signed, arithmetic shift, wrapped to 32 bits */
__device__ __forceinline__ int vy_fixed_mul(int a, int b) {
    return (int)(unsigned)(vy_u64)(((long long)a * (long long)b) >> 16);
}
__device__ __forceinline__ unsigned vy_fixed_mul(unsigned a, unsigned b) {
    return (unsigned)(vy_u64)(((long long)(int)a * (long long)(int)b) >> 16);
}

__device__ __forceinline__ unsigned vy_ctz(unsigned x) { return x == 0u ? 32u : (unsigned)(__ffs((int)x) - 1); }

__device__ __forceinline__ bool vy_isnan(float a) { return a != a; }
__device__ __forceinline__ bool vy_isnan(double a) { return a != a; }
__device__ __forceinline__ bool vy_isinf(float a) { return fabsf(a) == __int_as_float(0x7f800000); }
__device__ __forceinline__ bool vy_isinf(double a) { return fabs(a) == __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ bool vy_isfinite(float a) { return fabsf(a) < __int_as_float(0x7f800000); }
__device__ __forceinline__ bool vy_isfinite(double a) { return fabs(a) < __longlong_as_double(0x7ff0000000000000LL); }

/* float -> int: truncate toward zero, saturate, NaN -> 0 (Rust `as`); the comparisons are in
   double, as numba's helpers compare */
template <typename F> __device__ __forceinline__ int vy_f2i(F x) {
    if (x != x) return 0;
    if ((double)x >= 2147483647.0) return 2147483647;
    if ((double)x <= -2147483648.0) return -2147483647 - 1;
    return (int)(long long)x;
}
template <typename F> __device__ __forceinline__ unsigned vy_f2u(F x) {
    if (x != x || (double)x <= 0.0) return 0u;
    if ((double)x >= 4294967295.0) return 4294967295u;
    return (unsigned)(long long)x;
}

/* a load past the end gives 0 of the element type */
template <typename T> __device__ __forceinline__ T vy_ld(const T* b, long long n, unsigned i) {
    return (long long)i < n ? b[i] : (T)0;
}

__device__ __forceinline__ double vy_exch(double* p, double v) {
    return __longlong_as_double((long long)atomicExch((vy_u64*)p, (vy_u64)__double_as_longlong(v)));
}
template <typename T> __device__ __forceinline__ T vy_exch(T* p, T v) { return atomicExch(p, v); }

__device__ __forceinline__ unsigned vy_laneid() {
    unsigned r; asm volatile("mov.u32 %0, %%laneid;" : "=r"(r)); return r;
}
__device__ __forceinline__ unsigned vy_lanemask_lt() {
    unsigned r; asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(r)); return r;
}
'''

#: the warp-aggregated atomic adds (vyre/codegen/cuda.py ``WARP_ADD`` says when and why), in C
C_WARP_ADD = r'''
template <typename T> __device__ T vy_warp_add(T* buf, long long n, unsigned idx, T val, long long site) {
    unsigned mask = __activemask();
    if (mask == 0xFFFFFFFFu) {
        long long key = (long long)idx | (site << 32);
        if (__all_sync(mask, __shfl_sync(mask, key, 0) == key)) {
            T v = val;
            v += __shfl_down_sync(mask, v, 16);
            v += __shfl_down_sync(mask, v, 8);
            v += __shfl_down_sync(mask, v, 4);
            v += __shfl_down_sync(mask, v, 2);
            v += __shfl_down_sync(mask, v, 1);
            if (vy_laneid() == 0u && (long long)idx < n) atomicAdd(&buf[idx], v);
            return (T)0;
        }
    }
    if ((long long)idx < n) atomicAdd(&buf[idx], val);
    return (T)0;
}

template <typename T> __device__ T vy_warp_count(T* buf, long long n, unsigned idx, T val, long long site) {
    unsigned mask = __activemask();
    long long key = (long long)idx | (site << 32);
    unsigned peers = __match_any_sync(mask, key);
    if ((peers & vy_lanemask_lt()) == 0u && (long long)idx < n)
        atomicAdd(&buf[idx], (T)((unsigned)val * (unsigned)__popc(peers)));  /* wraps, as n adds would */
    return (T)0;
}
'''
