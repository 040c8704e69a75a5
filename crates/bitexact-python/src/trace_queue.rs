//! The last step of each of the native lanes ([`super::trace_lane`]): a record's JSON line
//! made ([`super::trace_line`]) and queued with its tensors on [`TraceWriter`]. An op's record
//! ([`Site::Op`]) takes its module and phase from the module tracker and its arguments' text
//! from the call; a record the caller names ([`Site::Named`]: `--trace modules`' `module
//! output` and `parameter grad`) has no arguments' text.

use super::trace::digests;
use super::trace_hold::Held;
use super::trace_lane::{Call, Lane};
use super::trace_line::Fields;
use super::trace_record::{fill, Record, Shown, Slot};
use super::trace_writer::{Pre, TraceWriter};
use super::Host;
use pyo3::exceptions::{PyTypeError, PyUnicodeEncodeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// What a record's line says of where it was made.
pub(crate) enum Site<'a, 'py> {
    /// An op's call: the module and phase the tracker is in now, the call's arguments.
    Op(&'a Call<'a, 'py>),
    /// A record named by its caller: its phase, module and op, and a module record's own
    /// state's names (`"own"`, as JSON text), call number (`"entered"`) and how many of its
    /// last inputs were labelled after its forward (`"late"`).
    Named {
        phase: &'a Bound<'py, PyString>,
        module: &'a Bound<'py, PyString>,
        op: &'a Bound<'py, PyString>,
        own: Option<&'a Bound<'py, PyString>>,
        entered: Option<usize>,
        late: Option<usize>,
    },
}

impl Lane {
    /// Queues a lane's record on `writer`: the values `before` holds first (one slot taken
    /// from each: the tensors an in-place op wrote, or a module's own state, as they were),
    /// then `ins` are its inputs, `outs` its results; returns False, having done nothing, where
    /// a string is not valid UTF-8 (a lone surrogate: Python's path quotes it) or a field is
    /// not a string.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn queue(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        stream: &Bound<'_, PyAny>,
        writer: &Bound<'_, TraceWriter>,
        site: &Site<'_, '_>,
        before: &[&Held],
        ins: Vec<Host>,
        outs: Vec<Host>,
    ) -> PyResult<bool> {
        let digest = self.digest.bind(py);
        let sketch = digest.getattr(intern!(py, "SKETCH"))?.is_truthy()?;
        let n = before.len() + ins.len();
        let line = match self.line_of(py, state, stream, site, n, outs.len(), sketch) {
            Ok(line) => line,
            // a string that is not valid UTF-8 (a lone surrogate), a field that is not a string:
            // the general path writes what Python makes of it
            Err(e)
                if e.is_instance_of::<PyUnicodeEncodeError>(py)
                    || e.is_instance_of::<PyTypeError>(py) =>
            {
                return Ok(false)
            }
            Err(e) => return Err(e),
        };
        let sketches = match sketch {
            true => (n..n + outs.len()).map(|i| Shown::Slot(i as i64)).collect(),
            false => Vec::new(),
        };
        let cache = digest.getattr(intern!(py, "CACHE"))?.is_truthy()?;
        let held = before
            .iter()
            .map(|h| h.take())
            .collect::<PyResult<Vec<_>>>()?;
        let hosts: Vec<Host> = ins.into_iter().chain(outs).collect();
        let (line, items, sketches) = match state.getattr(intern!(py, "deferred"))?.is_truthy()? {
            true => {
                let items = held.into_iter().map(Pre::Slot);
                (
                    line,
                    items.chain(hosts.into_iter().map(Pre::Host)).collect(),
                    sketches,
                )
            }
            false => {
                // Hashed now, on the program's thread, as the general path's `describe` does:
                // the writer is handed the finished line.
                let k = held.len();
                let want: Vec<bool> = (0..hosts.len()).map(|j| sketch && j + k >= n).collect();
                let found = crate::fork_safe::detached(py, || digests(&hosts, cache, &want, false));
                let slots = held.into_iter();
                let slots =
                    slots.chain(hosts.into_iter().zip(found).map(|(t, f)| Slot::found(t, f)));
                let rec = Record {
                    line,
                    slots: slots.collect(),
                    sketches,
                };
                (fill(&rec), Vec::new(), Vec::new())
            }
        };
        let lock = state.getattr(intern!(py, "lock"))?;
        lock.call_method0(intern!(py, "acquire"))?;
        let written = (|| {
            if state.getattr(intern!(py, "pending"))?.is_truthy()? {
                state.call_method0(intern!(py, "flush"))?;
            }
            writer.borrow().queue(py, line, items, cache, sketches)
        })();
        lock.call_method0(intern!(py, "release"))?;
        written.map(|()| true)
    }

    /// The line of [`Lane::queue`]: its fields read from the tracer's state, the stream and
    /// the site.
    #[allow(clippy::too_many_arguments)]
    fn line_of(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
        stream: &Bound<'_, PyAny>,
        site: &Site<'_, '_>,
        ins: usize,
        outs: usize,
        sketch: bool,
    ) -> PyResult<String> {
        let (text, phase, module, op, own, entered, late) = match *site {
            Site::Op(call) => {
                let text = match sketch {
                    true => self.arguments(py, call.func, &call.args, &call.kwargs)?,
                    false => None,
                };
                let place = state
                    .getattr(intern!(py, "tracker"))?
                    .call_method0(intern!(py, "where"))?;
                let (phase, module): (Bound<'_, PyString>, Bound<'_, PyString>) =
                    place.extract()?;
                (text, phase, module, call.op.clone(), None, None, None)
            }
            Site::Named {
                phase,
                module,
                op,
                own,
                entered,
                late,
            } => (
                None,
                phase.clone(),
                module.clone(),
                op.clone(),
                own,
                entered,
                late,
            ),
        };
        let src = self.source(py, &state.getattr(intern!(py, "skip_dirs"))?)?;
        let thread = stream
            .getattr(intern!(py, "label"))?
            .cast_into::<PyString>()?;
        let (phase, module, op) = (phase.to_cow()?, module.to_cow()?, op.to_cow()?);
        let own = own.map(|o| o.to_cow()).transpose()?;
        let thread = thread.to_cow()?;
        let fields = Fields {
            step: stream.getattr(intern!(py, "step"))?.extract()?,
            rank: state.getattr(intern!(py, "rank"))?.extract()?,
            phase: &phase,
            module: &module,
            op: &op,
            src: &src,
            thread: &thread,
            args: text.as_deref(),
            own: own.as_deref(),
            entered,
            late,
        };
        Ok(self.line(&fields, ins, outs, sketch))
    }
}
