// The op tracer's observer driver (bitexact._trace.observer; experimental): torch's
// RecordFunction callbacks, the hook torch's profiler uses, call the tracer's record path at
// every op instead of a Python TorchDispatchMode. Compiled against the running torch on first
// use (observer.py says how, and where it is kept).
//
// Which ops: those a dispatch mode would see. An op (RecordScope::FUNCTION) is traced when no
// CompositeImplicitAutograd kernel decomposes it above autograd (the ops it decomposes into
// are seen instead) and no traced op is running in this thread (a kernel's own calls run
// below the dispatch key, where a mode never sees them). benches/native_floor/opset.py checked
// the rule on three workloads: the same ops, but for autograd's gradient accumulation (add_
// here, add under a dispatch mode, which makes autograd accumulate out of place).
//
// Per traced op, once per operator: `resolve(name, overload)` -> (the OpOverload, how the
// tracer records it: IGNORED, PLAIN (it writes no argument and takes no generator: nothing to
// read before it runs) or OTHER). For an OTHER op, with the GIL: `before(func, args, kwargs,
// tensors)` at its start, with the arguments a dispatch mode would get (parse_arguments:
// torch's parseIValuesToPyArgsKwargs, not exported by libtorch_python), returns a token or
// None; at its end `after(token, func, args, kwargs, result, tensors)`. A PLAIN op makes one
// call, at its end: `plain(func, args, kwargs, result, tensors)`. `tensors`: the op's tensors
// read here (describe: its inputs, then at its end its results), for the native lane, which
// then reads none through torch's Python API. Ops run by those
// callbacks themselves are not traced. An op that raised (no outputs where its schema returns
// some) is not recorded, as the dispatch mode records nothing for it. No exception leaves a callback: a
// Python error is printed as unraisable and the op goes unrecorded, never the program stopped.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

enum Kind : int { IGNORED = 0, PLAIN = 1, OTHER = 2 };

struct Op {
    const c10::FunctionSchema* schema = nullptr;
    int kind = IGNORED;
    PyObject* overload = nullptr;  // a strong reference, kept for the process's life
};

std::mutex ops_lock;
std::unordered_map<const c10::FunctionSchema*, Op> ops;
PyObject* resolve_cb = nullptr;
PyObject* before_cb = nullptr;
PyObject* after_cb = nullptr;
PyObject* plain_cb = nullptr;
at::CallbackHandle handle = 0;
std::atomic<uint64_t> generation{0};  // bumped by each start: a thread's state from before resets

thread_local std::vector<char> open_calls;  // per started RecordFunction: a traced op?
thread_local int traced_depth = 0;
thread_local bool in_python = false;
thread_local uint64_t thread_generation = 0;

PyObject* new_ref(PyObject* o) {  // Py_NewRef is Python 3.10+
    Py_INCREF(o);
    return o;
}

// Runs `body` with `in_python` set (ops it runs are not traced); false if it threw.
template <typename F>
bool python_call(F body) {
    in_python = true;
    bool ok = true;
    try {
        body();
    } catch (py::error_already_set& e) {
        e.restore();
        PyErr_WriteUnraisable(nullptr);
        ok = false;
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        PyErr_WriteUnraisable(nullptr);
        ok = false;
    }
    in_python = false;
    return ok;
}

struct Pending : at::ObserverContext {
    const Op* op;
    PyObject* token;  // nullptr for a PLAIN op
    // The op's arguments, kept for its end: the inputs RecordFunction hands the start
    // callback are boxed for that call only (Dispatcher::callWithDispatchKeySlowPath).
    std::vector<c10::IValue> inputs;
    PyObject* args;
    PyObject* kwargs;
};

bool is_default(const c10::Argument& arg, const c10::IValue& value) {
    return arg.default_value().has_value() && *arg.default_value() == value;
}

bool is_kind(const c10::Argument& arg, c10::TypeKind kind) {
    const auto& t = arg.real_type();
    if (t->kind() == kind) return true;
    auto opt = t->cast<c10::OptionalType>();
    return opt && opt->getElementType()->kind() == kind;
}

py::object to_python(const c10::Argument& arg, const c10::IValue& value) {
    if (value.isNone()) return py::none();
    if (is_kind(arg, c10::ScalarTypeType::Kind))
        return py::reinterpret_borrow<py::object>(
            reinterpret_cast<PyObject*>(torch::getTHPDtype(value.toScalarType())));
    if (is_kind(arg, c10::LayoutType::Kind))
        return py::reinterpret_borrow<py::object>(
            reinterpret_cast<PyObject*>(torch::getTHPLayout(value.toLayout())));
    if (is_kind(arg, c10::MemoryFormatType::Kind))
        return py::reinterpret_borrow<py::object>(
            torch::utils::getTHPMemoryFormat(value.toMemoryFormat()));
    return torch::jit::toPyObject(value);
}

