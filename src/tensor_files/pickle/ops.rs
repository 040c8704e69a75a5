//! What each pickle opcode does to the [`Machine`]: the handlers [`Machine::step`] dispatches
//! to, grouped as numbers, strings, containers, the memo, and globals and calls.

use super::{kind, pairs, small_int, Id, Machine, Node};
use anyhow::{anyhow, bail, Result};
use std::borrow::Cow;

/// How the bytes of a counted string opcode become a node.
pub(super) enum Counted {
    /// UTF-8, else an error (`BINUNICODE`).
    Utf8,
    /// A string when UTF-8, else bytes (protocol 0 to 2 `BINSTRING`).
    StrOrBytes,
    /// Bytes (`BINBYTES`, `BYTEARRAY8`).
    Bytes,
}

/// Where a memo opcode's key comes from.
pub(super) enum Key {
    /// A line of text (`GET`, `PUT`: the opcode's name for the error).
    Text(&'static str),
    /// A little-endian integer of this many bytes.
    Bytes(usize),
    /// The next key: the memo's size (`MEMOIZE`).
    Next,
}

/// Numbers and the stack.
impl<'a> Machine<'a> {
    /// `PROTO`: the protocol, 0 to 5.
    pub(super) fn proto(&mut self) -> Result<()> {
        let v = self.uint(1)?;
        if v > 5 {
            bail!("pickle protocol {v} is not supported (0 to 5 are)");
        }
        Ok(())
    }

    /// `DUP`.
    pub(super) fn dup(&mut self) -> Result<()> {
        let t = self.top()?;
        self.stack.push(t);
        Ok(())
    }

    /// `BININT`: a 4-byte signed integer.
    pub(super) fn bin_int(&mut self) -> Result<()> {
        let v = self.uint(4)? as u32 as i32;
        self.push(Node::Int(v.into()));
        Ok(())
    }

    /// `BININT1`, `BININT2`: an unsigned integer of `n` bytes.
    pub(super) fn bin_uint(&mut self, n: usize) -> Result<()> {
        let v = self.uint(n)?;
        self.push(Node::Int(v as i64));
        Ok(())
    }

    /// `LONG1`, `LONG4`: a two's complement integer whose length takes `n` bytes.
    pub(super) fn long(&mut self, n: usize) -> Result<()> {
        let n = self.len(n)?;
        let b = self.take(n)?;
        self.push(small_int(b).map_or(Node::BigInt(b), Node::Int));
        Ok(())
    }

    /// `INT`, `LONG`: an integer as text (`00` and `01` are False and True).
    pub(super) fn text_int(&mut self, at: usize) -> Result<()> {
        let s = self.line()?.trim_end_matches('L');
        let n = match s {
            "00" => Node::Bool(false),
            "01" => Node::Bool(true),
            _ => Node::Int(s.parse().map_err(|_| {
                anyhow!(
                    "pickle: integer {} at offset {at}",
                    crate::quote::excerpt(s)
                )
            })?),
        };
        self.push(n);
        Ok(())
    }

    /// `BINFLOAT`.
    pub(super) fn bin_float(&mut self) -> Result<()> {
        let v = f64::from_bits(u64::from_be_bytes(self.take(8)?.try_into()?));
        self.push(Node::Float(v));
        Ok(())
    }

    /// `FLOAT`: a float as text.
    pub(super) fn text_float(&mut self, at: usize) -> Result<()> {
        let s = self.line()?;
        let v = s
            .parse()
            .map_err(|_| anyhow!("pickle: float {} at offset {at}", crate::quote::excerpt(s)))?;
        self.push(Node::Float(v));
        Ok(())
    }
}

/// Strings.
impl<'a> Machine<'a> {
    /// `STRING`, `UNICODE`: a string as a line of text.
    pub(super) fn text_str(&mut self) -> Result<()> {
        let s = self.line()?;
        self.push(Node::Str(Cow::Borrowed(s)));
        Ok(())
    }

    /// A string or bytes whose length takes `width` bytes, made a node `as_`.
    pub(super) fn counted(&mut self, width: usize, as_: Counted, at: usize) -> Result<()> {
        let n = self.len(width)?;
        let b = self.take(n)?;
        let node = match as_ {
            Counted::Utf8 => {
                Node::Str(Cow::Borrowed(std::str::from_utf8(b).map_err(|_| {
                    anyhow!("pickle: string at offset {at} is not UTF-8")
                })?))
            }
            Counted::StrOrBytes => Machine::str_node(b),
            Counted::Bytes => Node::Bytes(Cow::Borrowed(b)),
        };
        self.push(node);
        Ok(())
    }
}

/// Containers.
impl<'a> Machine<'a> {
    /// `DICT`: a dict of the key-value pairs above the mark.
    pub(super) fn dict(&mut self) -> Result<()> {
        let v = self.pop_mark()?;
        self.push(Node::Dict(pairs(v)?));
        Ok(())
    }

    /// `LIST`, `TUPLE`, `FROZENSET`: `make` of the items above the mark.
    pub(super) fn of_mark(&mut self, make: fn(Vec<Id>) -> Node<'a>) -> Result<()> {
        let v = self.pop_mark()?;
        self.push(make(v));
        Ok(())
    }

