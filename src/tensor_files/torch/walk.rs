//! The walk over a `torch.save` object graph: which nodes are tensors, containers to descend
//! into, or values, and the canonical text of a value (see the parent module's docs).

use super::text::text;
use super::{storage_of, Walk, MAX_DEPTH, MAX_LEAVES};
use crate::tensor::DType;
use crate::tensor_files::pickle::{Graph, Id, Node};
use crate::tensor_files::View;
use anyhow::{anyhow, bail, Result};
use std::borrow::Cow;
use std::cell::RefCell;

/// What a node is to the walk.
enum Shape<'n> {
    /// `_rebuild_tensor(_v2, _v3)` arguments; `_v3` gives the dtype (argument 6) of an untyped
    /// storage.
    Tensor(&'n [Id], bool),
    /// Named children, in order.
    Map(Vec<(String, Id)>),
    /// A list, tuple or set: one value when every element is a value, else walked by index.
    Seq(&'n [Id]),
    /// A value.
    Leaf,
}

/// The `module.name` of a node that is a global.
fn global<'n>(g: &'n Graph, id: Id) -> Option<(&'n str, &'n str)> {
    match &g.nodes[id] {
        Node::Global(m, n) => Some((m.as_str(), n.as_str())),
        _ => None,
    }
}

fn tuple<'n>(g: &'n Graph, id: Id) -> &'n [Id] {
    match &g.nodes[id] {
        Node::Tuple(v) | Node::List(v) => v,
        _ => &[],
    }
}

/// What `callee(*args)` is, for the few callees torch files use; `None`: an opaque object.
fn call_shape<'n>(
    g: &'n Graph,
    callee: Id,
    args: Id,
    depth: usize,
    memo: &RefCell<Vec<u8>>,
) -> Result<Option<Shape<'n>>> {
    if depth > MAX_DEPTH {
        bail!("calls nested deeper than {MAX_DEPTH} levels");
    }
    let a = tuple(g, args);
    Ok(match global(g, callee) {
        Some(("torch._utils", "_rebuild_tensor_v2" | "_rebuild_tensor")) => {
            Some(Shape::Tensor(a, false))
        }
        Some(("torch._utils", "_rebuild_tensor_v3")) => Some(Shape::Tensor(a, true)),
        Some(("torch._utils", "_rebuild_parameter" | "_rebuild_parameter_with_state")) => {
            match a.first() {
                Some(&data) => Some(shape(g, data, depth + 1, memo)?),
                None => None,
            }
        }
        Some(("torch._tensor", "_rebuild_from_type_v2")) => match a {
            [func, _, inner, ..] => call_shape(g, *func, *inner, depth + 1, memo)?,
            _ => None,
        },
        Some(("builtins" | "__builtin__", "set" | "frozenset" | "list" | "tuple"))
        | Some(("torch", "Size")) => match a.first().map(|&x| &g.nodes[x]) {
            Some(Node::List(v) | Node::Tuple(v)) => Some(Shape::Seq(v)),
            _ => None,
        },
        _ => None,
    })
}

/// What node `id` is to the walk.
fn shape<'n>(g: &'n Graph, id: Id, depth: usize, memo: &RefCell<Vec<u8>>) -> Result<Shape<'n>> {
    Ok(match &g.nodes[id] {
        Node::Dict(items) => Shape::Map(items.iter().map(|&(k, v)| (key(g, k), v)).collect()),
        Node::List(v) | Node::Tuple(v) | Node::Set(v) => Shape::Seq(v),
        Node::Call {
            callee,
            args,
            state,
            items,
            elements,
        } => {
            if let Some(s) = call_shape(g, *callee, *args, depth, memo)? {
                return Ok(s);
            }
            let ordered_dict = global(g, *callee) == Some(("collections", "OrderedDict"));
            let state_dict = match state.map(|s| &g.nodes[s]) {
                None => Some(&[][..]),
                Some(Node::Dict(d)) => Some(&d[..]),
                Some(_) => None,
            };
            if let (true, Some(attrs), true) = (ordered_dict, state_dict, elements.is_empty()) {
                // A state_dict: its items, then attributes such as `_metadata`.
                let all = items.iter().chain(attrs);
                return Ok(Shape::Map(all.map(|&(k, v)| (key(g, k), v)).collect()));
            }
            if is_value(g, id, depth, memo) {
                return Ok(Shape::Leaf);
            }
            // An object holding tensors or containers: its class, arguments, state and items.
            let mut m = vec![("__class__".to_string(), *callee)];
            if !tuple(g, *args).is_empty() {
                m.push(("args".into(), *args));
            }
            match state.map(|s| &g.nodes[s]) {
                Some(Node::Dict(d)) => m.extend(d.iter().map(|&(k, v)| (key(g, k), v))),
                Some(_) => m.push(("state".into(), state.expect("matched"))),
                None => {}
            }
            m.extend(items.iter().map(|&(k, v)| (key(g, k), v)));
            if !elements.is_empty() {
                m.extend(
                    elements
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| (i.to_string(), v)),
                );
            }
            Shape::Map(m)
        }
        _ => Shape::Leaf,
    })
}

