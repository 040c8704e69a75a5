//! The object graph a pickle describes: plain values, containers in an arena, and calls left
//! uninterpreted.

use std::borrow::Cow;

/// Index of a node in [`Graph::nodes`].
pub(crate) type Id = usize;

/// One value of the object graph.
#[derive(Debug)]
pub(crate) enum Node<'a> {
    None,
    Bool(bool),
    Int(i64),
    /// An integer too large for `i64`: little-endian two's complement bytes.
    BigInt(&'a [u8]),
    Float(f64),
    Str(Cow<'a, str>),
    Bytes(Cow<'a, [u8]>),
    List(Vec<Id>),
    Tuple(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    Set(Vec<Id>),
    /// `module.name` (a class or function, never imported).
    Global(String, String),
    /// `callee(*args)`, with the state `BUILD` gave it and the items and elements pickle's
    /// `SETITEM(S)` / `APPEND(S)` added (e.g. an `OrderedDict`).
    Call {
        callee: Id,
        args: Id,
        state: Option<Id>,
        items: Vec<(Id, Id)>,
        elements: Vec<Id>,
    },
    /// A persistent id (`BINPERSID`): how torch refers to a tensor storage.
    Persistent(Id),
}

/// The nodes one pickle made, and the root it returned.
pub(crate) struct Graph<'a> {
    /// Every node; ids index it.
    pub nodes: Vec<Node<'a>>,
    /// What `STOP` returned.
    pub root: Id,
}

/// The kind of a node, for error messages.
pub(crate) fn kind(n: &Node) -> &'static str {
    match n {
        Node::None => "None",
        Node::Bool(_) => "bool",
        Node::Int(_) | Node::BigInt(_) => "int",
        Node::Float(_) => "float",
        Node::Str(_) => "str",
        Node::Bytes(_) => "bytes",
        Node::List(_) => "list",
        Node::Tuple(_) => "tuple",
        Node::Dict(_) => "dict",
        Node::Set(_) => "set",
        Node::Global(..) => "global",
        Node::Call { .. } => "object",
        Node::Persistent(_) => "persistent id",
    }
}
