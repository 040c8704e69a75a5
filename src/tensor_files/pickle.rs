//! A pickle reader that never executes anything: it builds the object graph a pickle
//! describes as plain [`Node`]s (the way candle's `pickle.rs` does), and leaves calls of
//! classes and functions as [`Node::Call`] for the caller to interpret (`torch.rs` knows the
//! few torch rebuild functions; everything else stays an opaque call that is compared by its
//! name and arguments).
//!
//! Protocols 0 to 5 are read, except out-of-band buffers and the extension registry (errors
//! naming the opcode). Bounds: every length is checked against the bytes left before anything
//! is sliced, strings and bytes are borrowed from the input, and each opcode makes at most one
//! node, so memory is linear in the input whatever it claims. Containers are nodes in an arena
//! and the memo holds their ids, so a container referenced twice is one node (as in Python),
//! and a container holding itself is a cycle the reader of the graph must expect.

use anyhow::{anyhow, bail, Result};
use std::borrow::Cow;
use std::collections::HashMap;

mod node;
mod opcode;
mod ops;
pub(crate) use node::{kind, Graph, Id, Node};
use opcode::OpCode;
use ops::{Counted, Key};

/// Reads one pickle from the start of `data`: its graph and how many bytes it took.
pub(crate) fn load(data: &[u8]) -> Result<(Graph<'_>, usize)> {
    let mut m = Machine {
        data,
        at: 0,
        nodes: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    };
    let root = m.run()?;
    let nodes = m.nodes;
    Ok((Graph { nodes, root }, m.at))
}

