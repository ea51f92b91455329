/* <vyre.codegen.c_ops.C_PRELUDE> */

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

/* C_WARP_ADD */

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
