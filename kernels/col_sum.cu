// col_sum: the column sums of a [rows x cols] f32 buffer (a bias gradient).
//
// Deterministic (`col_sum_fixed`): one thread per column adds the rows in ascending order,
// starting from 0 — the CPU's `fixed_rows` exactly, so bit-identical to it.
// Nondeterministic (`col_sum_atomic`): blockIdx.y takes ATOMIC_ROWS rows; each thread sums its
// column over those rows and adds the result to the output with atomicAdd, in whatever order
// the row blocks finish (the CPU's `atomic_rows` on a GPU).
#include "common.cuh"

#define ATOMIC_ROWS 2

extern "C" __global__ void col_sum_fixed(const float* x, u32 rows, u32 cols, float* out) {
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (u32 r = 0; r < rows; ++r) s += x[(u64)r * cols + c];
    out[c] = s;
}

extern "C" __global__ void col_sum_atomic(const float* x, u32 rows, u32 cols, float* out) {
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    u32 r0 = blockIdx.y * ATOMIC_ROWS;
    if (c >= cols) return;
    float s = 0.0f;
    for (u32 r = r0; r < rows && r < r0 + ATOMIC_ROWS; ++r) s += x[(u64)r * cols + c];
    atomicAdd(out + c, s);
}
