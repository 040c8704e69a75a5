//! `kernel/<op>/<size>` cases: one per op family and size class (`small`, and `large` with
//! about 4M elements; matmul's large is 512×1024×512). Inputs are drawn from Philox streams
//! named after the case, so they are the same on every run, thread count and device.
//! The row-wise cases (matmul, softmax, layer_norm) honour [`Ctx::in_batches`], so the `batch`
//! variation can check that rows computed in smaller batches give the same bits.

use crate::case::{Case, Ctx, Outputs};
use crate::ops;
use crate::tensor::Tensor;
use anyhow::Result;

/// A size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Hundreds to thousands of elements.
    Small,
    /// About four million elements.
    Large,
}

impl Size {
    fn name(self) -> &'static str {
        match self {
            Size::Small => "small",
            Size::Large => "large",
        }
    }
}

/// One op family at one size.
pub struct KernelCase {
    /// Op family name (as in [`ops::catalog`]).
    pub op: &'static str,
    /// Size class.
    pub size: Size,
    run: KernelFn,
}

/// Builds inputs and runs the op for one size class.
type KernelFn = fn(&mut Ctx, Size) -> Result<Outputs>;

impl Case for KernelCase {
    fn name(&self) -> String {
        format!("kernel/{}/{}", self.op, self.size.name())
    }
    fn ops(&self) -> Vec<&'static str> {
        vec![self.op]
    }
    fn run(&self, ctx: &mut Ctx) -> Result<Outputs> {
        (self.run)(ctx, self.size)
    }
}

/// Every kernel case.
pub fn cases() -> Vec<Box<dyn Case>> {
    let table: &[(&'static str, KernelFn)] = &[
        ("reduce_sum", reduce_sum),
        ("matmul", matmul),
        ("scatter_add", scatter_add),
        ("col_sum", col_sum),
        ("softmax", softmax),
        ("layer_norm", layer_norm),
        ("dropout", dropout),
        ("philox", philox),
    ];
    table
        .iter()
        .flat_map(|&(op, run)| [Size::Small, Size::Large].map(|size| KernelCase { op, size, run }))
        .map(|c| Box::new(c) as Box<dyn Case>)
        .collect()
}

/// Uniform values in `[-scale, scale)` from the stream `name`.
fn inputs(ctx: &Ctx, name: &str, n: usize, scale: f32) -> Vec<f32> {
    ctx.stream(name)
        .uniform(n)
        .into_iter()
        .map(|u| (2.0 * u - 1.0) * scale)
        .collect()
}

fn out(pairs: Vec<(&str, Tensor)>) -> Outputs {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

const LARGE: usize = 1 << 22;

fn reduce_sum(ctx: &mut Ctx, size: Size) -> Result<Outputs> {
    let n = if size == Size::Small { 1000 } else { LARGE };
    let x = inputs(ctx, "kernel/reduce_sum/x", n, 1.0);
    let s = ops::reduce_sum::reduce_sum(ctx, &x)?;
    Ok(out(vec![("sum", Tensor::scalar(s))]))
}

fn matmul(ctx: &mut Ctx, size: Size) -> Result<Outputs> {
    let (m, k, n) = if size == Size::Small {
        (33, 64, 17)
    } else {
        (512, 1024, 512)
    };
    let a = inputs(ctx, "kernel/matmul/a", m * k, 1.0);
    let b = inputs(ctx, "kernel/matmul/b", k * n, 1.0);
    let c = ctx.in_batches(m, |ctx, r0, r1| {
        ops::matmul::matmul(ctx, &a[r0 * k..r1 * k], &b, r1 - r0, k, n)
    })?;
    Ok(out(vec![("c", Tensor::from_slice(&[m, n], &c))]))
}

fn scatter_add(ctx: &mut Ctx, size: Size) -> Result<Outputs> {
    let (n, d, m) = if size == Size::Small {
        (1000, 8, 50)
    } else {
        (LARGE / 16, 16, 1024)
    };
    let src = inputs(ctx, "kernel/scatter_add/src", n * d, 1.0);
    let mut s = ctx.stream("kernel/scatter_add/index");
    let index: Vec<i64> = (0..n).map(|_| s.below(m as u32) as i64).collect();
    let y = ops::scatter_add::scatter_add(ctx, &src, &index, m, d)?;
    Ok(out(vec![("out", Tensor::from_slice(&[m, d], &y))]))
}

/// Column sums (a bias gradient): 32×100, or 4096×1024. Not batch-capable: the sum runs over
/// the rows.
fn col_sum(ctx: &mut Ctx, size: Size) -> Result<Outputs> {
    let (r, c) = if size == Size::Small {
        (32, 100)
    } else {
        (4096, 1024)
    };
    let x = inputs(ctx, "kernel/col_sum/x", r * c, 1.0);
    let y = ops::col_sum::col_sum(ctx, &x, r, c)?;
    Ok(out(vec![("sums", Tensor::from_slice(&[c], &y))]))
}

fn softmax(ctx: &mut Ctx, size: Size) -> Result<Outputs> {
    let (r, c) = if size == Size::Small {
        (8, 100)
    } else {
        (4096, 1024)
    };
    let x = inputs(ctx, "kernel/softmax/x", r * c, 4.0);
    let y = ctx.in_batches(r, |ctx, r0, r1| {
        ops::softmax::softmax(ctx, &x[r0 * c..r1 * c], r1 - r0, c)
    })?;
    Ok(out(vec![("y", Tensor::from_slice(&[r, c], &y))]))
}

fn layer_norm(ctx: &mut Ctx, size: Size) -> Result<Outputs> {
    let (r, c) = if size == Size::Small {
        (8, 100)
    } else {
        (4096, 1024)
    };
    let x = inputs(ctx, "kernel/layer_norm/x", r * c, 3.0);
    let g = inputs(ctx, "kernel/layer_norm/gamma", c, 1.0);
    let b = inputs(ctx, "kernel/layer_norm/beta", c, 1.0);
    let y = ctx.in_batches(r, |ctx, r0, r1| {
        ops::layer_norm::layer_norm(ctx, &x[r0 * c..r1 * c], &g, &b, r1 - r0, c, 1e-5)
    })?;
    Ok(out(vec![("y", Tensor::from_slice(&[r, c], &y))]))
}

fn dropout(ctx: &mut Ctx, size: Size) -> Result<Outputs> {
    let n = if size == Size::Small { 1000 } else { LARGE };
    let x = inputs(ctx, "kernel/dropout/x", n, 1.0);
    let mut s = ctx.stream("kernel/dropout/mask");
    let (y, mask) = ops::dropout::dropout(ctx, &x, 0.1, &mut s)?;
    Ok(out(vec![
        ("y", Tensor::from_slice(&[n], &y)),
        ("mask", Tensor::from_bools(&[n], &mask)),
    ]))
}

/// Words of a Philox stream from an unaligned offset (so partial Philox blocks are covered).
fn philox(ctx: &mut Ctx, size: Size) -> Result<Outputs> {
    let n = if size == Size::Small { 1000 } else { LARGE };
    let mut s = ctx.stream("kernel/philox/words");
    s.offset = 3;
    let w = ops::philox::random_words(ctx, &mut s, n)?;
    Ok(out(vec![("words", Tensor::from_slice(&[n], &w))]))
}