// The (args, kwargs) a TorchDispatchMode gets for this call: positional arguments up to the
// last one that differs from its default, keyword-only ones that differ from theirs.
std::pair<py::tuple, py::dict> parse_arguments(const c10::FunctionSchema& schema,
                                               c10::ArrayRef<const c10::IValue> values) {
    const auto& params = schema.arguments();
    size_t kwarg_start = values.size();
    while (kwarg_start > 0 && params[kwarg_start - 1].kwarg_only()) --kwarg_start;
    size_t positional = kwarg_start;
    while (positional > 0 && is_default(params[positional - 1], values[positional - 1]))
        --positional;
    py::tuple args(positional);
    for (size_t i = 0; i < positional; ++i) args[i] = to_python(params[i], values[i]);
    py::dict kwargs;
    for (size_t i = kwarg_start; i < values.size(); ++i)
        if (!is_default(params[i], values[i]))
            kwargs[py::str(params[i].name())] = to_python(params[i], values[i]);
    return {std::move(args), std::move(kwargs)};
}

// Appends the tensors in `v` (nested lists and tuples) to `out`, as the tracer's
// state.collect_tensors finds them in the Python objects made of it: not an undefined tensor
// (None there), nor a number wrapped as a tensor (`x / 2`: a Python number there).
void collect(const c10::IValue& v, std::vector<at::Tensor>& out) {
    auto add = [&](const at::Tensor& t) {
        if (t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number()) out.push_back(t);
    };
    if (v.isTensor()) {
        add(v.toTensor());
    } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorVector()) add(t);
    } else if (v.isList()) {
        for (const c10::IValue& e : v.toListRef()) collect(e, out);
    } else if (v.isTuple()) {
        for (const c10::IValue& e : v.toTupleRef().elements()) collect(e, out);
    }
}

// Whether the lane may take `t` as this reads it: a plain host tensor with storage of its own
// (not another device or layout, not a negative or conjugate view, not a tensor subclass that
// handles its own ops).
bool readable(const at::Tensor& t) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    return t.is_cpu() && t.layout() == c10::kStrided && !t.is_nested() && !t.is_neg() &&
           !t.is_conj() && impl->has_storage() && !impl->key_set().has(c10::DispatchKey::Python);
}

// A PLAIN op's tensors as int64 words, for the native lane (bitexact._native.Lane.record's
// `tensors`): [inputs, results], then each tensor, inputs first (in the schema's order: a
// dispatch mode's args, then kwargs) then results, as [its dtype (a THPDtype*), its address,
// its dimensions + (contiguous ? 1 << 32 : 0), its shape, then its strides unless contiguous].
// None where one is not readable(), or reading one threw: the lane then reads the Python
// tensors.
py::object describe(c10::ArrayRef<const c10::IValue> inputs,
                    c10::ArrayRef<const c10::IValue> outputs) try {
    std::vector<at::Tensor> tensors;
    for (const auto& v : inputs) collect(v, tensors);
    size_t n_in = tensors.size();
    for (const auto& v : outputs) collect(v, tensors);
    std::vector<int64_t> words{static_cast<int64_t>(n_in),
                               static_cast<int64_t>(tensors.size() - n_in)};
    for (const at::Tensor& t : tensors) {
        if (!readable(t)) return py::none();
        bool contiguous = t.is_contiguous();
        words.push_back(reinterpret_cast<int64_t>(torch::getTHPDtype(t.scalar_type())));
        words.push_back(reinterpret_cast<int64_t>(t.const_data_ptr()));  // no copy-on-write copy
        words.push_back(t.dim() + (contiguous ? (int64_t{1} << 32) : 0));
        for (int64_t d : t.sizes()) words.push_back(d);
        if (!contiguous)
            for (int64_t s : t.strides()) words.push_back(s);
    }
    return py::bytes(reinterpret_cast<const char*>(words.data()),
                     words.size() * sizeof(int64_t));
} catch (const std::exception&) {
    return py::none();
}

