// A tiny host emulation of the CUDA execution model, just enough to run kernels/*.cu on the CPU
// in tests without a GPU (tests/it/kernels_host.rs): every thread of a block is an OS thread,
// blocks run one after another, `__syncthreads` is a std::barrier, `__shared__` variables are
// function statics (shared by the block that is running), atomicAdd is a compare-and-swap.
// Compiled with -ffp-contract=off, the host counterpart of NVRTC's --fmad=false.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* emu_barrier = nullptr;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __constant__

inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline long long __double_as_longlong(double d) {
    long long i;
    std::memcpy(&i, &d, 8);
    return i;
}
inline double __longlong_as_double(long long i) {
    double d;
    std::memcpy(&d, &i, 8);
    return d;
}
inline float atomicAdd(float* p, float v) {
    std::atomic_ref<float> r(*p);
    float old = r.load();
    while (!r.compare_exchange_weak(old, old + v)) {
    }
    return old;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}

// Runs `body(data)` on every thread of a grid, block by block; one launch at a time (the grid
// shape, the barrier and the `__shared__` statics are process-wide).
extern "C" void emu_launch(void (*body)(void*), void* data, unsigned gx, unsigned gy, unsigned gz,
                           unsigned bx, unsigned by, unsigned bz) {
    static std::mutex one_at_a_time;
    std::lock_guard<std::mutex> lock(one_at_a_time);
    gridDim = {gx, gy, gz};
    blockDim = {bx, by, bz};
    unsigned n = bx * by * bz;
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; ++x) {
                std::barrier<> bar(n);
                emu_barrier = &bar;
                std::vector<std::thread> threads;
                for (unsigned t = 0; t < n; ++t)
                    threads.emplace_back([=] {
                        blockIdx = {x, y, z};
                        threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
                        body(data);
                    });
                for (auto& th : threads) th.join();
            }
}
