// scatter_add: out[index[i], :] += src[i, :] for src [n x d], out [m x d] from zero.
//
// Atomic (nondeterministic): one thread per source element, atomicAdd into the output.
// Sorted (deterministic): given the stable sort of source rows by index (`order`, with row r's
// sources at order[start[r] .. start[r + 1]]), one thread per output element sums its sources in
// ascending source order from 0 — the CPU's `sorted_segments` order, so bit-identical to it.
#include "common.cuh"

extern "C" __global__ void scatter_atomic(const float* src, const long long* index, float* out, u64 n,
                                          u32 d) {
    u64 total = n * d, step = (u64)gridDim.x * blockDim.x;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        u64 i = e / d, j = e % d;
        atomicAdd(&out[(u64)index[i] * d + j], src[e]);
    }
}

extern "C" __global__ void scatter_segments(const float* src, const u64* order, const u64* start,
                                            float* out, u32 m, u32 d) {
    u64 total = (u64)m * d, step = (u64)gridDim.x * blockDim.x;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        u64 r = e / d, j = e % d;
        float acc = 0.0f;
        for (u64 s = start[r]; s < start[r + 1]; ++s) acc += src[order[s] * d + j];
        out[e] = acc;
    }
}
