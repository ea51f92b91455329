// vyre generated kernel: target cuda (NVRTC C++), cuda-c v2. Do not edit.
/* <vyre.codegen.c_ops.C_PRELUDE> */

static __device__ void vy_invocation(unsigned _gid0, unsigned* b0_keys, long long n0_keys, unsigned* b1_counts, long long n1_counts) {
    const unsigned _gid1 = 0u, _gid2 = 0u;
    unsigned v1_i = _gid0;
    if ((v1_i < ((unsigned)n0_keys))) {
        unsigned v2__old = ((long long)(vy_mod(b0_keys[v1_i], ((unsigned)n1_counts))) < n1_counts ? atomicAdd(&b1_counts[vy_mod(b0_keys[v1_i], ((unsigned)n1_counts))], 1u) : ((unsigned)0));
    }
}

static __device__ void vy_interleaved(long long _g, long long _stride, unsigned* b0_keys, long long n0_keys, unsigned* b1_counts, long long n1_counts) {
    const unsigned _gid1 = 0u, _gid2 = 0u;
    const unsigned _gid0_0 = (unsigned)(_g + 0LL * _stride);
    const unsigned _gid0_1 = (unsigned)(_g + 1LL * _stride);
    const unsigned _gid0_2 = (unsigned)(_g + 2LL * _stride);
    const unsigned _gid0_3 = (unsigned)(_g + 3LL * _stride);
    unsigned v3_i = _gid0_0;
    unsigned v4_i = _gid0_1;
    unsigned v5_i = _gid0_2;
    unsigned v6_i = _gid0_3;
    const bool _c7 = (v3_i < ((unsigned)n0_keys));
    const bool _c8 = (v4_i < ((unsigned)n0_keys));
    const bool _c9 = (v5_i < ((unsigned)n0_keys));
    const bool _c10 = (v6_i < ((unsigned)n0_keys));
    if (_c7 && _c8 && _c9 && _c10) {
        unsigned v11__old = ((long long)(vy_mod(b0_keys[v3_i], ((unsigned)n1_counts))) < n1_counts ? atomicAdd(&b1_counts[vy_mod(b0_keys[v3_i], ((unsigned)n1_counts))], 1u) : ((unsigned)0));
        unsigned v12__old = ((long long)(vy_mod(b0_keys[v4_i], ((unsigned)n1_counts))) < n1_counts ? atomicAdd(&b1_counts[vy_mod(b0_keys[v4_i], ((unsigned)n1_counts))], 1u) : ((unsigned)0));
        unsigned v13__old = ((long long)(vy_mod(b0_keys[v5_i], ((unsigned)n1_counts))) < n1_counts ? atomicAdd(&b1_counts[vy_mod(b0_keys[v5_i], ((unsigned)n1_counts))], 1u) : ((unsigned)0));
        unsigned v14__old = ((long long)(vy_mod(b0_keys[v6_i], ((unsigned)n1_counts))) < n1_counts ? atomicAdd(&b1_counts[vy_mod(b0_keys[v6_i], ((unsigned)n1_counts))], 1u) : ((unsigned)0));
    } else if (!(_c7 || _c8 || _c9 || _c10)) {
    } else {
        for (int _q = 0; _q < 4; ++_q) vy_invocation((unsigned)(_g + _q * _stride), b0_keys, n0_keys, b1_counts, n1_counts);
        return;
    }
}

extern "C" __global__ void vyre_kernel(void* b0_keys_meminfo, void* b0_keys_parent, long long b0_keys_nitems, long long b0_keys_itemsize, unsigned* b0_keys, long long n0_keys, long long b0_keys_stride, void* b1_counts_meminfo, void* b1_counts_parent, long long b1_counts_nitems, long long b1_counts_itemsize, unsigned* b1_counts, long long n1_counts, long long b1_counts_stride, long long _n, long long _ipt) {
    const long long _t = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    const long long _stride = (long long)gridDim.x * (long long)blockDim.x;
    long long _j = 0;
    while (_j + 4 <= _ipt && _t + (_j + 3) * _stride < _n) {
        vy_interleaved(_t + _j * _stride, _stride, b0_keys, n0_keys, b1_counts, n1_counts);
        _j += 4;
    }
    for (; _j < _ipt; ++_j) {
        const long long _g = _t + _j * _stride;
        if (_g < _n) vy_invocation((unsigned)_g, b0_keys, n0_keys, b1_counts, n1_counts);
    }
}