// The operator of a call the tracer sees (else nullptr), resolved once.
const Op* traced_op(const at::RecordFunction& fn) {
    auto name = fn.operator_name();
    if (!name) return nullptr;
    auto op = c10::Dispatcher::singleton().findOp(*name);
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
        return nullptr;
    const auto* key = &op->schema();
    {
        std::lock_guard<std::mutex> guard(ops_lock);
        auto it = ops.find(key);
        if (it != ops.end()) return &it->second;
    }
    py::gil_scoped_acquire gil;
    Op resolved;
    resolved.schema = key;
    python_call([&] {  // an operator it cannot resolve stays IGNORED
        py::tuple pair = py::handle(resolve_cb)(name->name, name->overload_name);
        resolved.kind = pair[1].cast<int>();
        resolved.overload = py::object(pair[0]).release().ptr();
    });
    std::lock_guard<std::mutex> guard(ops_lock);
    return &ops.emplace(key, resolved).first->second;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    // A thread that never ran Python (an intra-op or interop worker: a scripted fork's task; a
    // c10d or autograd device thread) is one the tracer does not follow: nothing is traced
    // there, and the GIL is never taken there (its holder may be waiting on that thread).
    if (PyGILState_GetThisThreadState() == nullptr) {
        open_calls.push_back(false);
        return nullptr;
    }
    uint64_t now = generation.load(std::memory_order_relaxed);
    if (thread_generation != now) {  // calls left open when the observer was last removed
        open_calls.clear();
        traced_depth = 0;
        thread_generation = now;
    }
    const Op* known = nullptr;
    if (fn.scope() == at::RecordScope::FUNCTION && traced_depth == 0 && !in_python)
        known = traced_op(fn);
    open_calls.push_back(known != nullptr);
    if (known == nullptr) return nullptr;
    ++traced_depth;
    if (known->kind == IGNORED || known->overload == nullptr) return nullptr;
    auto pending = std::make_unique<Pending>();
    pending->op = known;
    pending->token = pending->args = pending->kwargs = nullptr;
    pending->inputs.assign(fn.inputs().begin(), fn.inputs().end());
    if (known->kind == PLAIN) return pending;  // all of it at the end
    py::gil_scoped_acquire gil;
    py::object token, args, kwargs;
    bool ok = python_call([&] {
        auto parsed = parse_arguments(*known->schema, fn.inputs());
        args = std::move(parsed.first);
        kwargs = std::move(parsed.second);
        token = py::handle(before_cb)(py::handle(known->overload), args, kwargs,
                                      describe(fn.inputs(), {}));
    });
    if (!ok || token.is_none()) return nullptr;
    pending->token = token.release().ptr();
    pending->args = args.release().ptr();
    pending->kwargs = kwargs.release().ptr();
    return pending;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
    if (open_calls.empty()) return;  // started before the observer was added
    bool traced = open_calls.back();
    open_calls.pop_back();
    if (traced) --traced_depth;
    auto* pending = static_cast<Pending*>(context);
    if (pending == nullptr) return;
    const auto& outs = fn.outputs();
    py::gil_scoped_acquire gil;
    if (!outs.empty() || pending->op->schema->returns().empty()) {  // else the op raised
        py::handle func(pending->op->overload);
        python_call([&] {
            py::object result = torch::jit::createPyObjectForStack(
                std::vector<c10::IValue>(outs.begin(), outs.end()));
            auto inputs = c10::ArrayRef<const c10::IValue>(pending->inputs.data(),
                                                           pending->inputs.size());
            auto outputs = c10::ArrayRef<const c10::IValue>(outs.data(), outs.size());
            if (pending->token == nullptr) {
                auto [args, kwargs] = parse_arguments(*pending->op->schema, inputs);
                py::handle plain(plain_cb);
                plain(func, args, kwargs, result, describe(inputs, outputs));
            } else {
                py::handle after(after_cb);
                after(py::handle(pending->token), func, py::handle(pending->args),
                      py::handle(pending->kwargs), result, describe(inputs, outputs));
            }
        });
    }
    Py_CLEAR(pending->token);
    Py_CLEAR(pending->args);
    Py_CLEAR(pending->kwargs);
    pending->inputs.clear();  // with the GIL: a tensor's last reference may free its PyObject
}

}  // namespace

extern "C" int bitexact_observer_start(PyObject* resolve, PyObject* before, PyObject* after,
                                       PyObject* plain) {
    if (handle != 0) return 0;
    Py_XDECREF(resolve_cb);
    Py_XDECREF(before_cb);
    Py_XDECREF(after_cb);
    Py_XDECREF(plain_cb);
    resolve_cb = new_ref(resolve);
    before_cb = new_ref(before);
    after_cb = new_ref(after);
    plain_cb = new_ref(plain);
    generation.fetch_add(1);
    handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                       .needsInputs(true)
                                       .needsOutputs(true)
                                       .needsIds(false)
                                       .scopes({at::RecordScope::FUNCTION}));
    return 1;
}

extern "C" void bitexact_observer_stop() {
    if (handle == 0) return;
    at::removeCallback(handle);
    handle = 0;
}
