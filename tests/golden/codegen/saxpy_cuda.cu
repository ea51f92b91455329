// vyre generated kernel: target cuda (NVRTC C++), cuda-c v1. Do not edit.
/* <vyre.codegen.c_ops.C_PRELUDE> */

static __device__ void vy_invocation(unsigned _gid0, float* b0_a, long long n0_a, float* b1_x, long long n1_x, float* b2_y, long long n2_y, float* b3_out, long long n3_out) {
    const unsigned _gid1 = 0u, _gid2 = 0u;
    unsigned v1_i = _gid0;
    if ((v1_i < ((unsigned)n3_out))) {
        b3_out[v1_i] = ((vy_ld(b0_a, n0_a, 0u) * vy_ld(b1_x, n1_x, v1_i)) + vy_ld(b2_y, n2_y, v1_i));
    }
}

extern "C" __global__ void vyre_kernel(void* b0_a_meminfo, void* b0_a_parent, long long b0_a_nitems, long long b0_a_itemsize, float* b0_a, long long n0_a, long long b0_a_stride, void* b1_x_meminfo, void* b1_x_parent, long long b1_x_nitems, long long b1_x_itemsize, float* b1_x, long long n1_x, long long b1_x_stride, void* b2_y_meminfo, void* b2_y_parent, long long b2_y_nitems, long long b2_y_itemsize, float* b2_y, long long n2_y, long long b2_y_stride, void* b3_out_meminfo, void* b3_out_parent, long long b3_out_nitems, long long b3_out_itemsize, float* b3_out, long long n3_out, long long b3_out_stride, long long _n, long long _ipt) {
    const long long _t = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    const long long _stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long _j = 0; _j < _ipt; ++_j) {
        const long long _g = _t + _j * _stride;
        if (_g < _n) vy_invocation((unsigned)_g, b0_a, n0_a, b1_x, n1_x, b2_y, n2_y, b3_out, n3_out);
    }
}
