//! How a difference spreads over a tensor, for the pictures of a report (`--format html`): the
//! ULP distances of the differing elements as a histogram over powers of two, and where the
//! differing elements lie, as counts over a grid of at most [`GRID_SIDE`] × [`GRID_SIDE`]
//! cells (a 1-D tensor: one row of at most [`STRIP`] cells).

use serde::{Deserialize, Serialize};

/// Most cells along each side of the grid of a 2-D view.
pub const GRID_SIDE: usize = 32;

/// Most cells of the single row of a 1-D tensor's grid.
pub const STRIP: usize = 128;

/// Where the differing elements of a tensor lie: counts of differing elements over a grid laid
/// on its 2-D view. A 1-D tensor of `n` elements is viewed as 1 × `n`; a tensor of three or more
/// dimensions as (product of all but its last dimension) × (its last dimension); a 0-D tensor
/// has no positions. A side longer than its grid's is cut into near-equal blocks: row `r` of
/// `view[0]` falls in grid row `r * grid[0] / view[0]` (and likewise for columns).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Positions {
    /// The 2-D view (rows, columns) of the tensor the grid lies on.
    pub view: [usize; 2],
    /// The grid (rows, columns): each side at most its view's and `GRID_SIDE` (`STRIP`
    /// columns for a 1-D tensor).
    pub grid: [usize; 2],
    /// Differing elements per grid cell, row-major (`grid[0] * grid[1]` counts).
    pub counts: Vec<u64>,
}

impl Positions {
    /// An empty grid for a tensor of `shape`, or `None` for a 0-D or empty one.
    pub fn for_shape(shape: &[usize]) -> Option<Positions> {
        let (view, most) = match shape {
            [] => return None,
            [n] => ([1, *n], [1, STRIP]),
            [lead @ .., last] => ([lead.iter().product(), *last], [GRID_SIDE, GRID_SIDE]),
        };
        if view[0] == 0 || view[1] == 0 {
            return None;
        }
        let grid = [view[0].min(most[0]), view[1].min(most[1])];
        Some(Positions {
            view,
            grid,
            counts: vec![0; grid[0] * grid[1]],
        })
    }

    /// Counts the element at row-major `flat` index of the tensor as differing.
    pub fn add(&mut self, flat: usize) {
        let (row, col) = (flat / self.view[1], flat % self.view[1]);
        let cell = |i: usize, side: usize| {
            (i as u128 * self.grid[side] as u128 / self.view[side] as u128) as usize
        };
        let (r, c) = (cell(row, 0), cell(col, 1));
        if let Some(n) = self.counts.get_mut(r * self.grid[1] + c) {
            *n += 1;
        }
    }
}

/// The histogram bucket of a ULP distance: 0 for a distance of 0 (the bits differ, the values
/// do not: `+0` vs `-0`, two NaNs), else `k` for a distance in `[2^(k-1), 2^k)`: bucket 1 holds
/// 1 ULP, bucket 2 holds 2–3, bucket 3 holds 4–7, … up to bucket 64.
pub fn ulp_bucket(distance: u64) -> usize {
    (u64::BITS - distance.leading_zeros()) as usize
}

/// Adds one ULP distance to a histogram over [`ulp_bucket`]s, growing it to the bucket: the
/// histogram never ends in empty buckets.
pub fn add_ulp(histogram: &mut Vec<u64>, distance: u64) {
    let b = ulp_bucket(distance);
    if histogram.len() <= b {
        histogram.resize(b + 1, 0);
    }
    histogram[b] += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        let want = [
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (7, 3),
            (8, 4),
            (u64::MAX, 64),
        ];
        for (d, b) in want {
            assert_eq!(ulp_bucket(d), b, "{d}");
        }
        let mut h = Vec::new();
        for d in [1, 1, 5, 0] {
            add_ulp(&mut h, d);
        }
        assert_eq!(h, vec![1, 2, 0, 1]);
    }

    #[test]
    fn views_and_grids() {
        assert_eq!(Positions::for_shape(&[]), None);
        assert_eq!(Positions::for_shape(&[0, 4]), None);
        let p = Positions::for_shape(&[5]).unwrap();
        assert_eq!((p.view, p.grid, p.counts.len()), ([1, 5], [1, 5], 5));
        let p = Positions::for_shape(&[1000]).unwrap();
        assert_eq!((p.view, p.grid), ([1, 1000], [1, STRIP]));
        let p = Positions::for_shape(&[2, 3, 100]).unwrap();
        assert_eq!((p.view, p.grid), ([6, 100], [6, GRID_SIDE]));
    }

    #[test]
    fn elements_land_in_their_block() {
        let mut p = Positions::for_shape(&[64, 64]).unwrap();
        assert_eq!(p.grid, [32, 32]);
        p.add(0); // (0, 0)
        p.add(1); // (0, 1): the same 2×2 block
        p.add(64 * 63 + 63); // the last element: the last cell
        assert_eq!((p.counts[0], p.counts[32 * 32 - 1]), (2, 1));
        assert_eq!(p.counts.iter().sum::<u64>(), 3);
    }

    proptest::proptest! {
        /// Every element of any shape lands in a cell of the grid, and the cells cover the
        /// view in order: a later row never lands in an earlier grid row.
        #[test]
        fn every_element_lands_in_the_grid(rows in 1usize..300, cols in 1usize..300, pick in 0usize..90_000) {
            let mut p = Positions::for_shape(&[rows, cols]).unwrap();
            let flat = pick % (rows * cols);
            p.add(flat);
            proptest::prop_assert_eq!(p.counts.iter().sum::<u64>(), 1);
            let cell = p.counts.iter().position(|&n| n == 1).unwrap();
            let (r, c) = (cell / p.grid[1], cell % p.grid[1]);
            proptest::prop_assert!(r < p.grid[0] && c < p.grid[1]);
            proptest::prop_assert_eq!(r, flat / cols * p.grid[0] / rows);
            proptest::prop_assert_eq!(c, flat % cols * p.grid[1] / cols);
        }
    }
}
