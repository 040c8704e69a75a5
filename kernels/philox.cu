// Fills out[0..n) with words offset..offset+n of a Philox stream, for any grid size: each thread
// computes whole Philox blocks (grid-stride) and writes the words that fall in the range.
#include "philox.cuh"

extern "C" __global__ void philox_fill(u32* out, u64 n, u64 seed, u64 stream, u64 offset) {
    if (n == 0) return;
    u64 first = offset >> 2, last = (offset + n - 1) >> 2;
    u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 b = first + (u64)blockIdx.x * blockDim.x + threadIdx.x; b <= last; b += step) {
        PhiloxBlock w = philox_block(seed, stream, b);
        for (u32 lane = 0; lane < 4; ++lane) {
            u64 idx = 4 * b + lane;
            if (idx >= offset && idx < offset + n) out[idx - offset] = w.w[lane];
        }
    }
}
