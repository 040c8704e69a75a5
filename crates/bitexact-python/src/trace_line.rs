//! The text of a record of the tracer's native lane ([`super::trace_lane`]): its non-tensor
//! arguments (`bitexact._trace.record.arguments`), the program's source line
//! (`record.source`) and the JSON line (`record.line`), each byte for byte what the Python
//! writes, which it asks for whatever it does not handle itself.

use super::trace_lane::{is_tensor, Lane};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::{ffi, intern};
use std::collections::HashMap;
use std::sync::TryLockError;

extern "C" {
    // In the C API since Python 3.9, outside the limited API that pyo3's abi3 declares.
    fn PyFrame_GetCode(frame: *mut ffi::PyFrameObject) -> *mut ffi::PyObject;
    fn PyFrame_GetBack(frame: *mut ffi::PyFrameObject) -> *mut ffi::PyFrameObject;
}

/// [`Lane::source`]'s memo: code object → its file as `record.source` shows it (`None`: not
/// the program's own code), judged under `skip_dirs`. The code objects are kept, so that no
/// other takes their address while they are here; at most `record._MEMO_MAX` of them.
#[derive(Default)]
pub(crate) struct Sources {
    skip_dirs: Option<Py<PyAny>>,
    shown: HashMap<usize, (Py<PyAny>, Option<Py<PyString>>)>,
}

impl Sources {
    /// Whether the memo holds judgements made under `skip_dirs` (the same object).
    fn judged_for(&self, skip_dirs: &Bound<'_, PyAny>) -> bool {
        self.skip_dirs
            .as_ref()
            .is_some_and(|s| s.as_ptr() == skip_dirs.as_ptr())
    }
}

/// Where a record's label and sketch go in its line (`bitexact._trace.digest.HOLE` and
/// `SKETCH_MARK`).
const HOLE: char = '\0';
const SKETCH_MARK: char = '\u{1}';

/// A record's fields, before they are quoted.
pub(crate) struct Fields<'a> {
    pub(crate) step: i64,
    pub(crate) rank: i64,
    pub(crate) phase: &'a str,
    pub(crate) module: &'a str,
    pub(crate) op: &'a str,
    pub(crate) src: &'a str,
    pub(crate) thread: &'a str,
    pub(crate) args: Option<&'a str>,
    /// A module record's `"own"`: the names of the module's own state, its first inputs, as
    /// JSON (`bitexact._trace.record.own`'s text).
    pub(crate) own: Option<&'a str>,
    /// A module record's `"entered"`: its call's number among its thread's module calls.
    pub(crate) entered: Option<usize>,
    /// A module record's `"late"`: how many of its last inputs were labelled after its
    /// forward (written when not 0).
    pub(crate) late: Option<usize>,
}

impl Lane {
    /// `bitexact._trace.record.arguments(func, args, kwargs, torch.Tensor)`, or `None` for
    /// an empty text: numbers and bools here, any other argument by `record._value`.
    pub(crate) fn arguments(
        &self,
        py: Python<'_>,
        func: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        kwargs: &Bound<'_, PyDict>,
    ) -> PyResult<Option<String>> {
        let tensor = self.tensor.bind(py);
        let mut parts: Vec<String> = Vec::new();
        let mut names: Option<Vec<String>> = None;
        for (i, a) in args.iter().enumerate() {
            if a.is_none() || is_tensor(&a, tensor)? {
                continue; // most arguments
            }
            let text = match a.is_exact_instance_of::<PyFloat>() {
                true => Some(a.repr()?.to_cow()?.into_owned()),
                false
                    if a.is_exact_instance_of::<PyInt>() || a.is_exact_instance_of::<PyBool>() =>
                {
                    Some(a.str()?.to_cow()?.into_owned())
                }
                false => self.value(py, &a)?,
            };
            let Some(text) = text else { continue };
            if names.is_none() {
                let record = self.record.bind(py);
                names = Some(
                    record
                        .getattr(intern!(py, "_argument_names"))?
                        .call1((func,))?
                        .extract()?,
                );
            }
            match names.as_ref().and_then(|n| n.get(i)) {
                Some(name) => parts.push(format!("{name}={text}")),
                None => parts.push(format!("#{i}={text}")),
            }
        }
        for (k, v) in kwargs.iter() {
            let k = k.cast_into::<PyString>()?;
            let k = k.to_cow()?;
            if matches!(&*k, "device" | "pin_memory" | "layout") {
                continue; // where, not what (record._LEFT_OUT)
            }
            if let Some(text) = self.value(py, &v)? {
                parts.push(format!("{k}={text}"));
            }
        }
        Ok((!parts.is_empty()).then(|| parts.join(",")))
    }

