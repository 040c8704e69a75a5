//! Tensors that are views with strides (a transposed weight, the heads of an attention split):
//! the tracer hands them over as they lie in memory, without a contiguous copy from torch. The
//! bytes they span are what the digest cache checks (with the strides in its key); their
//! elements, gathered in row-major order, are what is hashed.

/// How many bytes a view of `shape` with element `strides` spans from its first element, for
/// elements of `size` bytes: 0 for an empty view; `None` on overflow.
pub(crate) fn span(size: usize, shape: &[usize], strides: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    let last = shape.iter().zip(strides).try_fold(0usize, |at, (&n, &s)| {
        (n - 1).checked_mul(s).and_then(|d| at.checked_add(d))
    })?;
    last.checked_add(1)?.checked_mul(size)
}

/// Appends the elements of the view (`raw`: the bytes it spans, see [`span`]) to `out` in
/// row-major order: the tensor's canonical bytes. `strides` has one entry per dimension.
pub(crate) fn gather_into(
    out: &mut Vec<u8>,
    raw: &[u8],
    size: usize,
    shape: &[usize],
    strides: &[usize],
) {
    out.reserve(shape.iter().product::<usize>() * size);
    gather_rows(out, raw, size, shape, strides, |_| {});
}

/// Bytes of gathered elements [`fingerprint`] holds at a time.
const BLOCK_BYTES: usize = 64 << 10;

/// The fingerprint of the view's elements in row-major order (as [`gather_into`] lays them
/// out), gathered [`BLOCK_BYTES`] at a time: no copy of the whole view.
pub(crate) fn fingerprint(
    raw: &[u8],
    size: usize,
    shape: &[usize],
    strides: &[usize],
) -> bitexact::fingerprint::Fingerprint {
    let mut f = bitexact::fingerprint::Fingerprinter::default();
    let mut block = Vec::with_capacity(BLOCK_BYTES + shape.last().copied().unwrap_or(1) * size);
    gather_rows(&mut block, raw, size, shape, strides, |b| {
        if b.len() >= BLOCK_BYTES {
            f.update(b);
            b.clear();
        }
    });
    f.update(&block);
    f.finish()
}

/// [`gather_into`], calling `row_done` with `out` after each row it appends.
fn gather_rows(
    out: &mut Vec<u8>,
    raw: &[u8],
    size: usize,
    shape: &[usize],
    strides: &[usize],
    mut row_done: impl FnMut(&mut Vec<u8>),
) {
    if shape.contains(&0) {
        return;
    }
    let Some((&inner, outer)) = shape.split_last() else {
        out.extend_from_slice(&raw[..size]); // a 0-d view: its one element
        return;
    };
    let step = strides[outer.len()] * size;
    let mut index = vec![0usize; outer.len()];
    let mut base = 0usize;
    loop {
        match (step == size, size) {
            (true, _) => out.extend_from_slice(&raw[base..base + inner * size]),
            (false, 4) => row::<4>(out, raw, base, step, inner),
            (false, 2) => row::<2>(out, raw, base, step, inner),
            (false, 8) => row::<8>(out, raw, base, step, inner),
            (false, 1) => row::<1>(out, raw, base, step, inner),
            (false, _) => (0..inner).for_each(|j| {
                let at = base + j * step;
                out.extend_from_slice(&raw[at..at + size]);
            }),
        }
        row_done(out);
        // The next row: the outer dimensions count like an odometer.
        let mut d = outer.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            base += strides[d] * size;
            if index[d] < outer[d] {
                break;
            }
            base -= outer[d] * strides[d] * size;
            index[d] = 0;
        }
    }
}

/// Appends `count` elements of `N` bytes, `step` bytes apart from `raw[base..]`.
fn row<const N: usize>(out: &mut Vec<u8>, raw: &[u8], base: usize, step: usize, count: usize) {
    for j in 0..count {
        let at = base + j * step;
        let e: &[u8; N] = raw[at..at + N].try_into().expect("N bytes");
        out.extend_from_slice(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The element at a row-major position, computed from the strides directly.
    fn naive(raw: &[u8], size: usize, shape: &[usize], strides: &[usize]) -> Vec<u8> {
        let count: usize = shape.iter().product();
        let mut out = Vec::new();
        for flat in 0..count {
            let (mut rest, mut at) = (flat, 0);
            for d in (0..shape.len()).rev() {
                at += (rest % shape[d]) * strides[d];
                rest /= shape[d];
            }
            out.extend_from_slice(&raw[at * size..(at + 1) * size]);
        }
        out
    }

    proptest! {
        #[test]
        fn gathered_elements_are_the_row_major_ones(
            dims in proptest::collection::vec((0usize..5, 0usize..7), 0..4),
            size in prop_oneof![Just(1usize), Just(2), Just(4), Just(8), Just(3)],
        ) {
            let shape: Vec<usize> = dims.iter().map(|d| d.0).collect();
            let strides: Vec<usize> = dims.iter().map(|d| d.1).collect();
            let n = span(size, &shape, &strides).unwrap();
            let raw: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            let mut out = vec![9u8]; // appended after what is there
            gather_into(&mut out, &raw, size, &shape, &strides);
            prop_assert_eq!(out[0], 9);
            prop_assert_eq!(&out[1..], &naive(&raw, size, &shape, &strides)[..]);
            let whole = bitexact::fingerprint::fingerprint(&out[1..]);
            prop_assert_eq!(fingerprint(&raw, size, &shape, &strides), whole);
        }
    }

    #[test]
    fn a_transpose_spans_its_base_and_reads_it_by_columns() {
        // [[0, 1, 2], [3, 4, 5]] (u8) transposed: shape [3, 2], strides [1, 3].
        let raw = [0u8, 1, 2, 3, 4, 5];
        assert_eq!(span(1, &[3, 2], &[1, 3]), Some(6));
        let mut out = Vec::new();
        gather_into(&mut out, &raw, 1, &[3, 2], &[1, 3]);
        assert_eq!(out, [0, 3, 1, 4, 2, 5]);
        assert_eq!(span(4, &[2, 0], &[1, 1]), Some(0));
        assert_eq!(span(4, &[usize::MAX, 2], &[2, 1]), None);
        assert_eq!(span(4, &[5, 3], &[0, 1]), Some(12)); // a broadcast row
    }
}
