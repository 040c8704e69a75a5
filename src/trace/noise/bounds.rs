//! The bounds of the noise rule ([`super`]): the noise threshold of an op from its dtype and
//! reduction length, the allowance for growth, and the op's non-tensor arguments compared.

use crate::trace::sketch;

/// `c` in the threshold `c · ε · √K` (see the module docs).
pub const NOISE_FACTOR: f64 = 8.0;

/// The threshold is never above this relative difference (bf16 over long reductions).
pub const MAX_THRESHOLD: f64 = 0.05;

/// How many times the growth so far a downstream record may differ before it is beyond noise.
pub const GROWTH_ALLOWANCE: f64 = 100.0;

/// The reduction length `K` of an op from its tensors' labels: the largest dimension of any
/// input, or the number of input elements per result element (largest input over largest
/// result) when that is larger; at least 1.
pub fn reduction_length(inputs: &[String], outputs: &[&str]) -> usize {
    let numel = |s: &[usize]| s.iter().product::<usize>();
    let shapes = |labels: &mut dyn Iterator<Item = &str>| -> Vec<Vec<usize>> {
        labels.filter_map(sketch::shape_of_label).collect()
    };
    let ins = shapes(&mut inputs.iter().map(String::as_str));
    let outs = shapes(&mut outputs.iter().copied());
    let largest_dim = ins.iter().flatten().copied().max().unwrap_or(1);
    let largest_in = ins.iter().map(|s| numel(s)).max().unwrap_or(1);
    let largest_out = outs.iter().map(|s| numel(s)).max().unwrap_or(1).max(1);
    largest_dim.max(largest_in.div_ceil(largest_out)).max(1)
}

/// The noise threshold `min(c · ε · √K, cap)` of a result of `dtype` reduced over `k` terms;
/// `None` for a dtype that is not floating point.
pub fn threshold(dtype: crate::tensor::DType, k: usize) -> Option<f64> {
    let eps = sketch::epsilon(dtype)?;
    Some((NOISE_FACTOR * eps * (k.max(1) as f64).sqrt()).min(MAX_THRESHOLD))
}

/// `name=value` pairs of a record's `args` text, split at the commas outside brackets
/// (`normalized_shape=[16],eps=1e-05` → `normalized_shape` `[16]`, `eps` `1e-05`); an item
/// without `=` is named by its position (`#2`).
pub fn arguments(text: &str) -> Vec<(String, String)> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ',' if depth <= 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !text.is_empty() {
        items.push(&text[start..]);
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (format!("#{i}"), item.to_string()),
        })
        .collect()
}

/// `eps 1e-05 vs 0.001` for each argument that differs between two `args` texts (`(none)` on
/// the side without it), `; `-separated.
pub fn argument_difference(a: &str, b: &str) -> String {
    let (x, y) = (arguments(a), arguments(b));
    let get = |v: &[(String, String)], k: &str| v.iter().find(|(n, _)| n == k).map(|p| p.1.clone());
    let mut names: Vec<&String> = x.iter().map(|p| &p.0).collect();
    names.extend(y.iter().map(|p| &p.0).filter(|n| get(&x, n).is_none()));
    let none = || "(none)".to_string();
    names
        .into_iter()
        .filter_map(|n| {
            let (p, q) = (get(&x, n), get(&y, n));
            (p != q).then(|| {
                format!(
                    "{n} {} vs {}",
                    p.unwrap_or_else(none),
                    q.unwrap_or_else(none)
                )
            })
        })
        .collect::<Vec<_>>()
        .join("; ")
}