    /// `bitexact._trace.record._value(x, torch.Tensor)`: lists, numbers and bools here,
    /// anything else by calling it.
    fn value(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let tensor = self.tensor.bind(py);
        if x.is_none() || is_tensor(x, tensor)? {
            return Ok(None);
        }
        if x.is_instance_of::<PyList>() || x.is_instance_of::<PyTuple>() {
            let mut items = Vec::new();
            for v in x.try_iter()? {
                items.push(self.value(py, &v?)?);
            }
            if !items.is_empty() && items.iter().all(Option::is_none) {
                return Ok(None);
            }
            let texts: Vec<&str> = items.iter().map(|i| i.as_deref().unwrap_or("T")).collect();
            return Ok(Some(format!("[{}]", texts.join(","))));
        }
        if x.is_instance_of::<PyFloat>() {
            return Ok(Some(x.repr()?.to_cow()?.into_owned()));
        }
        if x.is_exact_instance_of::<PyInt>() || x.is_exact_instance_of::<PyBool>() {
            return Ok(Some(x.str()?.to_cow()?.into_owned()));
        }
        let record = self.record.bind(py);
        let text = record.getattr(intern!(py, "_value"))?.call1((x, tensor))?;
        match text.is_none() {
            true => Ok(None),
            false => Ok(Some(text.cast_into::<PyString>()?.to_cow()?.into_owned())),
        }
    }

    /// `bitexact._trace.record.source(skip_dirs)`: the innermost frame of the program's own
    /// code, `file:line`. Walked here through the C API while each frame's code object is in
    /// [`Sources`] (its file judged under this `skip_dirs`), or its file in that function's
    /// memo (then remembered in [`Sources`]); otherwise the function is called (and fills its
    /// memo). Per frame: two C calls and a hash lookup, where reading `f_code.co_filename`
    /// and `f_back` as attributes cost about 0.7 us a frame (nanoGPT's ops are 4 or 5 frames
    /// below the program's line: torch's module and autograd wrappers).
    pub(crate) fn source(&self, py: Python<'_>, skip_dirs: &Bound<'_, PyAny>) -> PyResult<String> {
        // Never waited for: another thread holding it (between two bytecodes of Python that
        // this calls) walks through the Python instead.
        let mut memo = match self.sources.try_lock() {
            Ok(memo) => memo,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return self.source_in_python(py, skip_dirs),
        };
        if !memo.judged_for(skip_dirs) || memo.shown.len() >= self.memo_max {
            memo.shown.clear();
            memo.skip_dirs = Some(skip_dirs.clone().unbind());
        }
        // SAFETY: the GIL is held; the frame is borrowed from the running thread's state and
        // made a strong reference at once.
        let mut frame = unsafe {
            Bound::from_borrowed_ptr_or_opt(py, ffi::PyEval_GetFrame().cast::<ffi::PyObject>())
        };
        while let Some(f) = frame {
            // SAFETY: `f` is a frame object (PyEval_GetFrame's, or a frame's back); both calls
            // return a new reference (the code never NULL, the back NULL at the bottom).
            let code = unsafe { Bound::from_owned_ptr(py, PyFrame_GetCode(f.as_ptr().cast())) };
            let shown = match memo.shown.get(&(code.as_ptr() as usize)) {
                Some((_, shown)) => shown.as_ref().map(|s| s.clone_ref(py)),
                None => match self.judged(py, skip_dirs, &code)? {
                    Some(shown) => {
                        let shown = (!shown.is_none())
                            .then(|| shown.cast_into::<PyString>().map(Bound::unbind))
                            .transpose()?;
                        let kept = shown.as_ref().map(|s| s.clone_ref(py));
                        memo.shown
                            .insert(code.as_ptr() as usize, (code.unbind(), kept));
                        shown
                    }
                    None => {
                        drop(memo);
                        return self.source_in_python(py, skip_dirs);
                    }
                },
            };
            if let Some(s) = shown {
                // SAFETY: `f` is a frame object
                let line = unsafe { ffi::PyFrame_GetLineNumber(f.as_ptr().cast()) };
                return Ok(format!("{}:{line}", s.bind(py).to_cow()?));
            }
            // SAFETY: as above
            frame = unsafe {
                Bound::from_owned_ptr_or_opt(py, PyFrame_GetBack(f.as_ptr().cast()).cast())
            };
        }
        Ok(String::new())
    }

