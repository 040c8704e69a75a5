//! `torch.save` files (`*.pt`, `*.pth`), read without executing their pickle.
//!
//! * **Formats**: the zip format (torch >= 1.6: `<archive>/data.pkl`, storages in
//!   `<archive>/data/<key>`, an optional `<archive>/byteorder`) and the legacy format (a
//!   sequence of pickles: magic number, protocol, system info, the object, the storage keys,
//!   then each storage as a little-endian `u64` element count and its bytes). Older tar files
//!   are an error naming the format.
//! * **Names**: the saved object is walked from its root; dict keys, list and tuple indices
//!   join with `.` (`model.fc1.weight`, `optimizer.state.0.exp_avg`,
//!   `optimizer.param_groups.0.lr`). A file holding one tensor or one value is its path alone.
//! * **Tensors** (`torch._utils._rebuild_tensor_v2` and friends, `nn.Parameter`, tensor
//!   subclasses through `_rebuild_from_type_v2`) are the elements their size, stride and
//!   storage offset select, in row-major order, so a saved view digests as the tensor it
//!   shows; contiguous ones are hashed in place from the mapped file. Complex storages are
//!   their real view (a trailing dimension of 2).
//! * **Values**: every other leaf (numbers, strings, `None`, devices, dtypes, objects) is a
//!   canonical text, e.g. `'out/run'`, `0.9`, `argparse.Namespace(…)`; a list, tuple or set of
//!   such leaves is one value (`(0.9, 0.95)`), a dict is walked into. Values are compared as
//!   `u8` tensors of that text and explained as text ([`super::load_value`]).
//! * **Bounds**: a strided tensor may not expand to more than 4 × the file size + 64 MiB; the
//!   walk stops after [`MAX_LEAVES`] leaves or [`MAX_DEPTH`] levels (shared references and
//!   cycles cannot make it explode or loop: a container met again on its own path is the value
//!   `<cycle>`).

use super::pickle::{self, Graph, Node};
use super::Sink;
use crate::tensor::DType;
use anyhow::{anyhow, bail, Context, Result};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Cursor, Read};
use zip::{CompressionMethod, ZipArchive};

/// Most leaves (tensors and values) one file may hold.
pub const MAX_LEAVES: usize = 1 << 20;
/// Deepest nesting walked.
pub const MAX_DEPTH: usize = 128;

/// The legacy format's magic number, as pickle's `LONG1` payload (0x1950a86a20f9469cfc6c).
const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/// Where a storage's bytes are.
type Storages<'a> = HashMap<String, Cow<'a, [u8]>>;

/// Hands every tensor and value of the `torch.save` file `bytes` to `sink`.
pub(crate) fn read<'a>(bytes: &'a [u8], sink: &mut dyn Sink<'a>) -> Result<()> {
    let mut inflated = Vec::new();
    let (graph, storages, big_endian) = if bytes.starts_with(b"PK") {
        zip_format(bytes, &mut inflated)?
    } else if bytes.starts_with(&[0x80, 0x02, 0x8a, 0x0a]) {
        legacy_format(bytes)?
    } else if bytes.len() > 262 && &bytes[257..262] == b"ustar" {
        bail!("the tar format of torch < 0.4 is not supported; load and save it again with torch.save")
    } else {
        bail!("not a torch.save file (neither a zip archive nor the legacy pickle format)")
    };
    let mut walk = Walk {
        g: &graph,
        storages: &storages,
        big_endian,
        limit: bytes.len().saturating_mul(4).saturating_add(64 << 20),
        leaves: 0,
        path: Vec::new(),
        names: HashMap::new(),
        memo: std::cell::RefCell::new(vec![0; graph.nodes.len()]),
        sink,
    };
    walk.visit(graph.root, &mut Vec::new())
}