    /// `TUPLE1` to `TUPLE3`: a tuple of the top `n` items.
    pub(super) fn tuple_of(&mut self, n: usize) -> Result<()> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.pop()?);
        }
        v.reverse();
        self.push(Node::Tuple(v));
        Ok(())
    }

    /// `APPEND`.
    pub(super) fn append(&mut self) -> Result<()> {
        let v = self.pop()?;
        self.add_elements(vec![v])
    }

    /// `APPENDS`, `ADDITEMS`.
    pub(super) fn appends(&mut self) -> Result<()> {
        let v = self.pop_mark()?;
        self.add_elements(v)
    }

    /// `SETITEM`.
    pub(super) fn set_item(&mut self) -> Result<()> {
        let v = self.pop()?;
        let k = self.pop()?;
        self.add_items(vec![(k, v)])
    }

    /// `SETITEMS`.
    pub(super) fn set_items(&mut self) -> Result<()> {
        let v = self.pop_mark()?;
        self.add_items(pairs(v)?)
    }
}

/// The memo.
impl<'a> Machine<'a> {
    /// The memo key an opcode gives.
    fn key(&mut self, key: Key) -> Result<u64> {
        match key {
            Key::Text(what) => {
                let k = self.line()?.trim().parse();
                k.map_err(|_| anyhow!("pickle: {what} key"))
            }
            Key::Bytes(n) => self.uint(n),
            Key::Next => Ok(self.memo.len() as u64),
        }
    }

    /// `GET`, `BINGET`, `LONG_BINGET`: pushes what the memo holds under the key.
    pub(super) fn memo_get(&mut self, key: Key) -> Result<()> {
        let k = self.key(key)?;
        let id = *self
            .memo
            .get(&k)
            .ok_or_else(|| anyhow!("pickle: memo key {k} was never stored"))?;
        self.stack.push(id);
        Ok(())
    }

    /// `PUT`, `BINPUT`, `LONG_BINPUT`, `MEMOIZE`: stores the top of the stack under the key.
    pub(super) fn memo_put(&mut self, key: Key) -> Result<()> {
        let k = self.key(key)?;
        let top = self.top()?;
        self.memo.insert(k, top);
        Ok(())
    }
}

/// Globals, calls and persistent ids.
impl<'a> Machine<'a> {
    /// `GLOBAL`: module and name as two lines of text.
    pub(super) fn global(&mut self) -> Result<()> {
        let module = self.line()?.to_string();
        let name = self.line()?.to_string();
        self.push(Node::Global(module, name));
        Ok(())
    }

    /// `STACK_GLOBAL`: module and name from the stack.
    pub(super) fn stack_global(&mut self) -> Result<()> {
        let name = self.pop()?;
        let module = self.pop()?;
        let text = |id: Id| match &self.nodes[id] {
            Node::Str(s) => Ok(s.to_string()),
            other => Err(anyhow!("pickle: STACK_GLOBAL of a {}", kind(other))),
        };
        let g = Node::Global(text(module)?, text(name)?);
        self.push(g);
        Ok(())
    }

    /// `REDUCE`, `NEWOBJ`: a call of the callable below the argument tuple.
    pub(super) fn reduce(&mut self) -> Result<()> {
        let args = self.pop()?;
        let callee = self.pop()?;
        self.call(callee, args);
        Ok(())
    }

    /// `NEWOBJ_EX`: a call with arguments and keyword arguments, as one tuple of both.
    pub(super) fn new_obj_ex(&mut self) -> Result<()> {
        let kwargs = self.pop()?;
        let args = self.pop()?;
        let callee = self.pop()?;
        self.nodes.push(Node::Tuple(vec![args, kwargs]));
        let both = self.nodes.len() - 1;
        self.call(callee, both);
        Ok(())
    }

    /// `INST`: a call of a class named as text, with the items above the mark.
    pub(super) fn inst(&mut self) -> Result<()> {
        let module = self.line()?.to_string();
        let name = self.line()?.to_string();
        let args = self.pop_mark()?;
        self.nodes.push(Node::Global(module, name));
        let callee = self.nodes.len() - 1;
        self.nodes.push(Node::Tuple(args));
        let args = self.nodes.len() - 1;
        self.call(callee, args);
        Ok(())
    }

    /// `OBJ`, read at offset `at`: a call of the class first above the mark, with the rest.
    pub(super) fn obj(&mut self, at: usize) -> Result<()> {
        let mut v = self.pop_mark()?;
        if v.is_empty() {
            bail!("pickle: OBJ without a class at offset {at}");
        }
        let callee = v.remove(0);
        self.nodes.push(Node::Tuple(v));
        let args = self.nodes.len() - 1;
        self.call(callee, args);
        Ok(())
    }

    /// `BUILD`: the state of the call below it.
    pub(super) fn build(&mut self) -> Result<()> {
        let state = self.pop()?;
        let t = self.top()?;
        match &mut self.nodes[t] {
            Node::Call { state: s, .. } => *s = Some(state),
            other => bail!("pickle: BUILD on a {}", kind(other)),
        }
        Ok(())
    }

    /// `BINPERSID`: a persistent id from the stack.
    pub(super) fn bin_pers_id(&mut self) -> Result<()> {
        let pid = self.pop()?;
        self.push(Node::Persistent(pid));
        Ok(())
    }

    /// `PERSID`: a persistent id as text.
    pub(super) fn pers_id(&mut self) -> Result<()> {
        let s = self.line()?;
        self.nodes.push(Node::Str(Cow::Borrowed(s)));
        let pid = self.nodes.len() - 1;
        self.push(Node::Persistent(pid));
        Ok(())
    }
}
