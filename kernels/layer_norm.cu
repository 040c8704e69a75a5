// layer_norm over the last axis, one block per row, in the CPU's order: mean = chunk_sum(x) / n,
// var = chunk_sum((x - mean)^2) / n, inv = 1 / sqrt(var + eps), y = (x - mean) * inv * gamma + beta
// with separate multiplies and adds (--fmad=false) and IEEE division and sqrt: bit-identical
// to the CPU.
#include "common.cuh"

extern "C" __global__ void layer_norm_rows(const float* x, const float* gamma, const float* beta,
                                           float* y, u32 rows, u32 cols, float eps) {
    __shared__ float red[8];
    u32 r = blockIdx.x, t = threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (u64)r * cols;
    float* yr = y + (u64)r * cols;
    float n = (float)cols;
    float mean = block_chunk_sum(xr, cols, red) / n;
    for (u32 i = t; i < cols; i += blockDim.x) {
        float c = xr[i] - mean;
        yr[i] = c * c;
    }
    float inv = 1.0f / sqrtf(block_chunk_sum(yr, cols, red) / n + eps);
    for (u32 i = t; i < cols; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
}