/// The pickle and storages of the zip format (a compressed pickle is inflated into
/// `inflated`).
fn zip_format<'a: 'b, 'b>(
    bytes: &'a [u8],
    inflated: &'b mut Vec<u8>,
) -> Result<(Graph<'b>, Storages<'a>, bool)> {
    let mut zip =
        ZipArchive::new(Cursor::new(bytes)).map_err(|e| anyhow!("not a valid zip archive: {e}"))?;
    let names: Vec<String> = zip
        .file_names()
        .map(|n| n.map(|n| n.into_owned()))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("zip entry name: {e}"))?;
    let pkl = names
        .iter()
        .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .ok_or_else(|| anyhow!("zip archive without <name>/data.pkl: not a torch.save file"))?
        .clone();
    let prefix = pkl.trim_end_matches("data.pkl").to_string();
    let mut storages = Storages::new();
    let mut pickle_bytes = None;
    let mut big_endian = false;
    for name in &names {
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let key = rest.strip_prefix("data/");
        if key.is_none() && rest != "data.pkl" && rest != "byteorder" {
            continue;
        }
        let data = entry(&mut zip, bytes, name)?;
        match key {
            Some(k) => {
                storages.insert(k.to_string(), data);
            }
            None if rest == "byteorder" => big_endian = data.as_ref() == b"big",
            None => pickle_bytes = Some(data),
        }
    }
    // The graph borrows its strings from the pickle: from the file, or from `inflated` when
    // the entry was compressed (torch never compresses, other zip tools may).
    let pickle_bytes: &'b [u8] = match pickle_bytes.expect("data.pkl is among the names") {
        Cow::Borrowed(b) => b,
        Cow::Owned(v) => {
            *inflated = v;
            inflated
        }
    };
    let graph = pickle::load(pickle_bytes).context("data.pkl")?.0;
    Ok((graph, storages, big_endian))
}

/// An entry's bytes: borrowed when stored (torch writes storages uncompressed and aligned),
/// inflated when compressed (growth follows the data, checked against the declared size).
fn entry<'a>(
    zip: &mut ZipArchive<Cursor<&'a [u8]>>,
    bytes: &'a [u8],
    name: &str,
) -> Result<Cow<'a, [u8]>> {
    let e = zip
        .by_name(name)
        .map_err(|e| anyhow!("entry {name:?}: {e}"))?;
    if e.encrypted() {
        bail!("entry {name:?} is encrypted");
    }
    if e.compression() == CompressionMethod::Stored {
        let (start, len) = (e.data_start(), e.compressed_size());
        let data = start
            .and_then(|s| Some(s..s.checked_add(len)?))
            .and_then(|r| bytes.get(r.start as usize..r.end as usize))
            .with_context(|| format!("entry {name:?} lies beyond the end of the archive"))?;
        return Ok(Cow::Borrowed(data));
    }
    let size = e.size();
    let mut data = Vec::new();
    e.take(size).read_to_end(&mut data)?;
    super::npz::short(data.len(), size as usize).with_context(|| format!("entry {name:?}"))?;
    Ok(Cow::Owned(data))
}

/// The pickle and storages of the legacy format.
fn legacy_format(bytes: &[u8]) -> Result<(Graph<'_>, Storages<'_>, bool)> {
    let mut at = 0;
    let mut next = |what: &str| -> Result<Graph<'_>> {
        let (g, used) = pickle::load(&bytes[at..]).with_context(|| format!("legacy {what}"))?;
        at += used;
        Ok(g)
    };
    let magic = next("magic number")?;
    if !matches!(&magic.nodes[magic.root], Node::BigInt(b) if *b == LEGACY_MAGIC) {
        bail!("not a torch.save file (legacy magic number missing)");
    }
    let proto = next("protocol version")?;
    if !matches!(proto.nodes[proto.root], Node::Int(1001)) {
        bail!("legacy torch.save protocol version is not 1001");
    }
    let info = next("system info")?;
    let little = match &info.nodes[info.root] {
        Node::Dict(items) => items.iter().find_map(|(k, v)| {
            matches!(&info.nodes[*k], Node::Str(s) if s == "little_endian")
                .then(|| matches!(info.nodes[*v], Node::Bool(true)))
        }),
        _ => None,
    };
    let graph = next("object")?;
    let keys = next("storage keys")?;
    let Node::List(ids) = &keys.nodes[keys.root] else {
        bail!("legacy storage keys are not a list");
    };
    let mut storages = Storages::new();
    let mut sizes = HashMap::new();
    for n in &graph.nodes {
        if let Some((key, dtype, complex)) = storage_of(&graph, n)? {
            sizes.insert(key, dtype.size() * if complex { 2 } else { 1 });
        }
    }
    for id in ids {
        let Node::Str(key) = &keys.nodes[*id] else {
            bail!("legacy storage key is not a string");
        };
        let es = *sizes
            .get(key.as_ref())
            .ok_or_else(|| anyhow!("legacy storage {key:?} is not used by the object"))?;
        let count = bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| anyhow!("legacy storage {key:?}: file ends in its size"))?;
        at += 8;
        let len = count
            .checked_mul(es as u64)
            .and_then(|l| usize::try_from(l).ok())
            .filter(|&l| l <= bytes.len() - at)
            .ok_or_else(|| {
                anyhow!("legacy storage {key:?}: {count} elements run past the end of the file")
            })?;
        storages.insert(key.to_string(), Cow::Borrowed(&bytes[at..at + len]));
        at += len;
    }
    Ok((graph, storages, little == Some(false)))
}

