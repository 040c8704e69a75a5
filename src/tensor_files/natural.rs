//! Natural order of output names: digit runs compare as numbers, so `step_2` < `step_10`.

use std::cmp::Ordering;

/// Compares two names in natural order: runs of ASCII digits compare by numeric value
/// (any length, no overflow), every other character by code point; names equal under that
/// rule (`step_02`, `step_2`) fall back to plain string order, so the result is a total order
/// that is `Equal` only for equal strings. On digit-free strings it is plain string order.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    tokens_cmp(a.as_bytes(), b.as_bytes()).then_with(|| a.cmp(b))
}

/// Token-wise comparison: a digit run is one token, any other byte is its own token. Bytes
/// compare as bytes (UTF-8 byte order is code point order), digit runs numerically, and a digit
/// run against another byte by its first digit.
fn tokens_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let ei = run_end(a, i);
            let ej = run_end(b, j);
            match number_cmp(&a[i..ei], &b[j..ej]) {
                Ordering::Equal => {}
                o => return o,
            }
            (i, j) = (ei, ej);
        } else {
            match a[i].cmp(&b[j]) {
                Ordering::Equal => {}
                o => return o,
            }
            (i, j) = (i + 1, j + 1);
        }
    }
    (a.len() - i).cmp(&(b.len() - j))
}

fn run_end(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && s[i].is_ascii_digit() {
        i += 1;
    }
    i
}

/// Numeric comparison of two digit strings of any length.
fn number_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let strip = |s: &[u8]| -> usize { s.iter().take_while(|&&c| c == b'0').count() };
    let (a, b) = (&a[strip(a)..], &b[strip(b)..]);
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numbers_compare_by_value() {
        let mut v = vec![
            "step_10", "step_2", "step_1", "step_02", "a", "step_", "b1", "b01", "x9y", "x10",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            ["a", "b01", "b1", "step_", "step_1", "step_02", "step_2", "step_10", "x9y", "x10"]
        );
        let huge = "n184467440737095516160000";
        assert_eq!(
            natural_cmp(huge, "n18446744073709551615"),
            Ordering::Greater
        );
        assert_eq!(natural_cmp("a.", "a1"), Ordering::Less); // '.' < '1' as in plain order
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-c0-9_.é]{0,10}"
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn antisymmetric_and_equal_only_when_equal(a in name(), b in name()) {
            prop_assert_eq!(natural_cmp(&a, &b), natural_cmp(&b, &a).reverse());
            prop_assert_eq!(natural_cmp(&a, &b) == Ordering::Equal, a == b);
        }

        #[test]
        fn transitive(mut v in proptest::collection::vec(name(), 3)) {
            v.sort_by(|a, b| natural_cmp(a, b));
            prop_assert_ne!(natural_cmp(&v[0], &v[1]), Ordering::Greater);
            prop_assert_ne!(natural_cmp(&v[1], &v[2]), Ordering::Greater);
            prop_assert_ne!(natural_cmp(&v[0], &v[2]), Ordering::Greater);
        }

        #[test]
        fn sorting_is_consistent(v in proptest::collection::vec(name(), 0..20)) {
            let mut s = v.clone();
            s.sort_by(|a, b| natural_cmp(a, b));
            for w in s.windows(2) {
                prop_assert_ne!(natural_cmp(&w[0], &w[1]), Ordering::Greater);
            }
            for (i, x) in s.iter().enumerate() {
                for y in &s[i + 1..] {
                    prop_assert_ne!(natural_cmp(x, y), Ordering::Greater);
                }
            }
        }

        #[test]
        fn plain_order_without_digits(a in "[a-z_.é/:]{0,12}", b in "[a-z_.é/:]{0,12}") {
            prop_assert_eq!(natural_cmp(&a, &b), a.cmp(&b));
        }

        #[test]
        fn numbered_steps_in_numeric_order(x in 0u64..1_000_000, y in 0u64..1_000_000, p in "[a-z_]{0,5}") {
            let (a, b) = (format!("{p}{x}.npy"), format!("{p}{y:06}.npy"));
            prop_assert_eq!(natural_cmp(&a, &b), x.cmp(&y).then_with(|| a.cmp(&b)));
        }
    }
}
