// A sketch of an op tracer below Python, for benches/native_floor.py: a RecordFunction
// observer (torch's C++ callback at every dispatched op, the hook torch's profiler uses), in
// one of two modes.
//   observe: counts the ops; what intercepting every op costs without a Python frame per op
//            (a Python TorchDispatchMode that only calls the op: the "floor" of the op bench).
//   hash:    also reads the bytes a tracer must read: the inputs of each op the program called
//            (depth 1; bitexact's tracer checks them against its digest cache with an XXH3,
//            stood in for by a vectorized sum of the words) and the outputs of each leaf op
//            (fingerprinted with the trace fingerprint's arithmetic, docs/concepts/
//            fingerprint.md, both lanes, 16 accumulators a lane as src/fingerprint.rs).
// No records are written and nothing is cached: an estimate of a native tracer's floor, not
// a tracer. CPU tensors only.
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>

namespace {

at::CallbackHandle handle = 0;
std::atomic<uint64_t> ops{0}, fingerprinted{0}, checked{0}, sink{0};
int hashing = 0;
thread_local int depth = 0;
thread_local bool leaf = false;

inline uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

const uint64_t* words(const at::Tensor& t, size_t* n) {
    if (!t.defined() || !t.has_storage() || !t.is_cpu() || !t.is_contiguous()) return nullptr;
    *n = t.nbytes() / 8;
    return static_cast<const uint64_t*>(t.const_data_ptr());
}

uint64_t fingerprint(const at::Tensor& t) {
    size_t n = 0;
    const uint64_t* w = words(t, &n);
    if (w == nullptr) return 0;
    constexpr int B = 16;
    uint64_t a0[B] = {0}, a1[B] = {0};
    size_t i = 0;
    for (; i + B <= n; i += B)
        for (int j = 0; j < B; ++j) {
            uint64_t k = i + j + 1;
            a0[j] += mix(w[i + j] ^ (k * 0x9e3779b97f4a7c15ULL));
            a1[j] += mix(w[i + j] ^ (k * 0xd1b54a32d192ed03ULL));
        }
    uint64_t s = 0;
    for (; i < n; ++i) s += mix(w[i] ^ ((i + 1) * 0x9e3779b97f4a7c15ULL));
    for (int j = 0; j < B; ++j) s += a0[j] ^ a1[j];
    fingerprinted += t.nbytes();
    return s;
}

uint64_t check(const at::Tensor& t) {
    size_t n = 0;
    const uint64_t* w = words(t, &n);
    if (w == nullptr) return 0;
    uint64_t a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) a[j] += w[i + j] ^ (w[i + j] >> 7);
    uint64_t s = 0;
    for (int j = 0; j < 8; ++j) s += a[j];
    checked += t.nbytes();
    return s;
}

template <typename F>
void each(c10::ArrayRef<const c10::IValue> values, F f) {
    for (const auto& v : values) {
        if (v.isTensor()) {
            sink += f(v.toTensor());
        } else if (v.isTensorList()) {
            auto list = v.toTensorList();
            for (size_t i = 0; i < list.size(); ++i) sink += f(list.get(i));
        }
    }
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    ++ops;
    ++depth;
    leaf = true;  // until an op starts inside this one
    if (hashing && depth == 1 && fn.needsInputs()) each(fn.inputs(), check);
    return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
    --depth;
    if (hashing && leaf && fn.needsOutputs()) {
        const auto& outs = fn.outputs();
        each(c10::ArrayRef<const c10::IValue>(outs.data(), outs.size()), fingerprint);
    }
    leaf = false;
}

}  // namespace

extern "C" void observer_start(int hash) {
    hashing = hash;
    handle = at::addGlobalCallback(
        at::RecordFunctionCallback(on_start, on_end)
            .needsInputs(hash != 0)
            .needsOutputs(hash != 0)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}
extern "C" void observer_stop() { at::removeCallback(handle); }
extern "C" uint64_t observer_ops() { return ops.load(); }
extern "C" uint64_t observer_fingerprinted() { return fingerprinted.load(); }
extern "C" uint64_t observer_checked() { return checked.load(); }
