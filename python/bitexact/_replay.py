"""fp64 replay of one captured op call (``bitexact diff-trace``).

``bitexact run --trace ops --capture OP_IDENTITY`` makes the tracer save that op call's tensors
to ``.bitexact-capture.safetensors`` (``in0…``, ``out0…``) with, as safetensors metadata,
``op`` (``aten.mean.default``), ``identity`` (the JSON identity) and ``call``: the call's
arguments as JSON, a tensor as ``{"T": i}`` (``in<i>``), a float as ``{"f": repr}``, a dtype
as ``{"dtype": name}``, a device ``{"device": …}``, a layout or memory format ``{"torch":
name}``, a tensor the op writes in place ``{"T": i, "W": name}`` (``in<i>``: its values
before the op, read or not: an ``out=`` argument, a partly written tensor) or, in a
capture by an older bitexact that did not keep them, ``{"W": name}``
(``bitexact._trace.state.call_spec``).

This script replays each side's call in float64 (floating inputs cast to float64, floating
dtype arguments made float64, on the CPU) with ``torch.ops.<ns>.<op>.<overload>`` and measures
each recorded output against the float64 result: ULP distance in the output's own dtype (to
the fp64 result rounded to that dtype; max and median), the largest absolute difference and
the result's scale (its largest finite magnitude). It prints one JSON object; bitexact judges
it against the noise threshold (``src/trace/replay.rs``). Any failure is ``{"error": why}``.

Standalone (torch and the standard library only): bitexact runs it as ``python -c`` with the
text embedded in its binary; ``python -m bitexact._replay A B`` works too.
"""

import json
import struct
import sys


def read(path):
    """``(metadata, {name: tensor})`` of a safetensors file."""
    import torch

    dtypes = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
              "I32": torch.int32, "I64": torch.int64, "F16": torch.float16,
              "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, h in header.items():
        if h["dtype"] not in dtypes:
            raise ValueError("%s: dtype %s not replayable" % (name, h["dtype"]))
        a, b = h["data_offsets"]
        raw = bytearray(blob[8 + n + a:8 + n + b])
        dt = dtypes[h["dtype"]]
        t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        tensors[name] = t.reshape(h["shape"])
    return meta, tensors


def _decode(x, tensors, wrote=None):
    """An argument of the recorded call, for the float64 replay; a tensor the op writes in
    place (``{"T": i, "W": name}``) is appended to ``wrote`` too."""
    import torch

    if isinstance(x, list):
        return [_decode(v, tensors, wrote) for v in x]
    if not isinstance(x, dict):
        return x
    if "T" in x:
        t = tensors["in%d" % x["T"]]
        t = t.to(torch.float64) if t.is_floating_point() else t.clone()
        if "W" in x and wrote is not None:
            wrote.append(t)
        return t
    if "f" in x:
        return float(x["f"])
    if "dtype" in x:
        dt = getattr(torch, x["dtype"])
        return torch.float64 if dt.is_floating_point else dt
    if "device" in x:
        return torch.device("cpu")
    if "torch" in x:
        return getattr(torch, x["torch"])
    if "W" in x:
        raise ValueError("the op writes %s, and the capture holds only its value after the "
                         "op (a capture by an older bitexact)" % x["W"])
    raise ValueError("an argument cannot be replayed: %s" % x.get("repr", x))


def _flat(x, out):
    import torch

    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _flat(v, out)
    return out


def replay(meta, tensors):
    """The float64 results of the captured call."""
    import torch

    if "call" not in meta or "op" not in meta:
        raise ValueError("the capture records no replayable call (not an ATen op call, or "
                         "made by an older bitexact)")
    ns, name, overload = meta["op"].split(".")
    op = getattr(getattr(getattr(torch.ops, ns), name), overload)
    call = json.loads(meta["call"])
    wrote = []
    args = [_decode(a, tensors, wrote) for a in call["args"]]
    kwargs = {k: _decode(v, tensors, wrote) for k, v in call["kwargs"].items()}
    with torch.no_grad():
        results = _flat(op(*args, **kwargs), [])
    return results or wrote  # an in-place op that returns nothing: what it wrote


_BITS = {2: "int16", 4: "int32", 8: "int64"}


def _ordinal(t):
    """Each element's position on the number line of its dtype (as float64): adjacent
    values are 1 apart, -0 and +0 both 0."""
    import torch

    width = t.element_size()
    bits = t.reshape(-1).view(getattr(torch, _BITS[width])).to(torch.int64)
    magnitude = bits & ((1 << (8 * width - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude).to(torch.float64)


def measure(out, ref):
    """How far the recorded output ``out`` is from the float64 result ``ref``."""
    import torch

    out, ref = out.reshape(-1), ref.reshape(-1)
    if not out.is_floating_point():
        return {"differing": int((out != ref.to(out.dtype)).sum())}
    rounded = ref.to(out.dtype)
    dist = (_ordinal(out) - _ordinal(rounded)).abs()
    nan_o, nan_r = torch.isnan(out), torch.isnan(rounded)
    dist = torch.where(nan_o & nan_r, torch.zeros_like(dist), dist)
    dist = torch.where(nan_o ^ nan_r, torch.full_like(dist, float("inf")), dist)
    diff = (out.to(torch.float64) - ref).abs()
    diff = diff[torch.isfinite(diff)]
    flat = dist.flatten()
    return {
        "max_ulp": float(flat.max()) if flat.numel() else 0.0,
        "median_ulp": float(flat.median()) if flat.numel() else 0.0,
        "exact": int((flat == 0).sum()),
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
    }


def compare(paths):
    """The JSON answer for the captures of side A and side B."""
    import torch

    sides = [read(p) for p in paths]
    (ma, ta), (mb, tb) = sides
    if ma.get("identity") != mb.get("identity"):
        raise ValueError("the two captures hold different op calls: %s and %s"
                         % (ma.get("identity"), mb.get("identity")))
    ins = sorted(k for k in ta if k.startswith("in"))
    same = ins == sorted(k for k in tb if k.startswith("in")) and all(
        ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape
        and torch.equal(ta[k].reshape(-1).view(torch.uint8), tb[k].reshape(-1).view(torch.uint8))
        for k in ins)
    refs = [replay(m, t) for m, t in sides]
    outputs = []
    for i, ref in enumerate(refs[0]):
        name = "out%d" % i
        if name not in ta or name not in tb or i >= len(refs[1]):
            break
        finite = ref[torch.isfinite(ref)].abs() if ref.is_floating_point() else ref.abs()
        outputs.append({
            "index": i,
            "dtype": str(ta[name].dtype).replace("torch.", ""),
            "elements": ta[name].numel(),
            "scale": float(finite.max()) if finite.numel() else 0.0,
            "sides": [measure(t[name], r[i]) for t, r in zip((ta, tb), refs)],
        })
    return {"op": ma["op"], "identity": ma.get("identity", ""), "inputs_identical": same,
            "torch": torch.__version__, "outputs": outputs}


def main(argv):
    """Prints the answer for the two capture files ``argv``."""
    try:
        answer = compare(argv[:2])
    except ImportError as e:
        answer = {"error": "no torch in %s (%s)" % (sys.executable, e)}
    except ValueError as e:
        answer = {"error": str(e)}
    except Exception as e:  # every failure is an answer, never a traceback
        answer = {"error": "%s: %s" % (type(e).__name__, e)}
    print(json.dumps(answer))


if __name__ == "__main__":
    main(sys.argv[1:])
