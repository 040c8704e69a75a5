// softmax over the last axis, one block per row, in the CPU's order: the row maximum, then
// exp(x - max), then cpu::chunk_sum of the exponentials (8 lanes + fixed tree), then division.
// Only expf may differ from the CPU's libm in the last bits.
#include "common.cuh"

extern "C" __global__ void softmax_rows(const float* x, float* y, u32 rows, u32 cols) {
    __shared__ float red[256];
    u32 r = blockIdx.x, t = threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (u64)r * cols;
    float* yr = y + (u64)r * cols;
    float m = __int_as_float(0xff800000);  // -infinity
    for (u32 i = t; i < cols; i += blockDim.x) m = fmaxf(m, xr[i]);
    red[t] = m;
    __syncthreads();
    for (u32 h = blockDim.x / 2; h > 0; h /= 2) {
        if (t < h) red[t] = fmaxf(red[t], red[t + h]);
        __syncthreads();
    }
    m = red[0];
    for (u32 i = t; i < cols; i += blockDim.x) yr[i] = expf(xr[i] - m);
    float s = block_chunk_sum(yr, cols, red);
    for (u32 i = t; i < cols; i += blockDim.x) yr[i] = yr[i] / s;
}
