//! Neural-network layers shared by the bundled compute models (`bert`, `wide_deep`, `dlrm`):
//! strided GEMM through `matrixmultiply::sgemm`, dense layers with bias, activations, layer norm,
//! softmax, embedding tables, seeded weight initialisation and reusable scratch buffers.
//!
//! Matrices are row-major `f32` slices. Weights come from `ChaCha8Rng::seed_from_u64`, so every
//! build of a model, on any machine, holds the same weights.

use matrixmultiply::sgemm;
use parking_lot::Mutex;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

/// What a layer rejects in a request's data (a bad model input, not a bug).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NnError {
    #[error("{what} {id} at position {position} is out of range (valid ids are 0..{limit})")]
    IdOutOfRange { what: &'static str, position: usize, id: i64, limit: usize },
}

/// A read-only strided view of a matrix: element (r, c) is `data[r * row_stride + c * col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> Mat<'a> {
    /// A contiguous row-major `rows × cols` matrix at the start of `data`.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// A view with explicit strides (a column block of a wider matrix, for example).
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> Self {
        let m = Mat { data, rows, cols, row_stride, col_stride };
        assert!(
            m.fits(),
            "matrix view {rows}x{cols} (strides {row_stride}, {col_stride}) exceeds its {} elements",
            data.len()
        );
        m
    }

    /// The transpose, without moving data.
    pub fn t(self) -> Self {
        Mat { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride < self.data.len()
    }
}

/// A writable row-major view whose rows may be spaced wider than they are long.
#[derive(Debug)]
pub struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a> MatMut<'a> {
    pub fn new(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols)
    }

    pub fn strided(data: &'a mut [f32], rows: usize, cols: usize, row_stride: usize) -> Self {
        let fits = rows == 0 || cols == 0 || (rows - 1) * row_stride + cols <= data.len();
        assert!(fits, "output view {rows}x{cols} (row stride {row_stride}) exceeds its {} elements", data.len());
        MatMut { data, rows, cols, row_stride }
    }
}

/// `c ← alpha·a·b + beta·c`, by `matrixmultiply` (blocked, SIMD, threaded for large sizes).
pub fn gemm(alpha: f32, a: Mat, b: Mat, beta: f32, c: MatMut) {
    assert_eq!(a.cols, b.rows, "gemm: inner dimensions differ");
    assert_eq!((a.rows, b.cols), (c.rows, c.cols), "gemm: output shape differs");
    if c.rows == 0 || c.cols == 0 {
        return;
    }
    // SAFETY: every view was checked to lie inside its slice (`Mat::strided`, `MatMut::strided`),
    // and `c` is borrowed mutably, so it aliases neither `a` nor `b`.
    unsafe {
        sgemm(
            a.rows,
            a.cols,
            b.cols,
            alpha,
            a.data.as_ptr(),
            a.row_stride as isize,
            a.col_stride as isize,
            b.data.as_ptr(),
            b.row_stride as isize,
            b.col_stride as isize,
            beta,
            c.data.as_mut_ptr(),
            c.row_stride as isize,
            1,
        );
    }
}

/// Seeded weight initialisation.
pub struct WeightInit {
    rng: ChaCha8Rng,
}

