//! [`Lane`]: the op tracer's fast lanes (`python/bitexact/_trace/plain.py`) as one native call
//! per record. `plain` decides whether a record may take a lane (no generator, no capture, no
//! row slices); this makes and queues its line:
//! - [`Lane::record`]: an op that writes no argument;
//! - [`Lane::hold_self`] before, and [`Lane::record`] with what it held after, an in-place op
//!   that reads and writes its `self` only (`add_`, `mul_`, `addcmul_`: an optimizer's chain):
//!   `self` held as it was ([`Held`], as `TraceWriter.hold` holds it for
//!   `writes.read_before`), listed first among the record's inputs;
//! - [`Lane::named`]: a record of `--trace modules` (`bitexact._trace.hooks`), of no op.
//!
//! The op's tensors are collected from its arguments and result, each one's address, dtype,
//! shape and strides read through torch's Python API (about 0.7 us of torch's per tensor: what
//! bounds a tracer that reads tensors from Python); its text (arguments, module and phase,
//! source line, the JSON line: [`super::trace_line`]) goes with them to
//! [`TraceWriter::queue`] ([`super::trace_queue`]) without a Python object per tensor: hashed there by the writer's
//! thread, or first on the program's thread where it hashes (`state.deferred` off), the line
//! then filled as the writer fills it ([`super::trace_record::fill`]).
//!
//! Byte for byte what the general path (`bitexact._trace.state.emit`) and `plain`'s Python
//! write, which stay the reference: whatever this does not handle itself (a dtype seen for
//! the first time, an argument that is not a number, a bool or a list of them, a file name
//! the source memo has not judged yet) it asks the Python functions for; a tensor off the
//! host's fast path, a list among an in-place op's arguments, an input that holds the bytes
//! the op writes, or a string that is not valid UTF-8 makes it return `False` (or `None`),
//! having done nothing, and the record takes the general path. The tests compare the lanes'
//! traces with both (`python/tests/test_trace_lane.py`).

use super::trace_hold::Held;
use super::trace_line::Sources;
use super::trace_queue::Site;
use super::trace_writer::TraceWriter;
use super::Host;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

/// What the lane needs of torch and of the tracer's Python modules, taken once when tracing
/// starts (`plain.lane()`).
#[pyclass(module = "bitexact._native", frozen)]
pub struct Lane {
    /// `torch.Tensor`.
    pub(crate) tensor: Py<PyType>,
    /// `torch.strided`.
    pub(crate) strided: Py<PyAny>,
    /// `bitexact._digest._torch_dtypes`: a torch dtype → `(name, is_complex)`.
    pub(crate) dtypes: Py<PyDict>,
    /// `bitexact._trace.digest` (its `CACHE` and `SKETCH` switches, `_plain`).
    pub(crate) digest: Py<PyModule>,
    /// `bitexact._trace.record` (`_shown`, `_shown_for`, `source`, `_value`,
    /// `_argument_names`, `_MEMO_MAX`).
    pub(crate) record: Py<PyModule>,
    /// The trace record version (`bitexact._protocol.TRACE_RECORD_VERSION`).
    pub(crate) version: u32,
    /// `record._MEMO_MAX`: past this many files, `record.source`'s memo starts over (and past
    /// this many code objects, [`Lane::source`]'s).
    pub(crate) memo_max: usize,
    /// [`Lane::source`]'s memo.
    pub(crate) sources: std::sync::Mutex<Sources>,
}

