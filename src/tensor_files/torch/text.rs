//! The canonical text of a value in a `torch.save` file: Python-like, deterministic, and
//! bounded however the pickle shares or nests its containers.

use super::pickle::{Graph, Id, Node};
use super::MAX_DEPTH;

/// Longest value text: a value that shares one list many times over stops here with `…`.
pub(super) const TEXT_MAX: usize = 1 << 20;

/// The canonical text of a value (Python-like: `'s'`, `b'…'`, `1`, `0.5`, `(1, 2)`,
/// `torch.device('cpu')`), at most about [`TEXT_MAX`] bytes.
pub(super) fn text(g: &Graph, id: Id) -> String {
    let mut out = String::new();
    write_text(g, id, 0, &mut out);
    out
}

fn write_text(g: &Graph, id: Id, depth: usize, out: &mut String) {
    use std::fmt::Write;
    if depth > MAX_DEPTH || out.len() > TEXT_MAX {
        out.push('…');
        return;
    }
    let join = |v: &[Id], out: &mut String| {
        for (i, &x) in v.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            write_text(g, x, depth + 1, out);
            if out.len() > TEXT_MAX {
                break;
            }
        }
    };
    let _ = match &g.nodes[id] {
        Node::None => write!(out, "None"),
        Node::Bool(b) => write!(out, "{}", if *b { "True" } else { "False" }),
        Node::Int(i) => write!(out, "{i}"),
        Node::BigInt(b) => {
            out.push_str("int(0x");
            b.iter().rev().for_each(|x| {
                let _ = write!(out, "{x:02x}");
            });
            write!(out, ")")
        }
        Node::Float(f) => write!(out, "{f:?}"),
        Node::Str(s) => write!(out, "'{}'", s.escape_debug()),
        Node::Bytes(b) => write!(out, "b'{}'", b.escape_ascii()),
        Node::List(v) => {
            out.push('[');
            join(v, out);
            write!(out, "]")
        }
        Node::Tuple(v) => {
            out.push('(');
            join(v, out);
            write!(out, "{})", if v.len() == 1 { "," } else { "" })
        }
        Node::Set(v) => {
            out.push('{');
            join(v, out);
            write!(out, "}}")
        }
        Node::Dict(items) => {
            out.push('{');
            for (i, &(k, v)) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_text(g, k, depth + 1, out);
                out.push_str(": ");
                write_text(g, v, depth + 1, out);
            }
            write!(out, "}}")
        }
        Node::Global(m, n) => write!(out, "{m}.{n}"),
        Node::Call { callee, args, .. } => {
            write_text(g, *callee, depth + 1, out);
            out.push('(');
            join(args_of(g, *args), out);
            write!(out, ")")
        }
        Node::Persistent(_) => write!(out, "<storage>"),
    };
}

/// The elements of a tuple or list node (nothing for other nodes).
fn args_of<'n>(g: &'n Graph, id: Id) -> &'n [Id] {
    match &g.nodes[id] {
        Node::Tuple(v) | Node::List(v) => v,
        _ => &[],
    }
}
