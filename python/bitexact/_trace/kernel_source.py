"""What the source of a module Inductor generated says of its kernels (for
:mod:`bitexact._trace.kernels`): where each kernel is defined and its body, the role of each
argument of a C++ kernel, the call sites of ``call``, and at each site the ATen ops the kernel
fuses and the program's source lines they come from (Inductor's ``Original ATen`` comments and
its line map of FX stack traces)."""

import bisect
import functools
import linecache
import os
import re

from . import record

# A kernel global's definition: ``name = async_compile.cpp_pybinding([...], r'''`` or
# ``name = async_compile.triton('name', '''``.
DEFINITION = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|triton)\(")
_ORIGIN = re.compile(r"# (?:Topologically Sorted|Unsorted) Source Nodes: \[.*?\], "
                     r"Original ATen: \[(.*?)\]")
# A frame of an FX node's stack trace: its file, line and (on the next line) source text.
_FRAME = re.compile(r'File "(.+)", line (\d+), in [^\n]*(?:\n([^\n]*))?')
class Module:
    """What the kernel wrappers of one loaded module know: its source lines, the line of each
    call site, and its line map (line -> stack trace)."""

    def __init__(self, lines, linemap):
        self.lines = lines
        self.linemap = sorted((n, s) for n, s in (linemap or ()) if s)
        self.sites = {}  # line -> (fuses, at)
        self.calls = sorted(i + 1 for i, text in enumerate(lines) if is_call(text))


def is_call(text):
    t = text.strip()
    if not t or t.startswith(("#", "del ", "assert_", "return ")) or "empty_strided" in t:
        return False
    if "; del " in t and "# reuse" in t:
        return False
    return "(" in t and text[:1].isspace()


def body(lines, i):
    """The source of the kernel defined at line ``i`` (up to its closing ``''')``)."""
    out = []
    for text in lines[i:]:
        out.append(text)
        if text.startswith("''')"):
            break
    return "\n".join(out)


def cpp_roles(body):
    """Each argument of a C++ kernel (``kernel(const float* in_ptr0, float* out_ptr0, ...)``)
    as ``"in"``, ``"out"``, ``"inout"`` or None (a size)."""
    start = body.find('extern "C"')
    start = body.find("(", start)
    params = body[start + 1:body.find(")", start)].split(",")
    code = body[body.find(")", start):]
    return [_role(p.split()[-1] if p.split() else "", code) for p in params]


def _role(name, code):
    """An argument's role; an ``in_out_ptr`` that the code only stores to (a buffer Inductor
    reuses for the result, uninitialized before) is an output only."""
    if name.startswith("in_out_ptr"):
        stored = re.sub(r"\.store\(%s\b|\b%s\[[^\]]*\]\s*=(?!=)" % (name, name), "", code)
        return "inout" if re.search(r"\b%s\b" % name, stored) else "out"
    if name.startswith("out_ptr"):
        return "out"
    if name.startswith("in_ptr"):
        return "in"
    return None


def site(info, state, line, name):
    """``(fuses, at)`` of the call at ``line`` of the module (see the module docstring)."""
    got = info.sites.get(line)
    if got is not None:
        return got
    fuses = None
    j = line - 2
    while j >= 0 and j > line - 12:
        m = _ORIGIN.search(info.lines[j])
        if m:
            fuses = [a.strip().replace(".", "::", 1) for a in m.group(1).split(",") if a.strip()]
            break
        if info.lines[j].strip() and not info.lines[j].strip().startswith("#") \
                and is_call(info.lines[j]):
            break
        j -= 1
    if fuses is None:
        fuses = _from_name(name)
    k = bisect.bisect_left(info.calls, line)
    previous = info.calls[k - 1] if k > 0 else 0
    at = []
    for n, stack in info.linemap:
        if previous < n <= line:
            where = _own_frame(stack, state)
            if where and where not in at:
                at.append(where)
    got = info.sites[line] = (fuses, at)
    return got


def _own_frame(stack, state):
    """``file:line`` of the innermost frame of an FX node's stack trace in the program's own
    code (as records show sources), its line as the file reads now (:func:`current_line`), or
    None."""
    base = os.getcwd() if os.path.isdir(".") else None
    for path, n, text in reversed(_FRAME.findall(stack)):
        shown = record._show(path, state.skip_dirs, base)
        if shown is not None:
            n = current_line(path, int(n), text.strip())
            return None if n is None else "%s:%d" % (shown, n)
    return None


def current_line(path, n, text):
    """The line of ``path`` that reads ``text`` now: ``n`` when it still does (or ``text`` or
    the file is not known), else the one line of the file that does, else None. Inductor's
    on-disk cache keys a graph by its computation, not by the source lines it was traced from,
    so a graph cached before an edit that moved lines (a comment added above them) keeps the
    old numbers in its line map, and the file no longer reads the same there."""
    lines = linecache.getlines(path) if text else None
    if not lines or (0 < n <= len(lines) and lines[n - 1].strip() == text):
        return n
    found = [i + 1 for i, line in enumerate(lines) if line.strip() == text]
    return found[0] if len(found) == 1 else None


@functools.lru_cache(maxsize=4096)
def _from_name(name):
    """The ATen ops spelled by a generated kernel's name (``cpp_fused_add_mul_randn_like_0``:
    ``aten::add``, ``aten::mul``, ``aten::randn_like``): the fewest ``aten`` op names that make
    up its words; empty when they do not."""
    import torch

    words = name.split("_")
    if "fused" not in words:
        return []
    words = words[words.index("fused") + 1:]
    if words and words[-1].isdigit():
        words = words[:-1]
    best = [None] * (len(words) + 1)  # best[i]: fewest ops spelling words[:i]
    best[0] = []
    for i in range(1, len(words) + 1):
        for j in range(i):
            op = "_".join(words[j:i])
            if best[j] is not None and hasattr(torch.ops.aten, op) and (
                    best[i] is None or len(best[j]) + 1 < len(best[i])):
                best[i] = best[j] + ["aten::" + op]
    return best[-1] or []
