// vyre generated kernel: target cuda (NVRTC C++), cuda-c v2. Do not edit.
/* <vyre.codegen.c_ops.C_PRELUDE> */


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

extern "C" __global__ void vyre_kernel(void* b0_x_meminfo, void* b0_x_parent, long long b0_x_nitems, long long b0_x_itemsize, float* b0_x, long long n0_x, long long b0_x_stride, void* b1_out_meminfo, void* b1_out_parent, long long b1_out_nitems, long long b1_out_itemsize, float* b1_out, long long n1_out, long long b1_out_stride) {
    const unsigned _lid0 = threadIdx.x, _wg0 = blockIdx.x, _gid0 = _wg0 * 64u + _lid0;
    const unsigned _lid1 = threadIdx.y, _wg1 = blockIdx.y, _gid1 = _wg1 * 1u + _lid1;
    const unsigned _lid2 = threadIdx.z, _wg2 = blockIdx.z, _gid2 = _wg2 * 1u + _lid2;
    const unsigned _lin = _lid0 + _lid1 * 64u + _lid2 * 64u;
    const unsigned _lane = _lin & 31u;
    float v1_v = vy_ld(b0_x, n0_x, _gid0);
    float _sg2 = v1_v;
    _sg2 = (_sg2 + __shfl_sync(0xFFFFFFFFu, _sg2, (int)(_lane ^ 16u)));
    _sg2 = (_sg2 + __shfl_sync(0xFFFFFFFFu, _sg2, (int)(_lane ^ 8u)));
    _sg2 = (_sg2 + __shfl_sync(0xFFFFFFFFu, _sg2, (int)(_lane ^ 4u)));
    _sg2 = (_sg2 + __shfl_sync(0xFFFFFFFFu, _sg2, (int)(_lane ^ 2u)));
    _sg2 = (_sg2 + __shfl_sync(0xFFFFFFFFu, _sg2, (int)(_lane ^ 1u)));
    float v3_s = _sg2;
    if (((_lid0 & 31u) == 0u)) {
        float v4__old = vy_warp_add(b1_out, n1_out, 0u, v3_s, 1LL);
    }
}