struct Machine<'a> {
    data: &'a [u8],
    at: usize,
    nodes: Vec<Node<'a>>,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u64, Id>,
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| {
                anyhow!(
                    "pickle: {n} bytes wanted at offset {} of {}",
                    self.at,
                    self.data.len()
                )
            })?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn uint(&mut self, n: usize) -> Result<u64> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64))
    }
    fn len(&mut self, n: usize) -> Result<usize> {
        let v = self.uint(n)?;
        usize::try_from(v).map_err(|_| anyhow!("pickle: length {v} too large"))
    }
    /// A newline-terminated text argument (protocol 0), without the newline.
    fn line(&mut self) -> Result<&'a str> {
        let rest = &self.data[self.at..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| anyhow!("pickle: unterminated text argument at offset {}", self.at))?;
        let s = std::str::from_utf8(&rest[..n])
            .map_err(|_| anyhow!("pickle: text argument at offset {} is not UTF-8", self.at))?;
        self.at += n + 1;
        Ok(s)
    }
    fn push(&mut self, n: Node<'a>) {
        self.nodes.push(n);
        self.stack.push(self.nodes.len() - 1);
    }
    fn pop(&mut self) -> Result<Id> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            bail!("pickle: stack underflow at offset {}", self.at);
        }
        Ok(self.stack.pop().expect("checked above"))
    }
    fn top(&self) -> Result<Id> {
        self.stack
            .last()
            .copied()
            .ok_or_else(|| anyhow!("pickle: empty stack at offset {}", self.at))
    }
    /// Everything above the last mark, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Id>> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| anyhow!("pickle: no mark at offset {}", self.at))?;
        Ok(self.stack.split_off(m))
    }
    fn str_node(b: &'a [u8]) -> Node<'a> {
        match std::str::from_utf8(b) {
            Ok(s) => Node::Str(Cow::Borrowed(s)),
            Err(_) => Node::Bytes(Cow::Borrowed(b)),
        }
    }
    fn call(&mut self, callee: Id, args: Id) {
        self.push(Node::Call {
            callee,
            args,
            state: None,
            items: Vec::new(),
            elements: Vec::new(),
        });
    }
    fn add_items(&mut self, pairs: Vec<(Id, Id)>) -> Result<()> {
        let t = self.top()?;
        match &mut self.nodes[t] {
            Node::Dict(d) | Node::Call { items: d, .. } => d.extend(pairs),
            other => bail!("pickle: SETITEM on a {}", kind(other)),
        }
        Ok(())
    }
    fn add_elements(&mut self, vals: Vec<Id>) -> Result<()> {
        let t = self.top()?;
        match &mut self.nodes[t] {
            Node::List(l) | Node::Set(l) | Node::Call { elements: l, .. } => l.extend(vals),
            other => bail!("pickle: APPEND on a {}", kind(other)),
        }
        Ok(())
    }

    /// Runs the opcodes from the start of the data up to `STOP`: the id of the result.
    fn run(&mut self) -> Result<Id> {
        loop {
            let at = self.at;
            let byte = self
                .take(1)
                .map_err(|_| anyhow!("pickle: ends without STOP"))?[0];
            let op = OpCode::try_from(byte).map_err(|e| unsupported(e.0, at))?;
            if let Some(root) = self.step(op, at)? {
                return Ok(root);
            }
        }
    }

    /// Runs one opcode, read at offset `at`: the result once it is `STOP`.
    fn step(&mut self, op: OpCode, at: usize) -> Result<Option<Id>> {
        use OpCode as O;
        match op {
            O::Stop => return self.pop().map(Some),
            O::Proto => self.proto()?,
            O::Frame => {
                self.take(8)?;
            }
            O::Mark => self.marks.push(self.stack.len()),
            O::Pop => {
                self.pop()?;
            }
            O::PopMark => {
                self.pop_mark()?;
            }
            O::Dup => self.dup()?,
            O::None => self.push(Node::None),
            O::NewTrue | O::NewFalse => self.push(Node::Bool(op == O::NewTrue)),
            O::BinInt => self.bin_int()?,
            O::BinInt1 => self.bin_uint(1)?,
            O::BinInt2 => self.bin_uint(2)?,
            O::Long1 => self.long(1)?,
            O::Long4 => self.long(4)?,
            O::Int | O::Long => self.text_int(at)?,
            O::BinFloat => self.bin_float()?,
            O::Float => self.text_float(at)?,
            O::String | O::Unicode => self.text_str()?,
            O::BinString => self.counted(4, Counted::StrOrBytes, at)?,
            O::ShortBinString => self.counted(1, Counted::StrOrBytes, at)?,
            O::BinUnicode => self.counted(4, Counted::Utf8, at)?,
            O::ShortBinUnicode => self.counted(1, Counted::Utf8, at)?,
            O::BinUnicode8 => self.counted(8, Counted::Utf8, at)?,
            O::BinBytes => self.counted(4, Counted::Bytes, at)?,
            O::ShortBinBytes => self.counted(1, Counted::Bytes, at)?,
            O::BinBytes8 | O::ByteArray8 => self.counted(8, Counted::Bytes, at)?,
            O::EmptyDict => self.push(Node::Dict(Vec::new())),
            O::EmptyList => self.push(Node::List(Vec::new())),
            O::EmptyTuple => self.push(Node::Tuple(Vec::new())),
            O::EmptySet => self.push(Node::Set(Vec::new())),
            O::Dict => self.dict()?,
            O::List => self.of_mark(Node::List)?,
            O::Tuple => self.of_mark(Node::Tuple)?,
            O::FrozenSet => self.of_mark(Node::Set)?,
            O::Tuple1 => self.tuple_of(1)?,
            O::Tuple2 => self.tuple_of(2)?,
            O::Tuple3 => self.tuple_of(3)?,
            O::Append => self.append()?,
            O::Appends | O::AddItems => self.appends()?,
            O::SetItem => self.set_item()?,
            O::SetItems => self.set_items()?,
            O::Get => self.memo_get(Key::Text("GET"))?,
            O::BinGet => self.memo_get(Key::Bytes(1))?,
            O::LongBinGet => self.memo_get(Key::Bytes(4))?,
            O::Put => self.memo_put(Key::Text("PUT"))?,
            O::BinPut => self.memo_put(Key::Bytes(1))?,
            O::LongBinPut => self.memo_put(Key::Bytes(4))?,
            O::Memoize => self.memo_put(Key::Next)?,
            O::Global => self.global()?,
            O::StackGlobal => self.stack_global()?,
            O::Reduce | O::NewObj => self.reduce()?,
            O::NewObjEx => self.new_obj_ex()?,
            O::Inst => self.inst()?,
            O::Obj => self.obj(at)?,
            O::Build => self.build()?,
            O::BinPersId => self.bin_pers_id()?,
            O::PersId => self.pers_id()?,
            O::Ext1 | O::Ext2 | O::Ext4 | O::NextBuffer | O::ReadonlyBuffer => {
                return Err(unsupported(op as u8, at))
            }
        }
        Ok(None)
    }
}

/// The error for the opcode `byte` at offset `at`, which this reader does not run.
fn unsupported(byte: u8, at: usize) -> anyhow::Error {
    anyhow!(
        "pickle: opcode 0x{byte:02x} at offset {at} is not supported (extension registry, out-of-band buffers or not an opcode)"
    )
}

/// `[k0, v0, k1, v1, ...]` as pairs.
fn pairs(v: Vec<Id>) -> Result<Vec<(Id, Id)>> {
    if v.len() % 2 == 1 {
        bail!("pickle: odd number of items for a dict");
    }
    Ok(v.chunks(2).map(|p| (p[0], p[1])).collect())
}

/// A little-endian two's complement integer of at most 8 bytes.
fn small_int(b: &[u8]) -> Option<i64> {
    if b.len() > 8 {
        return None;
    }
    if b.is_empty() {
        return Some(0);
    }
    let neg = b[b.len() - 1] & 0x80 != 0;
    let mut buf = [if neg { 0xFF } else { 0 }; 8];
    buf[..b.len()].copy_from_slice(b);
    Some(i64::from_le_bytes(buf))
}

#[cfg(test)]
mod tests;