/// Whether node `id` is a value: no tensor or dict anywhere inside it. Answers are memoized
/// per node (`memo`: 0 unknown, 1 no, 2 yes; a node being checked counts as no), so shared
/// references cost one check each and cycles end.
fn is_value(g: &Graph, id: Id, depth: usize, memo: &RefCell<Vec<u8>>) -> bool {
    match memo.borrow().get(id) {
        Some(1) => return false,
        Some(2) => return true,
        _ => {}
    }
    if depth > MAX_DEPTH {
        return false;
    }
    memo.borrow_mut()[id] = 1;
    let yes = match &g.nodes[id] {
        Node::Dict(_) | Node::Persistent(_) => false,
        Node::List(v) | Node::Tuple(v) | Node::Set(v) => {
            v.iter().all(|&x| is_value(g, x, depth + 1, memo))
        }
        Node::Call {
            callee,
            args,
            state,
            items,
            elements,
        } => {
            let rebuild = matches!(global(g, *callee), Some((m, _)) if m.starts_with("torch._"));
            !rebuild
                && global(g, *callee) != Some(("collections", "OrderedDict"))
                && state.is_none()
                && items.is_empty()
                && elements.is_empty()
                && is_value(g, *args, depth + 1, memo)
        }
        _ => true,
    };
    memo.borrow_mut()[id] = if yes { 2 } else { 1 };
    yes
}

/// A dict key as a name component: a string as itself, anything else as its text.
fn key(g: &Graph, id: Id) -> String {
    match &g.nodes[id] {
        Node::Str(s) if !s.is_empty() => s.to_string(),
        _ => text(g, id),
    }
}

impl<'g, 'a, 's> Walk<'g, 'a, 's> {
    /// Walks node `id` at the current path; `on_path` holds the containers above it.
    pub(super) fn visit(&mut self, id: Id, on_path: &mut Vec<Id>) -> Result<()> {
        if self.path.len() > MAX_DEPTH {
            bail!(
                "{}: nested deeper than {MAX_DEPTH} levels",
                self.path.join(".")
            );
        }
        if on_path.contains(&id) {
            return self.value("<cycle>".into());
        }
        let children = match shape(self.g, id, 0, &self.memo)? {
            Shape::Tensor(args, v3) => return self.tensor(args, v3),
            Shape::Leaf => return self.value(text(self.g, id)),
            Shape::Seq(v) if v.iter().all(|&x| is_value(self.g, x, 0, &self.memo)) => {
                return self.value(text(self.g, id))
            }
            Shape::Seq(v) => v
                .iter()
                .enumerate()
                .map(|(i, &x)| (i.to_string(), x))
                .collect(),
            Shape::Map(m) if m.is_empty() => return self.value("{}".into()),
            Shape::Map(m) => m,
        };
        on_path.push(id);
        for (k, child) in children {
            self.path.push(k);
            let r = self.visit(child, on_path);
            self.path.pop();
            r?;
        }
        on_path.pop();
        Ok(())
    }

    /// The name of the leaf at the current path (`None` for the root), made unique.
    fn name(&mut self) -> Result<Option<String>> {
        self.leaves += 1;
        if self.leaves > MAX_LEAVES {
            bail!("more than {MAX_LEAVES} tensors and values");
        }
        if self.path.is_empty() {
            return Ok(None);
        }
        let base = self.path.join(".");
        let n = self.names.entry(base.clone()).or_insert(0);
        *n += 1;
        Ok(Some(if *n == 1 { base } else { format!("{base}~{n}") }))
    }

    fn value(&mut self, text: String) -> Result<()> {
        let name = self.name()?;
        if !self.sink.wants(name.as_deref().unwrap_or("")) {
            return Ok(());
        }
        self.sink.take(name, View::text(text))
    }

    fn tensor(&mut self, args: &[Id], v3: bool) -> Result<()> {
        let name = self.name()?;
        let shown = name.clone().unwrap_or_else(|| "the saved tensor".into());
        if !self.sink.wants(name.as_deref().unwrap_or("")) {
            return Ok(());
        }
        let g = self.g;
        let int = |i: usize| match args.get(i).map(|&x| &g.nodes[x]) {
            Some(Node::Int(v)) if *v >= 0 => Ok(*v as u64),
            _ => Err(anyhow!("{shown}: argument {i} of the tensor is not a size")),
        };
        let ints = |i: usize| -> Result<Vec<u64>> {
            let v = args.get(i).map(|&x| tuple(g, x)).unwrap_or(&[]);
            v.iter()
                .map(|&x| match g.nodes[x] {
                    Node::Int(n) if n >= 0 => Ok(n as u64),
                    _ => Err(anyhow!("{shown}: size or stride is not a list of counts")),
                })
                .collect()
        };
        let storage = args.first().map(|&x| &g.nodes[x]);
        let Some((key, mut dtype, mut complex)) =
            storage.map(|n| storage_of(g, n)).transpose()?.flatten()
        else {
            bail!("{shown}: the tensor has no storage");
        };
        if v3 {
            (dtype, complex) = match args.get(6).and_then(|&x| global(g, x)) {
                Some(("torch", name)) => torch_dtype(name)?,
                _ => bail!("{shown}: argument 6 of _rebuild_tensor_v3 is not a torch dtype"),
            };
        }
        let (mut offset, mut shape, mut stride) = (int(1)?, ints(2)?, ints(3)?);
        if shape.len() != stride.len() {
            bail!(
                "{shown}: {} sizes but {} strides",
                shape.len(),
                stride.len()
            );
        }
        if complex {
            offset *= 2;
            stride.iter_mut().for_each(|s| *s *= 2);
            shape.push(2);
            stride.push(1);
        }
        let data = self
            .storages
            .get(&key)
            .ok_or_else(|| anyhow!("{shown}: storage {key:?} is missing from the file"))?;
        let bytes = gather(
            data,
            dtype,
            offset,
            &shape,
            &stride,
            self.limit,
            self.big_endian,
        )
        .map_err(|e| anyhow!("{shown}: {e:#}"))?;
        let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        self.sink.take(name, View::new(dtype, shape, bytes)?)
    }
}

