// vyre generated kernel: target cuda (NVRTC C++), cuda-c v1. Do not edit.
/* <vyre.codegen.c_ops.C_PRELUDE> */

static __device__ void vy_invocation(unsigned _gid0, unsigned* b0_keys, long long n0_keys, unsigned* b1_counts, long long n1_counts) {
    const unsigned _gid1 = 0u, _gid2 = 0u;
    unsigned v1_i = _gid0;
    if ((v1_i < ((unsigned)n0_keys))) {
        unsigned v2__old = ((long long)(vy_mod(b0_keys[v1_i], ((unsigned)n1_counts))) < n1_counts ? atomicAdd(&b1_counts[vy_mod(b0_keys[v1_i], ((unsigned)n1_counts))], 1u) : ((unsigned)0));
    }
}

extern "C" __global__ void vyre_kernel(void* b0_keys_meminfo, void* b0_keys_parent, long long b0_keys_nitems, long long b0_keys_itemsize, unsigned* b0_keys, long long n0_keys, long long b0_keys_stride, void* b1_counts_meminfo, void* b1_counts_parent, long long b1_counts_nitems, long long b1_counts_itemsize, unsigned* b1_counts, long long n1_counts, long long b1_counts_stride, long long _n, long long _ipt) {
    const long long _t = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    const long long _stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long _j = 0; _j < _ipt; ++_j) {
        const long long _g = _t + _j * _stride;
        if (_g < _n) vy_invocation((unsigned)_g, b0_keys, n0_keys, b1_counts, n1_counts);
    }
}
