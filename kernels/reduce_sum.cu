// reduce_sum of an f32 buffer.
//
// Deterministic (`reduce_chunks` then `reduce_partials`): the CPU's `chunked_tree` exactly —
// 16 Ki-element chunks, each summed as 8 interleaved lanes in ascending order then the lanes by
// a fixed tree, then the chunk partials by a fixed pairwise tree. Bit-identical to the CPU.
// Nondeterministic (`reduce_atomic`): each block sums its slice by a shared-memory tree and
// adds it to the result with atomicAdd, in whatever order the blocks finish.
#include "common.cuh"

#define CHUNK 16384
#define CHUNKS_PER_BLOCK 32

// 256 threads per block: thread t handles lane t % 8 of chunk blockIdx.x * 32 + t / 8.
extern "C" __global__ void reduce_chunks(const float* x, u64 n, float* partials, u64 chunks) {
    __shared__ float lanes[CHUNKS_PER_BLOCK * 8];
    u32 t = threadIdx.x;
    u64 c = (u64)blockIdx.x * CHUNKS_PER_BLOCK + t / 8;
    float s = 0.0f;
    if (c < chunks) {
        u64 start = c * CHUNK;
        u64 len = n - start < CHUNK ? n - start : CHUNK;
        s = lane_sum(x + start, len, t % 8);
    }
    lanes[t] = s;
    __syncthreads();
    if (t % 8 == 0 && c < chunks) partials[c] = pairwise8(&lanes[t]);
}

// One thread: the pairwise tree over the chunk partials.
extern "C" __global__ void reduce_partials(const float* partials, u32 chunks, float* out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = pairwise_sum(partials, chunks);
}

// 256 threads per block; grid-stride loads, block tree in shared memory, one atomicAdd per block.
extern "C" __global__ void reduce_atomic(const float* x, u64 n, float* out) {
    __shared__ float s[256];
    float acc = 0.0f;
    u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (u32 h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