/// A tensor attribute that raised TypeError or RuntimeError (no bitexact dtype, no storage):
/// `None`, as `digest._host_items` treats it; any other error is the caller's.
fn tolerated<T>(r: PyResult<T>, py: Python<'_>) -> PyResult<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyRuntimeError>(py) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[pymethods]
impl Lane {
    #[new]
    fn new(
        py: Python<'_>,
        tensor: Py<PyType>,
        strided: Py<PyAny>,
        dtypes: Py<PyDict>,
        digest: Py<PyModule>,
        record: Py<PyModule>,
        version: u32,
    ) -> PyResult<Lane> {
        let memo_max = record
            .bind(py)
            .getattr(intern!(py, "_MEMO_MAX"))?
            .extract()?;
        Ok(Lane {
            tensor,
            strided,
            dtypes,
            digest,
            record,
            version,
            memo_max,
            sources: Default::default(),
        })
    }

    /// Writes the record of `op` (its name) of `stream` in `state`, called as
    /// `func(*args, **kwargs)` with `result`, and returns True; or returns False, having done
    /// nothing, where the general path must take it: a tensor off the host's fast path,
    /// `state.writer` not the native writer, `args` not a tuple or `kwargs` not a dict. The
    /// caller has checked the rest (`plain.record`, `plain.in_place`). Without `held`, an op
    /// that writes no argument: its inputs are its tensor arguments, its results `result`'s
    /// tensors. With `held` (from [`Lane::hold_self`] before the op), an in-place op: its inputs
    /// are `self` as it was, then its other tensors; its results `result`'s tensors, or `self`
    /// when it returned none; `held` is left untouched when it returns False (the caller then
    /// hands it to the general path as the op's values before).
    ///
    /// `tensors` (from the observer driver): the op's tensors as the observer read them
    /// ([`Described`]: for an in-place op, `self` as it is now first), taken instead of the
    /// Python tensors'.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (state, stream, func, op, args, kwargs, result, held=None, tensors=None))]
    fn record(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        stream: &Bound<'_, PyAny>,
        func: &Bound<'_, PyAny>,
        op: &Bound<'_, PyString>,
        args: &Bound<'_, PyAny>,
        kwargs: &Bound<'_, PyAny>,
        result: &Bound<'_, PyAny>,
        held: Option<&Bound<'_, Held>>,
        tensors: Option<&Bound<'_, PyBytes>>,
    ) -> PyResult<bool> {
        let Some(call) = Call::of(state, func, op, args, kwargs)? else {
            return Ok(false);
        };
        let described = match (held, tensors) {
            (Some(_), _) if !self.in_place_lane(py, &call)? => return Ok(false),
            (_, Some(words)) => self.described(py, state, words.as_bytes())?,
            (_, None) => Described::Unread,
        };
        let tensors = match (described, held) {
            (Described::Read(ins, outs), None) => Some((ins, outs)),
            (Described::Read(mut ins, outs), Some(_)) => {
                let target = ins.remove(0);
                Some((ins, if outs.is_empty() { vec![target] } else { outs }))
            }
            (Described::OffLane, _) => None,
            (Described::Unread, None) => self.of_plain(py, state, &call, result)?,
            (Described::Unread, Some(_)) => self.of_in_place(py, state, &call, result)?,
        };
        let Some((ins, outs)) = tensors else {
            return Ok(false);
        };
        let before: Vec<&Held> = held.map(Bound::get).into_iter().collect();
        self.queue(
            py,
            state,
            stream,
            &call.writer,
            &Site::Op(&call),
            &before,
            ins,
            outs,
        )
    }

    /// Writes a record its caller names, of no op's call (`--trace modules`: a module's
    /// `module output`, a parameter's `parameter grad`: `bitexact._trace.hooks`), and returns
    /// True; or returns False, having done nothing, where the general path must take it (a
    /// tensor off the host's fast path, `state.writer` not the native writer, an item of `held`
    /// not a [`Held`]). Its inputs: a slot taken from each item of `held` (the module's own
    /// parameters and buffers and its positional arguments, as its forward received them),
    /// then the tensors in `ins` (its keyword arguments; nested tuples, lists and dict values,
    /// as `bitexact._trace.state.collect_tensors` finds them); its results the tensors in
    /// `outs`. Its line has no arguments' text; a module record's has `"own"`, the names of
    /// the module's own parameters and buffers among its first inputs, as JSON
    /// (`bitexact._trace.record.own` makes the text, written as it is given), `"entered"`,
    /// its call's number among its thread's module calls, in the order they began (when
    /// known), and `"late"`, how many of its inputs were labelled after its forward (those of
    /// `ins`).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (state, stream, phase, module, op, ins, outs, held=None, own=None, entered=None))]
    fn named(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        stream: &Bound<'_, PyAny>,
        phase: &Bound<'_, PyString>,
        module: &Bound<'_, PyString>,
        op: &Bound<'_, PyString>,
        ins: &Bound<'_, PyAny>,
        outs: &Bound<'_, PyAny>,
        held: Option<&Bound<'_, PyList>>,
        own: Option<&Bound<'_, PyString>>,
        entered: Option<usize>,
    ) -> PyResult<bool> {
        let Ok(writer) = state
            .getattr(intern!(py, "writer"))?
            .cast_into::<TraceWriter>()
        else {
            return Ok(false);
        };
        let mut before = Vec::new();
        for h in held.into_iter().flatten() {
            match h.cast_into::<Held>() {
                Ok(h) => before.push(h),
                Err(_) => return Ok(false),
            }
        }
        let tensor = self.tensor.bind(py);
        let mut tensors = Vec::new();
        collect(ins, tensor, &mut tensors)?;
        let n = tensors.len();
        collect(outs, tensor, &mut tensors)?;
        let Some(mut ins) = self.hosts(py, state, &tensors)? else {
            return Ok(false);
        };
        let outs = ins.split_off(n);
        let before: Vec<&Held> = before.iter().map(Bound::get).collect();
        let site = Site::Named {
            phase,
            module,
            op,
            own,
            entered,
            late: own.map(|_| n),
        };
        self.queue(py, state, stream, &writer, &site, &before, ins, outs)
    }

    /// Before an in-place op that reads and writes its `self` (`args[0]`) only
    /// (`writes.SELF`): the digest of `self` as it is now (`TraceWriter.hold`), for
    /// [`Lane::record`] to record after the op; or `None`, having done nothing, where the
    /// general path must take it: a tensor off the host's fast path, a list among the
    /// arguments, an input holding the bytes of `self` (`writes._aliased_inputs`), or what
    /// [`Lane::record`] refuses. The caller has checked the rest (`plain.in_place`).
    ///
    /// `tensors` (from the observer driver): the op's tensors as the observer read them
    /// ([`Described`]: its inputs, `self` first), taken instead of the Python tensors'.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (state, func, op, args, kwargs, tensors=None))]
    fn hold_self(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        func: &Bound<'_, PyAny>,
        op: &Bound<'_, PyString>,
        args: &Bound<'_, PyAny>,
        kwargs: &Bound<'_, PyAny>,
        tensors: Option<&Bound<'_, PyBytes>>,
    ) -> PyResult<Option<Held>> {
        let Some(call) = Call::of(state, func, op, args, kwargs)? else {
            return Ok(None);
        };
        if !self.in_place_lane(py, &call)? {
            return Ok(None);
        }
        let described = match tensors {
            Some(words) => self.described(py, state, words.as_bytes())?,
            None => Described::Unread,
        };
        let hosts = match described {
            Described::Read(ins, _) if !ins.is_empty() => Some(ins),
            Described::Read(..) | Described::OffLane => None,
            Described::Unread => self.self_and_inputs(py, state, &call)?,
        };
        let Some(mut hosts) = hosts else {
            return Ok(None);
        };
        let inputs = hosts.split_off(1);
        let target = &hosts[0];
        let numel = |h: &Host| h.shape.iter().product::<usize>();
        if numel(target) > 0 && inputs.iter().any(|t| numel(t) > 0 && t.ptr == target.ptr) {
            return Ok(None); // x.add_(x): the general path hashes its inputs before the op
        }
        let cache = self
            .digest
            .bind(py)
            .getattr(intern!(py, "CACHE"))?
            .is_truthy()?;
        let writer = call.writer.borrow();
        let held = match writer.mine() {
            true => hosts,
            false => Vec::new(),
        };
        Ok(Some(crate::fork_safe::detached(py, || {
            Held::of(held, cache)
        })))
    }
}

/// What a lane needs of a call: the native writer, and the arguments as a tuple and a dict.
pub(crate) struct Call<'a, 'py> {
    pub(crate) writer: Bound<'py, TraceWriter>,
    pub(crate) func: &'a Bound<'py, PyAny>,
    pub(crate) op: &'a Bound<'py, PyString>,
    pub(crate) args: Bound<'py, PyTuple>,
    pub(crate) kwargs: Bound<'py, PyDict>,
}

impl<'a, 'py> Call<'a, 'py> {
    /// The call, or `None` where `state.writer` is not the native writer, or the arguments are
    /// not a tuple and a dict.
    fn of(
        state: &Bound<'py, PyAny>,
        func: &'a Bound<'py, PyAny>,
        op: &'a Bound<'py, PyString>,
        args: &Bound<'py, PyAny>,
        kwargs: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Call<'a, 'py>>> {
        let writer = state.getattr(intern!(state.py(), "writer"))?;
        let (Ok(writer), Ok(args), Ok(kwargs)) = (
            writer.cast_into::<TraceWriter>(),
            args.cast::<PyTuple>(),
            kwargs.cast::<PyDict>(),
        ) else {
            return Ok(None);
        };
        Ok(Some(Call {
            writer,
            func,
            op,
            args: args.clone(),
            kwargs: kwargs.clone(),
        }))
    }
}

/// An op's tensors as the observer driver read them (`observer.cpp`'s `describe`).
enum Described {
    /// Its inputs and results, read.
    Read(Vec<Host>, Vec<Host>),
    /// One is off the host's fast path: the record takes the general path.
    OffLane,
    /// To be read from the Python tensors (none given, or a dtype the lane has not met).
    Unread,
}

impl Lane {
    /// [`Lane::record`]'s `tensors`: int64 words `[inputs, results]`, then per tensor its
    /// dtype (the address of a `torch.dtype` object), its address, its
    /// dimensions + (1 << 32 where contiguous), its shape, then its strides unless contiguous.
    fn described(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        words: &[u8],
    ) -> PyResult<Described> {
        let mut w = words
            .chunks_exact(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap_or_default()));
        let (Some(n_in), Some(n_out)) = (w.next(), w.next()) else {
            return Ok(Described::Unread);
        };
        let (Ok(n_in), Ok(n_out)) = (usize::try_from(n_in), usize::try_from(n_out)) else {
            return Ok(Described::Unread);
        };
        let max_bytes: usize = state.getattr(intern!(py, "max_bytes"))?.extract()?;
        let mut hosts = Vec::with_capacity(n_in + n_out);
        for _ in 0..n_in + n_out {
            let (Some(dtype), Some(ptr), Some(dims)) = (w.next(), w.next(), w.next()) else {
                return Ok(Described::Unread);
            };
            // The dtype object's address (torch::getTHPDtype's), looked for among the dtypes
            // the lane has met: never dereferenced, whatever the words say.
            let found =
                (self.dtypes.bind(py).iter()).find(|(k, _)| k.as_ptr() as usize as i64 == dtype);
            let Some((_, known)) = found else {
                return Ok(Described::Unread);
            };
            let (name, complex): (Bound<'_, PyString>, bool) = known.extract()?;
            let ndim = (dims & 0xffff_ffff) as usize;
            let shape: Vec<usize> = w.by_ref().take(ndim).map(|d| d as usize).collect();
            let strides = match dims >> 32 {
                1 => None,
                _ => Some(
                    w.by_ref()
                        .take(ndim)
                        .map(|d| d as usize)
                        .collect::<Vec<_>>(),
                ),
            };
            if shape.len() != ndim || strides.as_ref().is_some_and(|s| s.len() != ndim) {
                return Ok(Described::Unread); // cut short: not the observer's words
            }
            let name = name.to_cow()?;
            match lane_bytes(&name, &shape, max_bytes)? {
                // as Lane::host: a null address with bytes is a wrapper without storage
                Some(n) if !complex && (ptr != 0 || n == 0) => {
                    hosts.push(Host::with_strides(ptr as usize, n, &name, shape, strides)?)
                }
                _ => return Ok(Described::OffLane),
            }
        }
        let outs = hosts.split_off(n_in);
        Ok(Described::Read(hosts, outs))
    }
}

impl Lane {
    /// The inputs and results of [`Lane::record`] of an op that writes no argument.
    fn of_plain(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        call: &Call<'_, '_>,
        result: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(Vec<Host>, Vec<Host>)>> {
        let tensor = self.tensor.bind(py);
        let mut tensors = Vec::new();
        collect(call.args.as_any(), tensor, &mut tensors)?;
        collect(call.kwargs.as_any(), tensor, &mut tensors)?;
        let n = tensors.len();
        collect(result, tensor, &mut tensors)?;
        Ok(self.hosts(py, state, &tensors)?.map(|mut ins| {
            let outs = ins.split_off(n);
            (ins, outs)
        }))
    }

    /// The inputs (but `self` as it was, held) and results of [`Lane::record`] of an
    /// in-place op.
    fn of_in_place(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        call: &Call<'_, '_>,
        result: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(Vec<Host>, Vec<Host>)>> {
        let Some(mut ins) = self.self_and_inputs(py, state, call)? else {
            return Ok(None);
        };
        let target = ins.remove(0);
        let tensor = self.tensor.bind(py);
        let mut results = Vec::new();
        collect(result, tensor, &mut results)?;
        if results.is_empty() {
            return Ok(Some((ins, vec![target])));
        }
        Ok(self.hosts(py, state, &results)?.map(|outs| (ins, outs)))
    }

    /// Whether an in-place op may take the lane: its `self` (`args[0]`) a tensor, and no list
    /// or tuple among its arguments (the general path walks it).
    fn in_place_lane(&self, py: Python<'_>, call: &Call<'_, '_>) -> PyResult<bool> {
        let tensor = self.tensor.bind(py);
        for a in call.args.iter().chain(call.kwargs.values()) {
            if a.is_instance_of::<PyList>() || a.is_instance_of::<PyTuple>() {
                return Ok(false);
            }
        }
        match call.args.len() {
            0 => Ok(false),
            _ => is_tensor(&call.args.get_item(0)?, tensor),
        }
    }

    /// `self` (`args[0]`) and the other tensor arguments of an in-place op that may take the
    /// lane ([`Lane::in_place_lane`]), as the writer takes them; `None` where one is off the
    /// host's fast path.
    fn self_and_inputs(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        call: &Call<'_, '_>,
    ) -> PyResult<Option<Vec<Host>>> {
        let tensor = self.tensor.bind(py);
        let mut tensors = Vec::with_capacity(call.args.len() + call.kwargs.len());
        for a in call.args.iter().chain(call.kwargs.values()) {
            if is_tensor(&a, tensor)? {
                tensors.push(a);
            }
        }
        self.hosts(py, state, &tensors)
    }
}

/// The bytes of a tensor of dtype `name` and `shape` (torch's `nbytes`: the elements times
/// their size, whatever the strides), or `None` where the lane leaves it to the general path:
/// more than `max_bytes`, or more than `usize` holds.
fn lane_bytes(name: &str, shape: &[usize], max_bytes: usize) -> PyResult<Option<usize>> {
    let size = super::dtype(name)?.size();
    let nbytes = shape.iter().try_fold(size, |n, &d| n.checked_mul(d));
    Ok(nbytes.filter(|&n| n <= max_bytes))
}

/// `isinstance(x, torch.Tensor)`, answered without the call for the builtin types an op's
/// arguments mostly are (the call costs about 0.2 us for a non-tensor: torch's metaclass).
pub(crate) fn is_tensor(x: &Bound<'_, PyAny>, tensor: &Bound<'_, PyType>) -> PyResult<bool> {
    if x.is_none()
        || x.is_exact_instance_of::<PyTuple>()
        || x.is_exact_instance_of::<PyList>()
        || x.is_exact_instance_of::<PyDict>()
        || x.is_exact_instance_of::<PyInt>()
        || x.is_exact_instance_of::<PyFloat>()
        || x.is_exact_instance_of::<PyBool>()
        || x.is_exact_instance_of::<PyString>()
    {
        return Ok(false);
    }
    x.is_instance(tensor)
}

/// Appends the tensors in `x` (nested tuples, lists and dict values) to `out`, as
/// `bitexact._trace.state.collect_tensors` does.
fn collect<'py>(
    x: &Bound<'py, PyAny>,
    tensor: &Bound<'py, PyType>,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<()> {
    if is_tensor(x, tensor)? {
        out.push(x.clone());
        return Ok(());
    }
    let values = match x.cast::<PyDict>() {
        Ok(d) => d.values().into_any(),
        Err(_) if x.is_instance_of::<PyList>() || x.is_instance_of::<PyTuple>() => x.clone(),
        Err(_) => return Ok(()),
    };
    for v in values.try_iter()? {
        let v = v?;
        if is_tensor(&v, tensor)? {
            out.push(v);
        } else if v.is_instance_of::<PyList>()
            || v.is_instance_of::<PyTuple>()
            || v.is_instance_of::<PyDict>()
        {
            collect(&v, tensor, out)?;
        }
    }
    Ok(())
}

impl Lane {
    /// Each tensor as the writer takes it, read as `digest._host_items` reads it, or `None`
    /// when one is not on the host's fast path.
    fn hosts(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        tensors: &[Bound<'_, PyAny>],
    ) -> PyResult<Option<Vec<Host>>> {
        let max_bytes: usize = state.getattr(intern!(py, "max_bytes"))?.extract()?;
        let mut hosts = Vec::with_capacity(tensors.len());
        for t in tensors {
            match tolerated(self.host(py, t, max_bytes), py)? {
                Some(Some(h)) => hosts.push(h),
                _ => return Ok(None),
            }
        }
        Ok(Some(hosts))
    }

    /// One tensor of [`Lane::hosts`].
    fn host(
        &self,
        py: Python<'_>,
        t: &Bound<'_, PyAny>,
        max_bytes: usize,
    ) -> PyResult<Option<Host>> {
        if !t.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
            return Ok(None);
        }
        let Some(name) = self.plain_name(py, t)? else {
            return Ok(None);
        };
        let shape: Vec<usize> = t.getattr(intern!(py, "shape"))?.extract()?;
        let name = name.to_cow()?;
        let Some(nbytes) = lane_bytes(&name, &shape, max_bytes)? else {
            return Ok(None);
        };
        let ptr: usize = t.call_method0(intern!(py, "data_ptr"))?.extract()?;
        if ptr == 0 && nbytes > 0 {
            return Ok(None); // a wrapper without storage of its own (DTensor)
        }
        let strides = match t.call_method0(intern!(py, "is_contiguous"))?.is_truthy()? {
            true => None,
            false => Some(t.call_method0(intern!(py, "stride"))?.extract()?),
        };
        Host::with_strides(ptr, nbytes, &name, shape, strides).map(Some)
    }

    /// `bitexact._digest.plain_name(t)`: from its memo of dtypes, or by calling it.
    fn plain_name<'py>(
        &self,
        py: Python<'py>,
        t: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyString>>> {
        let dtype = t.getattr(intern!(py, "dtype"))?;
        let Some(known) = self.dtypes.bind(py).get_item(&dtype)? else {
            let name = self
                .digest
                .bind(py)
                .getattr(intern!(py, "_plain"))?
                .call1((t,))?;
            return Ok(name.cast_into::<PyString>().ok());
        };
        let (name, complex): (Bound<'py, PyString>, bool) = known.extract()?;
        if complex
            || !t.getattr(intern!(py, "layout"))?.is(self.strided.bind(py))
            || t.call_method0(intern!(py, "is_neg"))?.is_truthy()?
        {
            return Ok(None);
        }
        Ok(Some(name))
    }
}