/// The element type of a torch dtype named `name` (`float8_e4m3fn`), and whether it is complex.
fn torch_dtype(name: &str) -> Result<(DType, bool)> {
    let storage = match name {
        "float32" | "float" => "Float",
        "float64" | "double" => "Double",
        "float16" | "half" => "Half",
        "bfloat16" => "BFloat16",
        "int64" | "long" => "Long",
        "int32" | "int" => "Int",
        "int16" | "short" => "Short",
        "int8" => "Char",
        "uint8" => "Byte",
        "bool" => "Bool",
        "uint16" => "UInt16",
        "uint32" => "UInt32",
        "uint64" => "UInt64",
        "float8_e4m3fn" => "Float8_e4m3fn",
        "float8_e5m2" => "Float8_e5m2",
        "complex64" | "cfloat" => "ComplexFloat",
        "complex128" | "cdouble" => "ComplexDouble",
        _ => bail!("torch dtype {name} is not supported"),
    };
    super::storage_dtype(storage)
}

/// The elements `shape` / `stride` select from `storage` from element `offset`, row-major:
/// borrowed when they are one contiguous little-endian run, else copied (at most `limit`
/// bytes).
fn gather<'a>(
    storage: &Cow<'a, [u8]>,
    dtype: DType,
    offset: u64,
    shape: &[u64],
    stride: &[u64],
    limit: usize,
    big_endian: bool,
) -> Result<Cow<'a, [u8]>> {
    let es = dtype.size() as u64;
    let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    let numel = numel.ok_or_else(|| anyhow!("size {shape:?} overflows"))?;
    if numel == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    let last = shape
        .iter()
        .zip(stride)
        .try_fold(offset, |a, (&d, &s)| a.checked_add((d - 1).checked_mul(s)?));
    let end = last
        .and_then(|l| l.checked_add(1)?.checked_mul(es))
        .filter(|&e| e <= storage.len() as u64)
        .ok_or_else(|| {
            anyhow!(
                "size {shape:?}, stride {stride:?} and offset {offset} reach past its storage of {} bytes",
                storage.len()
            )
        })?;
    let out_len = numel * es;
    let mut dense = 1u64;
    let contiguous = shape.iter().zip(stride).rev().all(|(&d, &s)| {
        let ok = d == 1 || s == dense;
        dense *= d;
        ok
    });
    if contiguous && !big_endian {
        let range = (offset * es) as usize..end as usize;
        return Ok(match storage {
            Cow::Borrowed(b) => Cow::Borrowed(&b[range]),
            Cow::Owned(v) => Cow::Owned(v[range].to_vec()),
        });
    }
    if out_len > limit as u64 {
        bail!(
            "the strided tensor expands to {out_len} bytes, over the {limit} allowed for this file"
        );
    }
    let mut out = Vec::with_capacity(out_len as usize);
    let mut index = vec![0u64; shape.len()];
    for _ in 0..numel {
        let at = offset + index.iter().zip(stride).map(|(&i, &s)| i * s).sum::<u64>();
        let el = &storage[(at * es) as usize..((at + 1) * es) as usize];
        if big_endian {
            out.extend(el.iter().rev());
        } else {
            out.extend_from_slice(el);
        }
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(Cow::Owned(out))
}

/// [`gather`] of an `f32` tensor of `n` elements with stride `stride` (tests).
#[cfg(test)]
pub(super) fn gather_for_test(storage: &[u8], n: u64, stride: u64) -> Result<usize> {
    gather(
        &Cow::Borrowed(storage),
        DType::F32,
        0,
        &[n],
        &[stride],
        1 << 20,
        false,
    )
    .map(|c| c.len())
}

/// [`is_value`] from the root (tests).
#[cfg(test)]
pub(super) fn is_value_for_test(g: &Graph, id: Id, memo: &RefCell<Vec<u8>>) -> bool {
    is_value(g, id, 0, memo)
}
