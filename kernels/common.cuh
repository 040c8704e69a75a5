// Fixed-order float sums shared by the kernels; the same orders as src/backend/cpu.rs.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;

// Sum of 8 lane values by the fixed balanced tree ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)),
// which is cpu::pairwise_sum of 8 values.
__device__ __forceinline__ float pairwise8(const float* l) {
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// cpu::pairwise_sum: 0 for none, the value for one, else the sum of the halves [0, n/2) and
// [n/2, n).
__device__ float pairwise_sum(const float* x, u32 n) {
    if (n == 0) return 0.0f;
    if (n == 1) return x[0];
    u32 h = n / 2;
    return pairwise_sum(x, h) + pairwise_sum(x + h, n - h);
}

// Lane `lane` (0..8) of cpu::chunk_sum over x[0..n): the elements with index % 8 == lane,
// summed in ascending order from 0.
__device__ __forceinline__ float lane_sum(const float* x, u64 n, u32 lane) {
    float s = 0.0f;
    for (u64 i = lane; i < n; i += 8) s += x[i];
    return s;
}

// cpu::chunk_sum of x[0..n) computed by the first 8 threads of the block (blockDim.x >= 8);
// every thread of the block gets the result. `scratch` holds at least 8 floats of shared memory.
__device__ float block_chunk_sum(const float* x, u64 n, float* scratch) {
    __syncthreads();
    if (threadIdx.x < 8) scratch[threadIdx.x] = lane_sum(x, n, threadIdx.x);
    __syncthreads();
    float s = pairwise8(scratch);
    __syncthreads();
    return s;
}