impl WeightInit {
    pub fn new(seed: u64) -> Self {
        WeightInit { rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    /// `n` samples of N(0, std²).
    pub fn normal(&mut self, n: usize, std: f32) -> Vec<f32> {
        let dist = Normal::new(0.0f32, std).expect("std is finite and positive");
        (0..n).map(|_| dist.sample(&mut self.rng)).collect()
    }
}

/// A dense layer `y = x·W + b`, with `W` stored `in_dim × out_dim`.
/// Up to this many rows, [`Linear::forward`] skips the GEMM: `matrixmultiply` packs the whole
/// weight matrix on every call, which dominated small batches (~40% of wide_deep at batch 1).
const SMALL_BATCH_ROWS: usize = 4;

pub struct Linear {
    weight: Vec<f32>,
    bias: Vec<f32>,
    pub in_dim: usize,
    pub out_dim: usize,
}

impl Linear {
    /// Weights N(0, std²), biases N(0, (std/10)²) so they are not all zero.
    pub fn random(init: &mut WeightInit, in_dim: usize, out_dim: usize, std: f32) -> Self {
        Linear { weight: init.normal(in_dim * out_dim, std), bias: init.normal(out_dim, std / 10.0), in_dim, out_dim }
    }

    /// Scaled for ReLU networks (He): activations keep their magnitude from layer to layer.
    pub fn random_he(init: &mut WeightInit, in_dim: usize, out_dim: usize) -> Self {
        Self::random(init, in_dim, out_dim, (2.0 / in_dim as f32).sqrt())
    }

    /// `out[rows × out_dim] = x[rows × in_dim]·W + b`.
    pub fn forward(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let out = &mut out[..rows * self.out_dim];
        for row in out.chunks_exact_mut(self.out_dim) {
            row.copy_from_slice(&self.bias);
        }
        if rows <= SMALL_BATCH_ROWS {
            // Stream W once; each of its rows updates every output row (vectorised multiply-adds).
            let x = &x[..rows * self.in_dim];
            for (i, w_row) in self.weight.chunks_exact(self.out_dim).enumerate() {
                for (x_row, o_row) in x.chunks_exact(self.in_dim).zip(out.chunks_exact_mut(self.out_dim)) {
                    let xi = x_row[i];
                    for (o, w) in o_row.iter_mut().zip(w_row) {
                        *o += xi * w;
                    }
                }
            }
            return;
        }
        gemm(
            1.0,
            Mat::new(x, rows, self.in_dim),
            Mat::new(&self.weight, self.in_dim, self.out_dim),
            1.0,
            MatMut::new(out, rows, self.out_dim),
        );
    }

    /// Multiply-adds per input row, for FLOP accounting.
    pub fn macs_per_row(&self) -> usize {
        self.in_dim * self.out_dim
    }
}

/// A stack of dense layers with ReLU between them (and after the last one when `relu_last`).
pub struct Mlp {
    pub layers: Vec<Linear>,
    relu_last: bool,
}

impl Mlp {
    /// `sizes` = [in, hidden…, out].
    pub fn random(init: &mut WeightInit, sizes: &[usize], relu_last: bool) -> Self {
        let layers = sizes.windows(2).map(|w| Linear::random_he(init, w[0], w[1])).collect();
        Mlp { layers, relu_last }
    }

    pub fn in_dim(&self) -> usize {
        self.layers.first().map_or(0, |l| l.in_dim)
    }

    pub fn out_dim(&self) -> usize {
        self.layers.last().map_or(0, |l| l.out_dim)
    }

    /// Runs `rows` rows of `x` through every layer, ping-ponging between `a` and `b`; returns the
    /// slice holding the result (`rows × out_dim`).
    pub fn forward<'s>(&self, x: &[f32], rows: usize, a: &'s mut Vec<f32>, b: &'s mut Vec<f32>) -> &'s [f32] {
        let last = self.layers.len() - 1;
        let (mut src, mut dst) = (a, b);
        for (i, layer) in self.layers.iter().enumerate() {
            let out = sized(dst, rows * layer.out_dim);
            let input: &[f32] = if i == 0 { x } else { &src[..rows * layer.in_dim] };
            layer.forward(input, rows, out);
            if i < last || self.relu_last {
                relu_in_place(out);
            }
            std::mem::swap(&mut src, &mut dst);
        }
        let result: &'s Vec<f32> = src;
        &result[..rows * self.out_dim()]
    }
}

/// Layer normalisation over the last dimension, with learned scale and shift.
pub struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

impl LayerNorm {
    /// Scale near 1 and shift near 0, perturbed so the layer is not an identity.
    pub fn random(init: &mut WeightInit, dim: usize) -> Self {
        let gamma = init.normal(dim, 0.05).into_iter().map(|g| 1.0 + g).collect();
        LayerNorm { gamma, beta: init.normal(dim, 0.02), eps: 1e-12 }
    }

    /// Normalises each `dim`-long row of `x` in place.
    pub fn apply(&self, x: &mut [f32]) {
        let dim = self.gamma.len();
        for row in x.chunks_exact_mut(dim) {
            let mean = row.iter().sum::<f32>() / dim as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / dim as f32;
            let inv = 1.0 / (var + self.eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
                *v = (*v - mean) * inv * g + b;
            }
        }
    }
}

/// An embedding table: `rows` vectors of `dim` floats.
pub struct Embedding {
    table: Vec<f32>,
    pub rows: usize,
    pub dim: usize,
}

impl Embedding {
    pub fn random(init: &mut WeightInit, rows: usize, dim: usize, std: f32) -> Self {
        Embedding { table: init.normal(rows * dim, std), rows, dim }
    }

    /// The vector of `id`; ids outside the table are an error naming `what` and the position.
    pub fn lookup(&self, id: i64, what: &'static str, position: usize) -> Result<&[f32], NnError> {
        match usize::try_from(id) {
            Ok(i) if i < self.rows => Ok(&self.table[i * self.dim..(i + 1) * self.dim]),
            _ => Err(NnError::IdOutOfRange { what, position, id, limit: self.rows }),
        }
    }

    /// The vector of a hashed categorical id: any i64 maps to row `id mod rows`.
    pub fn hashed(&self, id: i64) -> &[f32] {
        let i = id.rem_euclid(self.rows as i64) as usize;
        &self.table[i * self.dim..(i + 1) * self.dim]
    }
}

pub fn relu_in_place(x: &mut [f32]) {
    for v in x {
        *v = (*v).max(0.0);
    }
}

/// GELU, tanh approximation (as in the original BERT code), written as
/// `0.5·u·(1 + tanh z) = u·sigmoid(2z)` so it costs one [`exp_fast`].
pub fn gelu_in_place(x: &mut [f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for v in x {
        let u = *v;
        let z = SQRT_2_OVER_PI * (u + 0.044_715 * u * u * u);
        *v = u / (1.0 + exp_fast(-2.0 * z));
    }
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp_fast(-x))
}

/// Below this distance from the row's maximum a softmax weight is under f32 precision of the
/// sum; it is set to exactly 0, since normalising e^-87 would make it subnormal, and subnormals
/// slow the next GEMM down by orders of magnitude on x86.
const SOFTMAX_CUTOFF: f32 = -60.0;

/// Numerically stable softmax of one row, in place.
pub fn softmax_in_place(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in row.iter_mut() {
        let d = *v - max;
        *v = if d < SOFTMAX_CUTOFF { 0.0 } else { exp_fast(d) };
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// `e^x` in plain arithmetic (no libm call, so loops over it stay cheap and vectorisable):
/// `x = n·ln2 + r` with `|r| ≤ ln2/2`, `e^r` by its degree-6 Taylor polynomial, `2^n` through
/// the exponent bits. Relative error below 3e-7; inputs are clamped to the normal range, so
/// the result is never 0, subnormal or infinite.
pub fn exp_fast(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two (Cody–Waite) so `n·ln2` subtracts without losing r's low bits.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding 1.5·2²³ rounds to the nearest integer in the float's mantissa.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2_E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Applies `f` to `threads` contiguous parts of `x` at once (element-wise work on big buffers).
pub fn par_chunks(x: &mut [f32], threads: usize, f: impl Fn(&mut [f32]) + Sync) {
    let part = x.len().div_ceil(threads.max(1)).max(1);
    if threads <= 1 || x.len() <= part {
        return f(x);
    }
    std::thread::scope(|scope| {
        for chunk in x.chunks_mut(part) {
            scope.spawn(|| f(chunk));
        }
    });
}

/// `x += y`, element-wise.
pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// The first `n` elements of `buf`, growing it when needed. Contents are stale: callers overwrite.
pub fn sized(buf: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if buf.len() < n {
        buf.resize(n, 0.0);
    }
    &mut buf[..n]
}

/// Scratch buffers reused across executions; concurrent executions each take their own set.
pub struct ScratchPool<T> {
    free: Mutex<Vec<T>>,
}

impl<T: Default> ScratchPool<T> {
    pub fn new() -> Self {
        ScratchPool { free: Mutex::new(Vec::new()) }
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut scratch = self.free.lock().pop().unwrap_or_default();
        let result = f(&mut scratch);
        self.free.lock().push(scratch);
        result
    }
}

impl<T: Default> Default for ScratchPool<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_the_definition_with_strides_and_transposes() {
        // a: 2x3, b: 3x2 stored transposed (2x3), c = a·b.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bt = [7.0, 9.0, 11.0, 8.0, 10.0, 12.0];
        let mut c = [1.0; 4];
        gemm(1.0, Mat::new(&a, 2, 3), Mat::new(&bt, 2, 3).t(), 0.0, MatMut::new(&mut c, 2, 2));
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
        // Write into the right column of a 2x3 buffer, accumulating.
        let mut wide = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0];
        gemm(1.0, Mat::new(&a, 2, 3), Mat::new(&bt, 2, 3).t().t().t(), 1.0, MatMut::strided(&mut wide[1..], 2, 2, 3));
        assert_eq!(wide, [0.0, 59.0, 64.0, 0.0, 140.0, 154.0]);
    }

    #[test]
    #[should_panic(expected = "exceeds")]
    fn views_outside_their_slice_are_refused() {
        Mat::strided(&[0.0; 5], 2, 3, 3, 1);
    }

    #[test]
    fn small_batches_match_the_gemm_path() {
        let mut init = WeightInit::new(3);
        let layer = Linear::random(&mut init, 37, 21, 0.5);
        let rows = SMALL_BATCH_ROWS + 4;
        let x = init.normal(rows * 37, 1.0);
        let mut through_gemm = vec![0.0; rows * 21];
        layer.forward(&x, rows, &mut through_gemm);
        let mut direct = vec![0.0; 3 * 21];
        layer.forward(&x, 3, &mut direct);
        for (d, g) in direct.iter().zip(&through_gemm) {
            assert!((d - g).abs() < 1e-4, "{d} vs {g}");
        }
    }

    #[test]
    fn linear_adds_bias_and_mlp_applies_relu() {
        let mut init = WeightInit::new(1);
        let layer = Linear::random(&mut init, 3, 2, 0.5);
        let x = [1.0, -2.0, 0.5];
        let mut y = [0.0; 2];
        layer.forward(&x, 1, &mut y);
        for (j, yj) in y.iter().enumerate() {
            let want = layer.bias[j] + (0..3).map(|i| x[i] * layer.weight[i * 2 + j]).sum::<f32>();
            assert!((yj - want).abs() < 1e-5);
        }
        let mlp = Mlp::random(&mut init, &[3, 8, 4], true);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let out = mlp.forward(&[1.0, 2.0, 3.0, -1.0, -2.0, -3.0], 2, &mut a, &mut b);
        assert_eq!(out.len(), 8);
        assert!(out.iter().all(|&v| v >= 0.0));
    }

    #[test]
    fn par_chunks_covers_every_element_once() {
        for threads in [1, 3, 16] {
            let mut x = vec![1.0; 10];
            par_chunks(&mut x, threads, |part| part.iter_mut().for_each(|v| *v += 1.0));
            assert_eq!(x, vec![2.0; 10]);
        }
    }

    #[test]
    fn same_seed_same_weights() {
        assert_eq!(WeightInit::new(7).normal(16, 1.0), WeightInit::new(7).normal(16, 1.0));
        assert_ne!(WeightInit::new(7).normal(16, 1.0), WeightInit::new(8).normal(16, 1.0));
    }

    #[test]
    fn normalisers() {
        let mut row = [1.0, 2.0, 3.0, 1000.0];
        softmax_in_place(&mut row);
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(row[3] > 0.999);
        let mut masked = [0.5, -10_000.0, 0.25, -10_000.0];
        softmax_in_place(&mut masked);
        assert_eq!((masked[1], masked[3]), (0.0, 0.0), "masked weights are exact zeros, not subnormals");
        assert!((masked[0] + masked[2] - 1.0).abs() < 1e-6);

        let ln = LayerNorm { gamma: vec![1.0; 4], beta: vec![0.0; 4], eps: 1e-12 };
        let mut x = [1.0, 2.0, 3.0, 4.0];
        ln.apply(&mut x);
        assert!(x.iter().sum::<f32>().abs() < 1e-5);
        assert!((x.iter().map(|v| v * v).sum::<f32>() / 4.0 - 1.0).abs() < 1e-4);

        for x in [-87.0f32, -20.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 10.0, 60.0, 88.0] {
            let (fast, exact) = (exp_fast(x), x.exp());
            assert!(((fast - exact) / exact).abs() < 3e-7, "exp({x}): {fast} vs {exact}");
        }
        assert!(exp_fast(-1e4) > 0.0 && exp_fast(1e4).is_finite());
        let mut g = [-10.0, 0.0, 10.0];
        gelu_in_place(&mut g);
        assert!(g[0].abs() < 1e-4 && g[1] == 0.0 && (g[2] - 10.0).abs() < 1e-4);
        assert_eq!(sigmoid(0.0), 0.5);
    }

    #[test]
    fn embedding_lookup_checks_range_and_hashing_wraps() {
        let mut init = WeightInit::new(3);
        let e = Embedding::random(&mut init, 4, 2, 1.0);
        assert_eq!(e.lookup(3, "token id", 0).unwrap(), e.hashed(3));
        let err = e.lookup(4, "token id", 5).unwrap_err();
        assert_eq!(err.to_string(), "token id 4 at position 5 is out of range (valid ids are 0..4)");
        assert!(e.lookup(-1, "token id", 0).is_err());
        assert_eq!(e.hashed(-1), e.hashed(3));
        assert_eq!(e.hashed(9), e.hashed(1));
    }
}
