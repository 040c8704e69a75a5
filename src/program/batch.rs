//! `bitexact run --vary batch=A,B`: batch invariance. A request must get the same bits whether
//! it is computed alone or batched with others. The command takes its batch size from the
//! placeholder [`BATCH`] (`python infer.py --batch-size {batch}`), replaced by A in the even runs
//! and B in the odd runs (default 1 and 8, `crate::controls::default_batch_pair`); without
//! `--vary batch` it is A. Outputs are compared by name as usual, so a script that writes one
//! output per request (`logits_<i>.npy`) is compared request by request; a difference is the
//! verdict `batch-variant`.
//!
//! Under `--trace ops` the larger-batch run's tracer records row slices of every result whose
//! first dimension is a multiple of B/A ([`crate::protocol::TRACE_ROWS_ENV`]), so each op's
//! result can be compared request by request with the smaller-batch run's, and the first op
//! that breaks invariance is named ([`crate::trace::batch`]). That needs B to be a multiple of
//! A.

use std::ffi::OsString;

/// The batch-size placeholder in a command's arguments.
pub const BATCH: &str = "{batch}";

/// Whether any argument of `command` holds `placeholder`.
pub fn uses(command: &[OsString], placeholder: &str) -> bool {
    command
        .iter()
        .any(|a| a.to_string_lossy().contains(placeholder))
}

/// `command` with every `placeholder` replaced by `value`.
pub fn replace(command: &[OsString], placeholder: &str, value: usize) -> Vec<OsString> {
    command
        .iter()
        .map(|a| match a.to_str() {
            Some(s) if s.contains(placeholder) => s.replace(placeholder, &value.to_string()).into(),
            _ => a.clone(),
        })
        .collect()
}

/// The row slices the larger-batch run's tracer records per result: B/A for the run at the
/// larger of `pair`'s sizes when it is a multiple of the smaller, else none (`None`).
pub fn rows(pair: [usize; 2], batch: usize) -> Option<usize> {
    let (small, large) = (pair[0].min(pair[1]), pair[0].max(pair[1]));
    (batch == large && small > 0 && large % small == 0 && large > small).then(|| large / small)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placeholder_is_replaced_in_every_argument() {
        let cmd: Vec<OsString> = ["python", "serve.py", "--batch-size={batch}", "{batch}"]
            .iter()
            .map(OsString::from)
            .collect();
        assert!(uses(&cmd, BATCH));
        let eight = replace(&cmd, BATCH, 8);
        assert_eq!(eight[2], "--batch-size=8");
        assert_eq!(eight[3], "8");
        assert!(!uses(&eight, BATCH));
    }

    #[test]
    fn only_the_larger_run_slices_rows() {
        assert_eq!(rows([1, 8], 8), Some(8));
        assert_eq!(rows([1, 8], 1), None);
        assert_eq!(rows([8, 2], 8), Some(4));
        assert_eq!(rows([3, 8], 8), None);
    }
}
