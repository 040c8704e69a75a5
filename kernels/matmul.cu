// matmul C[m x n] = A[m x k] . B[k x n], f32, row-major.
//
// Tiled (deterministic): TILE x TILE threads per block, tiles of A and B staged in shared
// memory; every C element is accumulated over k in ascending order from 0 with separate multiply
// and add (compiled with --fmad=false), which is the CPU's order: bit-identical to the CPU's
// tiled kernels, for either tile size.
// Split-K (nondeterministic): `splits` segments of k, each accumulated as above, then added into
// C (zeroed first) with atomicAdd in whatever order the segments finish.
#include "common.cuh"

template <int TILE>
__device__ __forceinline__ float tile_dot(const float* A, const float* B, u32 m, u32 k, u32 n,
                                          u32 k0, u32 k1, u32 tile_row, u32 tile_col) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    u32 tx = threadIdx.x, ty = threadIdx.y;
    u32 row = tile_row * TILE + ty, col = tile_col * TILE + tx;
    float acc = 0.0f;
    for (u32 t0 = k0; t0 < k1; t0 += TILE) {
        u32 ka = t0 + tx, kb = t0 + ty;
        As[ty][tx] = (row < m && ka < k1) ? A[(u64)row * k + ka] : 0.0f;
        Bs[ty][tx] = (col < n && kb < k1) ? B[(u64)kb * n + col] : 0.0f;
        __syncthreads();
        u32 len = k1 - t0 < TILE ? k1 - t0 : TILE;
        for (u32 kk = 0; kk < len; ++kk) acc = acc + As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    return acc;
}

extern "C" __global__ void matmul_tiled16(const float* A, const float* B, float* C, u32 m, u32 k, u32 n) {
    float acc = tile_dot<16>(A, B, m, k, n, 0, k, blockIdx.y, blockIdx.x);
    u32 row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    if (row < m && col < n) C[(u64)row * n + col] = acc;
}

extern "C" __global__ void matmul_tiled32(const float* A, const float* B, float* C, u32 m, u32 k, u32 n) {
    float acc = tile_dot<32>(A, B, m, k, n, 0, k, blockIdx.y, blockIdx.x);
    u32 row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    if (row < m && col < n) C[(u64)row * n + col] = acc;
}

// 16 x 16 threads; blockIdx.x = tile column * splits + segment, so the segments of one tile are
// neighbouring blocks that run at the same time and race on their atomicAdds. Segment s covers
// k in [s * seg, min((s + 1) * seg, k)).
extern "C" __global__ void matmul_splitk_atomic(const float* A, const float* B, float* C, u32 m, u32 k,
                                                u32 n, u32 seg, u32 splits) {
    u32 s = blockIdx.x % splits, tile_col = blockIdx.x / splits;
    u32 k0 = s * seg;
    u32 k1 = k0 + seg < k ? k0 + seg : k;
    if (k0 >= k1) return;  // uniform per block: no thread is left at a barrier
    float acc = tile_dot<16>(A, B, m, k, n, k0, k1, blockIdx.y, tile_col);
    u32 row = blockIdx.y * 16 + threadIdx.y, col = tile_col * 16 + threadIdx.x;
    if (row < m && col < n) atomicAdd(&C[(u64)row * n + col], acc);
}
