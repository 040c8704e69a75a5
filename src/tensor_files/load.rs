//! Loading one output back from its file, to explain how it differs between two runs: a
//! tensor in canonical form, or a `torch.save` value as its text.

use super::{map, read, FileKind, OutputFile, Sink, View};
use crate::tensor::Tensor;
use anyhow::{anyhow, bail, Result};

/// Loads the tensor called `name` (a name `digest_file` returned for `file`) into memory,
/// in canonical form, e.g. to explain how it differs between two runs.
pub fn load(file: &OutputFile, name: &str) -> Result<Tensor> {
    load_bytes(file, &map(file)?, key_of(file, name)?)
        .and_then(|v| {
            let v = v.ok_or_else(|| anyhow!("no tensor {name:?} in it"))?;
            Tensor::from_bytes(v.dtype, &v.shape, v.data.into_owned())
        })
        .map_err(|e| anyhow!("{}: {e:#}", file.name))
}

/// The canonical text of output `name` of `file` when it is a value of a `torch.save` file
/// (`ckpt.pt:config.out_dir` -> `'out/run'`), `None` when it is a tensor (never copied).
pub fn load_value(file: &OutputFile, name: &str) -> Result<Option<String>> {
    if file.kind != FileKind::Torch {
        return Ok(None);
    }
    let mut sink = ValueSink {
        key: key_of(file, name)?,
        found: None,
    };
    read(file, &map(file)?, &mut sink).map_err(|e| anyhow!("{}: {e:#}", file.name))?;
    let found = sink
        .found
        .ok_or_else(|| anyhow!("{}: no output {name:?} in it", file.name))?;
    Ok(found)
}

/// The key of output `name` inside `file` (`None`: the whole file).
fn key_of(file: &OutputFile, name: &str) -> Result<Option<String>> {
    if name == file.name {
        return Ok(None);
    }
    match name
        .strip_prefix(&file.name)
        .and_then(|k| k.strip_prefix(':'))
    {
        Some(k) => Ok(Some(k.to_string())),
        None => bail!("{name:?} is not a tensor of {}", file.name),
    }
}

/// The tensor under `key` in `file` whose content is `bytes`, if there is one.
pub(super) fn load_bytes(
    file: &OutputFile,
    bytes: &[u8],
    key: Option<String>,
) -> Result<Option<View<'static>>> {
    let mut sink = LoadSink { key, found: None };
    read(file, bytes, &mut sink)?;
    Ok(sink.found)
}

/// Keeps the one tensor asked for.
struct LoadSink {
    key: Option<String>,
    found: Option<View<'static>>,
}

impl<'a> Sink<'a> for LoadSink {
    fn wants(&self, key: &str) -> bool {
        self.found.is_none() && self.key.as_deref().is_none_or(|k| k == key)
    }
    fn take(&mut self, key: Option<String>, v: View<'a>) -> Result<()> {
        if key == self.key {
            self.found = Some(v.into_owned());
        }
        Ok(())
    }
}

/// Keeps the text of the one output asked for, if it is a value (`Some(None)`: a tensor).
struct ValueSink {
    key: Option<String>,
    found: Option<Option<String>>,
}

impl<'a> Sink<'a> for ValueSink {
    fn wants(&self, key: &str) -> bool {
        self.found.is_none() && self.key.as_deref().is_none_or(|k| k == key)
    }
    fn take(&mut self, key: Option<String>, v: View<'a>) -> Result<()> {
        if key == self.key {
            self.found = Some(
                v.text
                    .then(|| String::from_utf8_lossy(&v.data).into_owned()),
            );
        }
        Ok(())
    }
}