/// `(key, dtype, complex)` of a storage persistent id (`('storage', torch.FloatStorage,
/// key, location, numel[, view])`), `None` for any other node.
fn storage_of(g: &Graph, n: &Node) -> Result<Option<(String, DType, bool)>> {
    let Node::Persistent(pid) = n else {
        return Ok(None);
    };
    let Node::Tuple(f) = &g.nodes[*pid] else {
        bail!("persistent id is not a tuple");
    };
    let text = |i: usize| match f.get(i).map(|&x| &g.nodes[x]) {
        Some(Node::Str(s)) => Some(s.as_ref()),
        _ => None,
    };
    if text(0) != Some("storage") || f.len() < 5 {
        bail!("persistent id is not a torch storage");
    }
    let class = match f.get(1).map(|&x| &g.nodes[x]) {
        Some(Node::Global(_, name)) => name.as_str(),
        Some(Node::Str(s)) => s.as_ref(),
        _ => bail!("storage type is not a class"),
    };
    let key = text(2).ok_or_else(|| anyhow!("storage key is not a string"))?;
    if f.get(5).is_some_and(|&v| !matches!(g.nodes[v], Node::None)) {
        bail!("storage {key:?} is a view of another storage (torch < 0.4), not supported");
    }
    let (dtype, complex) = storage_dtype(class)?;
    Ok(Some((key.to_string(), dtype, complex)))
}

/// The element type of a storage class (`FloatStorage` -> f32).
fn storage_dtype(class: &str) -> Result<(DType, bool)> {
    let name = class.trim_end_matches("Storage");
    Ok(match name {
        "Float" => (DType::F32, false),
        "Double" => (DType::F64, false),
        "Half" => (DType::F16, false),
        "BFloat16" => (DType::BF16, false),
        "Long" => (DType::I64, false),
        "Int" => (DType::I32, false),
        "Short" => (DType::I16, false),
        "Char" => (DType::I8, false),
        "Byte" | "Untyped" => (DType::U8, false),
        "Bool" => (DType::Bool, false),
        "UInt16" => (DType::U16, false),
        "UInt32" => (DType::U32, false),
        "UInt64" => (DType::U64, false),
        "Float8_e4m3fn" => (DType::F8E4M3, false),
        "Float8_e5m2" => (DType::F8E5M2, false),
        "ComplexFloat" => (DType::F32, true),
        "ComplexDouble" => (DType::F64, true),
        _ => bail!("storage type {class} is not supported"),
    })
}

/// The walk from the root: names every leaf and hands it to the sink.
struct Walk<'g, 'a, 's> {
    g: &'g Graph<'g>,
    storages: &'g Storages<'a>,
    big_endian: bool,
    limit: usize,
    leaves: usize,
    path: Vec<String>,
    names: HashMap<String, usize>,
    /// Which nodes are values (see `walk::is_value`).
    memo: std::cell::RefCell<Vec<u8>>,
    sink: &'s mut dyn Sink<'a>,
}

mod text;
mod walk;

#[cfg(test)]
mod tests;
