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
pub(crate) use node::{kind, Graph, Id, Node};

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
    fn memo_get(&mut self, k: u64) -> Result<()> {
        let id = *self
            .memo
            .get(&k)
            .ok_or_else(|| anyhow!("pickle: memo key {k} was never stored"))?;
        self.stack.push(id);
        Ok(())
    }
    fn memo_put(&mut self, k: u64) -> Result<()> {
        let top = self.top()?;
        self.memo.insert(k, top);
        Ok(())
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

    fn run(&mut self) -> Result<Id> {
        loop {
            let at = self.at;
            let op = self
                .take(1)
                .map_err(|_| anyhow!("pickle: ends without STOP"))?[0];
            match op {
                b'.' => return self.pop(),
                0x80 => {
                    let v = self.uint(1)?;
                    if v > 5 {
                        bail!("pickle protocol {v} is not supported (0 to 5 are)");
                    }
                }
                0x95 => {
                    self.take(8)?;
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.stack.push(t);
                }
                b'N' => self.push(Node::None),
                0x88 => self.push(Node::Bool(true)),
                0x89 => self.push(Node::Bool(false)),
                b'J' => {
                    let v = self.uint(4)? as u32 as i32;
                    self.push(Node::Int(v.into()))
                }
                b'K' => {
                    let v = self.uint(1)?;
                    self.push(Node::Int(v as i64))
                }
                b'M' => {
                    let v = self.uint(2)?;
                    self.push(Node::Int(v as i64))
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        self.len(1)?
                    } else {
                        self.len(4)?
                    };
                    let b = self.take(n)?;
                    self.push(small_int(b).map_or(Node::BigInt(b), Node::Int))
                }
                b'I' | b'L' => {
                    let s = self.line()?.trim_end_matches('L');
                    let n = match s {
                        "00" => Node::Bool(false),
                        "01" => Node::Bool(true),
                        _ => Node::Int(s.parse().map_err(|_| {
                            anyhow!("pickle: integer {} at offset {at}", crate::quote::excerpt(s))
                        })?),
                    };
                    self.push(n)
                }
                b'G' => {
                    let v = f64::from_bits(u64::from_be_bytes(self.take(8)?.try_into()?));
                    self.push(Node::Float(v))
                }
                b'F' => {
                    let s = self.line()?;
                    let v = s.parse().map_err(|_| {
                        anyhow!("pickle: float {} at offset {at}", crate::quote::excerpt(s))
                    })?;
                    self.push(Node::Float(v))
                }
                b'S' | b'V' => {
                    let s = self.line()?;
                    self.push(Node::Str(Cow::Borrowed(s)))
                }
                b'T' | b'U' | b'X' | 0x8c | 0x8d | b'B' | b'C' | 0x8e | 0x96 => {
                    let n = match op {
                        b'U' | 0x8c | b'C' => self.len(1)?,
                        0x8d | 0x8e | 0x96 => self.len(8)?,
                        _ => self.len(4)?,
                    };
                    let b = self.take(n)?;
                    let node = match op {
                        b'X' | 0x8c | 0x8d => Node::Str(Cow::Borrowed(
                            std::str::from_utf8(b)
                                .map_err(|_| anyhow!("pickle: string at offset {at} is not UTF-8"))?,
                        )),
                        b'T' | b'U' => Machine::str_node(b),
                        _ => Node::Bytes(Cow::Borrowed(b)),
                    };
                    self.push(node)
                }
                b'}' => self.push(Node::Dict(Vec::new())),
                b']' => self.push(Node::List(Vec::new())),
                b')' => self.push(Node::Tuple(Vec::new())),
                0x8f => self.push(Node::Set(Vec::new())),
                b'd' => {
                    let v = self.pop_mark()?;
                    self.push(Node::Dict(pairs(v)?))
                }
                b'l' => {
                    let v = self.pop_mark()?;
                    self.push(Node::List(v))
                }
                b't' | 0x91 => {
                    let v = self.pop_mark()?;
                    self.push(if op == b't' {
                        Node::Tuple(v)
                    } else {
                        Node::Set(v)
                    })
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        v.push(self.pop()?);
                    }
                    v.reverse();
                    self.push(Node::Tuple(v))
                }
                b'a' => {
                    let v = self.pop()?;
                    self.add_elements(vec![v])?
                }
                b'e' | 0x90 => {
                    let v = self.pop_mark()?;
                    self.add_elements(v)?
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.add_items(vec![(k, v)])?
                }
                b'u' => {
                    let v = self.pop_mark()?;
                    self.add_items(pairs(v)?)?
                }
                b'g' => {
                    let k = self.line()?.trim().parse().map_err(|_| anyhow!("pickle: GET key"))?;
                    self.memo_get(k)?
                }
                b'h' | b'j' => {
                    let k = self.uint(if op == b'h' { 1 } else { 4 })?;
                    self.memo_get(k)?
                }
                b'p' => {
                    let k = self.line()?.trim().parse().map_err(|_| anyhow!("pickle: PUT key"))?;
                    self.memo_put(k)?
                }
                b'q' | b'r' => {
                    let k = self.uint(if op == b'q' { 1 } else { 4 })?;
                    self.memo_put(k)?
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    self.memo_put(k)?
                }
                b'c' => {
                    let module = self.line()?.to_string();
                    let name = self.line()?.to_string();
                    self.push(Node::Global(module, name))
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let text = |id: Id| match &self.nodes[id] {
                        Node::Str(s) => Ok(s.to_string()),
                        other => Err(anyhow!("pickle: STACK_GLOBAL of a {}", kind(other))),
                    };
                    let g = Node::Global(text(module)?, text(name)?);
                    self.push(g)
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let callee = self.pop()?;
                    self.call(callee, args)
                }
                0x92 => {
                    let kwargs = self.pop()?;
                    let args = self.pop()?;
                    let callee = self.pop()?;
                    self.nodes.push(Node::Tuple(vec![args, kwargs]));
                    let both = self.nodes.len() - 1;
                    self.call(callee, both)
                }
                b'i' => {
                    let module = self.line()?.to_string();
                    let name = self.line()?.to_string();
                    let args = self.pop_mark()?;
                    self.nodes.push(Node::Global(module, name));
                    let callee = self.nodes.len() - 1;
                    self.nodes.push(Node::Tuple(args));
                    let args = self.nodes.len() - 1;
                    self.call(callee, args)
                }
                b'o' => {
                    let mut v = self.pop_mark()?;
                    if v.is_empty() {
                        bail!("pickle: OBJ without a class at offset {at}");
                    }
                    let callee = v.remove(0);
                    self.nodes.push(Node::Tuple(v));
                    let args = self.nodes.len() - 1;
                    self.call(callee, args)
                }
                b'b' => {
                    let state = self.pop()?;
                    let t = self.top()?;
                    match &mut self.nodes[t] {
                        Node::Call { state: s, .. } => *s = Some(state),
                        other => bail!("pickle: BUILD on a {}", kind(other)),
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.push(Node::Persistent(pid))
                }
                b'P' => {
                    let s = self.line()?;
                    self.nodes.push(Node::Str(Cow::Borrowed(s)));
                    let pid = self.nodes.len() - 1;
                    self.push(Node::Persistent(pid))
                }
                other => bail!(
                    "pickle: opcode 0x{other:02x} at offset {at} is not supported (extension registry, out-of-band buffers or not an opcode)"
                ),
            }
        }
    }
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
