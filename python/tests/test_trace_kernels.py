"""The kernels a compiled region launches (bitexact._trace.kernels): how an Inductor module's
kernel globals are wrapped and what their records hold, on a module shaped as Inductor writes
one (no compiler needed; tests/it/compiled_kernels.rs runs real Inductor code)."""

import importlib.util
import json
import textwrap

import pytest

torch = pytest.importorskip("torch")
from bitexact import _digest  # noqa: E402

pytestmark = pytest.mark.skipif(_digest._native is None, reason="needs bitexact._native")

from bitexact import _protocol, _trace  # noqa: E402
from bitexact._trace import kernel_source, kernels  # noqa: E402
from bitexact._trace import state as ts  # noqa: E402
from bitexact._fingerprint import fingerprint  # noqa: E402

from conftest import records, trace  # noqa: E402,F401  (the shared trace fixture)

# An Inductor wrapper module in miniature: a C++ kernel global (here a Python function doing
# what its C++ does), library calls through extern_kernels and aten, Inductor's seed buffer.
MODULE = textwrap.dedent('''\
    import torch
    from types import SimpleNamespace


    class _Compile:
        def cpp_pybinding(self, types, source):
            if "in_ptr1" in source:
                def kernel(in_out_ptr0, in_ptr0, in_ptr1):
                    g = torch.Generator().manual_seed(int(in_ptr0[0]))
                    in_out_ptr0.copy_(in_ptr1 + torch.randn(in_ptr1.shape, generator=g))
                return kernel

            def kernel(in_ptr0, out_ptr0):
                out_ptr0.copy_(in_ptr0 * 2)
            return kernel


    async_compile = _Compile()
    extern_kernels = SimpleNamespace(mm=torch.mm)
    aten = torch.ops.aten
    empty_strided_cpu = torch.empty_strided


    cpp_fused_mul_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r\'\'\'
    extern "C"  void  kernel(const float* in_ptr0,
                           float* out_ptr0)
    {
        out_ptr0[0] = in_ptr0[0] * 2;
    }
    \'\'\')


    cpp_fused_add_randn_like_1 = async_compile.cpp_pybinding(['float*', 'const int64_t*', 'const float*'], r\'\'\'
    extern "C"  void  kernel(float* in_out_ptr0,
                           const int64_t* in_ptr0,
                           const float* in_ptr1)
    {
        auto out_ptr0 = in_out_ptr0;
        auto tmp_acc0 = in_ptr1[0];
        out_ptr0[0] = tmp_acc0;
    }
    \'\'\')


    def call(args):
        x, w = args
        buf0 = empty_strided_cpu((2, 2), (2, 1), dtype=torch.float32)
        # Topologically Sorted Source Nodes: [mm], Original ATen: [aten.mm]
        extern_kernels.mm(x, w, out=buf0)
        buf1 = empty_strided_cpu((2, 2), (2, 1), dtype=torch.float32)
        cpp_fused_mul_0(buf0, buf1)
        buf2 = empty_strided_cpu((1, ), (1, ), dtype=torch.int64)
        # Topologically Sorted Source Nodes: [randn_like], Original ATen: [aten.randn_like]
        aten.randint.low_out(-9223372036854775808, 9223372036854775807, [1], out=buf2)
        buf3 = empty_strided_cpu((2, 2), (2, 1), dtype=torch.float32)
        cpp_fused_add_randn_like_1(buf3, buf2, buf1)
        return (buf3, )
''')


def _module(tmp_path):
    """The module above, loaded and instrumented, with a line map naming model.py's lines."""
    path = tmp_path / "wrapper.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("wrapper", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lines = MODULE.splitlines()
    at = {t: i + 1 for i, t in enumerate(lines) for t in [t.strip()]}
    linemap = [(at["extern_kernels.mm(x, w, out=buf0)"] - 1,
                '  File "/src/model.py", line 7, in forward\n    x @ w\n'),
               (at["buf1 = empty_strided_cpu((2, 2), (2, 1), dtype=torch.float32)"],
                '  File "/src/model.py", line 8, in forward\n    y * 2\n'),
               (at["buf2 = empty_strided_cpu((1, ), (1, ), dtype=torch.int64)"],
                '  File "/src/model.py", line 9, in forward\n    torch.randn_like(y)\n')]
    kernels.instrument(mod, str(path), linemap)
    return mod


