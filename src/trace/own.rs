//! A `--trace modules` module record's own state (its `"own"` field): which of its first
//! inputs are the module's own parameters and persistent buffers, and, from record version 8
//! on, their names.

use serde::{Deserialize, Serialize};

/// A module record's own state, its first inputs: how many (record versions 6 and 7), or
/// their names (version 8 on: `{"params":["weight","bias"],"buffers":["running_mean"]}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Own {
    /// How many of the record's first inputs are the module's own parameters and buffers.
    Count(usize),
    /// Their names, in the order the record lists them: the parameters', then the buffers'.
    Named {
        /// The module's own parameters (`weight`), first among the record's inputs.
        params: Vec<String>,
        /// Its persistent buffers (`running_var`), after them.
        buffers: Vec<String>,
    },
}

/// What one of a module record's own inputs is, as far as the record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind<'a> {
    /// A parameter, by its attribute name.
    Param(&'a str),
    /// A persistent buffer, by its attribute name.
    Buffer(&'a str),
    /// A parameter or a buffer (a record before version 8).
    Either,
}

impl Own {
    /// How many of the record's first inputs are the module's own state.
    pub fn count(&self) -> usize {
        match self {
            Own::Count(n) => *n,
            Own::Named { params, buffers } => params.len() + buffers.len(),
        }
    }

    /// What input `i` is, when it is one of the module's own (`i` < [`Own::count`]).
    pub fn kind(&self, i: usize) -> Option<Kind<'_>> {
        match self {
            Own::Count(n) => (i < *n).then_some(Kind::Either),
            Own::Named { params, buffers } => match params.get(i) {
                Some(p) => Some(Kind::Param(p)),
                None => buffers.get(i - params.len()).map(|b| Kind::Buffer(b)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_are_read_and_each_input_is_told_apart() {
        let old: Own = serde_json::from_str("2").unwrap();
        assert_eq!(
            (old.count(), old.kind(1), old.kind(2)),
            (2, Some(Kind::Either), None)
        );
        let new: Own =
            serde_json::from_str(r#"{"params":["weight"],"buffers":["running_var"]}"#).unwrap();
        assert_eq!(new.count(), 2);
        assert_eq!(
            (new.kind(0), new.kind(1), new.kind(2)),
            (
                Some(Kind::Param("weight")),
                Some(Kind::Buffer("running_var")),
                None
            )
        );
        assert_eq!(
            serde_json::to_string(&new).unwrap().chars().next(),
            Some('{')
        );
        assert!(serde_json::from_str::<Own>(r#"{"params":[]}"#).is_err());
    }
}
