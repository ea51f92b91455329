// vyre generated kernel: target cuda (NVRTC C++), cuda-c v2. Do not edit.
/* <vyre.codegen.c_ops.C_PRELUDE> */

static __device__ void vy_invocation(unsigned _gid0, float* b0_a, long long n0_a, float* b1_x, long long n1_x, float* b2_y, long long n2_y, float* b3_out, long long n3_out) {
    const unsigned _gid1 = 0u, _gid2 = 0u;
    unsigned v1_i = _gid0;
    if ((v1_i < ((unsigned)n3_out))) {
        b3_out[v1_i] = ((vy_ld(b0_a, n0_a, 0u) * vy_ld(b1_x, n1_x, v1_i)) + vy_ld(b2_y, n2_y, v1_i));
    }
}

static __device__ void vy_interleaved(long long _g, long long _stride, float* b0_a, long long n0_a, float* b1_x, long long n1_x, float* b2_y, long long n2_y, float* b3_out, long long n3_out) {
    const unsigned _gid1 = 0u, _gid2 = 0u;
    const unsigned _gid0_0 = (unsigned)(_g + 0LL * _stride);
    const unsigned _gid0_1 = (unsigned)(_g + 1LL * _stride);
    const unsigned _gid0_2 = (unsigned)(_g + 2LL * _stride);
    const unsigned _gid0_3 = (unsigned)(_g + 3LL * _stride);
    unsigned v2_i = _gid0_0;
    unsigned v3_i = _gid0_1;
    unsigned v4_i = _gid0_2;
    unsigned v5_i = _gid0_3;
    const bool _c6 = (v2_i < ((unsigned)n3_out));
    const bool _c7 = (v3_i < ((unsigned)n3_out));
    const bool _c8 = (v4_i < ((unsigned)n3_out));
    const bool _c9 = (v5_i < ((unsigned)n3_out));
    if (_c6 && _c7 && _c8 && _c9) {
        float _v10 = ((vy_ld(b0_a, n0_a, 0u) * vy_ld(b1_x, n1_x, v2_i)) + vy_ld(b2_y, n2_y, v2_i));
        float _v11 = ((vy_ld(b0_a, n0_a, 0u) * vy_ld(b1_x, n1_x, v3_i)) + vy_ld(b2_y, n2_y, v3_i));
        float _v12 = ((vy_ld(b0_a, n0_a, 0u) * vy_ld(b1_x, n1_x, v4_i)) + vy_ld(b2_y, n2_y, v4_i));
        float _v13 = ((vy_ld(b0_a, n0_a, 0u) * vy_ld(b1_x, n1_x, v5_i)) + vy_ld(b2_y, n2_y, v5_i));
        b3_out[v2_i] = _v10;
        b3_out[v3_i] = _v11;
        b3_out[v4_i] = _v12;
        b3_out[v5_i] = _v13;
    } else if (!(_c6 || _c7 || _c8 || _c9)) {
    } else {
        for (int _q = 0; _q < 4; ++_q) vy_invocation((unsigned)(_g + _q * _stride), b0_a, n0_a, b1_x, n1_x, b2_y, n2_y, b3_out, n3_out);
        return;
    }
}

extern "C" __global__ void vyre_kernel(void* b0_a_meminfo, void* b0_a_parent, long long b0_a_nitems, long long b0_a_itemsize, float* b0_a, long long n0_a, long long b0_a_stride, void* b1_x_meminfo, void* b1_x_parent, long long b1_x_nitems, long long b1_x_itemsize, float* b1_x, long long n1_x, long long b1_x_stride, void* b2_y_meminfo, void* b2_y_parent, long long b2_y_nitems, long long b2_y_itemsize, float* b2_y, long long n2_y, long long b2_y_stride, void* b3_out_meminfo, void* b3_out_parent, long long b3_out_nitems, long long b3_out_itemsize, float* b3_out, long long n3_out, long long b3_out_stride, long long _n, long long _ipt) {
    const long long _t = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    const long long _stride = (long long)gridDim.x * (long long)blockDim.x;
    long long _j = 0;
    while (_j + 4 <= _ipt && _t + (_j + 3) * _stride < _n) {
        vy_interleaved(_t + _j * _stride, _stride, b0_a, n0_a, b1_x, n1_x, b2_y, n2_y, b3_out, n3_out);
        _j += 4;
    }
    for (; _j < _ipt; ++_j) {
        const long long _g = _t + _j * _stride;
        if (_g < _n) vy_invocation((unsigned)_g, b0_a, n0_a, b1_x, n1_x, b2_y, n2_y, b3_out, n3_out);
    }
}