def test_a_region_records_each_kernel_with_its_buffers_ops_lines_and_seeds(trace, tmp_path):
    mod = _module(tmp_path)
    _trace.start(trace)
    state = _trace._state
    x, w = torch.randn(2, 3), torch.randn(3, 2)
    mod.call([x, w])  # outside a region: nothing recorded
    with kernels.region(state, ts.stream_of(state), "Net", "compiled Net", "forward"):
        out = mod.call([x, w])[0]
    _trace.stop()
    rs = [r for r in records(trace) if "kernel" in r]  # (the eager ops inside are the mode's)
    assert [(r["phase"], r["module"], r["op"]) for r in rs] == [
        ("forward", "Net", "extern_kernels.mm"), ("forward", "Net", "cpp_fused_mul_0"),
        ("forward", "Net", "cpp_fused_add_randn_like_1")]
    mm, mul, rnd = rs
    label = lambda t: "f32[%s]:%s" % (",".join(map(str, t.shape)), fingerprint(t))  # noqa: E731
    prod = x @ w
    assert mm["in"] == [label(x), label(w)] and mm["out"] == [label(prod)]
    assert mm["kernel"] == {"fuses": ["aten::mm"], "at": ["/src/model.py:7"], "reduction": False}
    assert mul["in"] == [label(prod)] and mul["out"] == [label(prod * 2)]
    assert mul["kernel"] == {"fuses": ["aten::mul"], "at": ["/src/model.py:8"],
                             "reduction": False}
    # The seed buffer is the kernel's generator, not an input; the in_out_ptr handed a buffer
    # just allocated (no value yet) is no input either. The seeds' source line joins its own.
    assert rnd["in"] == [label(prod * 2)] and rnd["out"] == [label(out)]
    assert rnd["gen"].startswith(kernels.SEEDS_WHO + "|")
    assert rnd["kernel"] == {"fuses": ["aten::add", "aten::randn_like"],
                             "at": ["/src/model.py:9"], "reduction": True}
    assert all(r["src"] == rs[0]["src"] for r in rs)


def test_an_in_out_pointer_that_is_read_is_an_input():
    body = 'extern "C" void kernel(float* in_out_ptr0, const float* in_ptr0, float* out_ptr0, ' \
           'const int64_t ks0)\n{ auto tmp0 = in_out_ptr0[x0]; in_out_ptr0[x0] = tmp0; }'
    assert kernel_source.cpp_roles(body) == ["inout", "in", "out", None]
    stored = body.replace("auto tmp0 = in_out_ptr0[x0];", "auto tmp0 = in_ptr0[x0];")
    assert kernel_source.cpp_roles(stored) == ["out", "in", "out", None]


def test_a_generated_kernels_name_spells_its_aten_ops():
    assert kernel_source._from_name("cpp_fused_add_mul_randn_like_relu_threshold_backward_0") == [
        "aten::add", "aten::mul", "aten::randn_like", "aten::relu", "aten::threshold_backward"]
    assert kernel_source._from_name("triton_red_fused_native_layer_norm_sum_3") == [
        "aten::native_layer_norm", "aten::sum"]
    assert kernel_source._from_name("cpp_fused_0") == []


def test_kernel_records_can_be_turned_off(monkeypatch):
    assert kernels.enabled()
    monkeypatch.setenv(_protocol.TRACE_KERNELS_ENV, "0")
    assert not kernels.enabled()
    assert json.loads(json.dumps(_protocol.TRACE_KERNELS_ENV)) == "BITEXACT_TRACE_KERNELS"


def test_a_kernels_source_line_is_the_one_the_file_reads_now(tmp_path):
    """Inductor's on-disk cache keys a graph by its computation, so a graph cached before an
    edit that moved the program's lines keeps the old numbers in its line map: a kernel is
    placed at the line that reads the same code now, or nowhere when no single line does."""
    import types

    model = tmp_path / "model.py"
    code = ["import torch", "", "def f(x):", "    y = torch.relu(x)", "    return y * 2", ""]
    model.write_text("\n".join(code))
    stack = ('  File "%s", line 4, in f\n    y = torch.relu(x)\n' % model)
    state = types.SimpleNamespace(skip_dirs=("/nowhere",))
    assert kernel_source._own_frame(stack, state) == "%s:4" % model  # outside the cwd: whole
    model.write_text("\n".join(["# a comment", "# and another"] + code))
    kernel_source.linecache.checkcache(str(model))
    assert kernel_source._own_frame(stack, state) == "%s:6" % model
    model.write_text("\n".join(code[:4] + ["    y = torch.relu(x)"] + code[4:]))
    kernel_source.linecache.checkcache(str(model))
    assert kernel_source.current_line(str(model), 9, "y = torch.relu(x)") is None  # twice
    assert kernel_source.current_line(str(model), 4, "y = torch.relu(x)") == 4
    assert kernel_source.current_line(str(tmp_path / "gone.py"), 7, "x") == 7  # unknown file