    /// `record.source(skip_dirs)`, called.
    fn source_in_python(&self, py: Python<'_>, skip_dirs: &Bound<'_, PyAny>) -> PyResult<String> {
        let call = self.record.bind(py).getattr(intern!(py, "source"))?;
        call.call1((skip_dirs, 1))?.extract()
    }

    /// `record._shown[code.co_filename]` (`None`: not the program's own), where
    /// `record.source`'s memo holds it for `skip_dirs`; `None` where it does not.
    fn judged<'py>(
        &self,
        py: Python<'py>,
        skip_dirs: &Bound<'py, PyAny>,
        code: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let record = self.record.bind(py);
        let shown_for = record.getattr(intern!(py, "_shown_for"))?;
        if !shown_for.get_item(0)?.is(skip_dirs) {
            return Ok(None);
        }
        let name = code.getattr(intern!(py, "co_filename"))?;
        record
            .getattr(intern!(py, "_shown"))?
            .cast_into::<PyDict>()?
            .get_item(&name)
    }

    /// The record's JSON line, as `bitexact._trace.record.line` writes it for the lane.
    pub(crate) fn line(&self, f: &Fields<'_>, ins: usize, outs: usize, sketch: bool) -> String {
        use std::fmt::Write;
        let mut s = String::with_capacity(160 + 6 * (ins + outs));
        let _ = write!(
            s,
            "{{\"v\":{},\"step\":{},\"rank\":{}",
            self.version, f.step, f.rank
        );
        for (key, value) in [
            ("phase", f.phase),
            ("module", f.module),
            ("op", f.op),
            ("src", f.src),
        ] {
            let _ = write!(s, ",\"{key}\":");
            json::push_str(&mut s, value);
        }
        for (key, count) in [("in", ins), ("out", outs)] {
            let _ = write!(s, ",\"{key}\":[");
            for i in 0..count {
                s.push_str(if i == 0 { "\"" } else { ",\"" });
                s.push(HOLE);
                s.push('"');
            }
            s.push(']');
        }
        if let Some(own) = f.own {
            s.push_str(",\"own\":");
            s.push_str(own);
        }
        if let Some(entered) = f.entered {
            let _ = write!(s, ",\"entered\":{entered}");
        }
        if let Some(late) = f.late.filter(|&n| n > 0) {
            let _ = write!(s, ",\"late\":{late}");
        }
        if let Some(args) = f.args {
            s.push_str(",\"args\":");
            json::push_str(&mut s, args);
        }
        if sketch && outs > 0 {
            s.push(SKETCH_MARK);
        }
        if !f.thread.is_empty() {
            s.push_str(",\"thread\":");
            json::push_str(&mut s, f.thread);
        }
        s.push_str("}\n");
        s
    }
}

/// Strings quoted as Python's `json.dumps` quotes them (`ensure_ascii`: every character
/// outside `' '..='~'` escaped, `\uXXXX` in lowercase hex, surrogate pairs past U+FFFF).
mod json {
    /// Appends `text` quoted.
    pub(super) fn push_str(out: &mut String, text: &str) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                ' '..='~' => out.push(c),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
            }
        }
        out.push('"');
    }

    #[cfg(test)]
    mod tests {
        use super::push_str;
        use proptest::prelude::*;

        fn quoted(s: &str) -> String {
            let mut out = String::new();
            push_str(&mut out, s);
            out
        }

        #[test]
        fn quotes_as_python_json_dumps() {
            // json.dumps of each, as Python 3.11 printed them
            assert_eq!(quoted("GPT.h.0"), r#""GPT.h.0""#);
            assert_eq!(quoted("a\"b\\c"), r#""a\"b\\c""#);
            assert_eq!(
                quoted("\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}"),
                r#""\n\r\t\b\f\u0000\u001f\u007f""#
            );
            assert_eq!(quoted("é€😀"), r#""\u00e9\u20ac\ud83d\ude00""#);
        }

        proptest! {
            #[test]
            fn a_quoted_string_is_ascii_json_of_itself(s in any::<String>()) {
                let q = quoted(&s);
                prop_assert!(q.bytes().all(|b| (b' '..=b'~').contains(&b)));
                prop_assert_eq!(serde_json::from_str::<String>(&q).unwrap(), s);
            }
        }
    }
}
