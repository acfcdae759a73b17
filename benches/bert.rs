//! The bundled `bert` model's execution speed at batch 1, 8 and 16, with the machine's GEMM
//! ceiling measured just before (it is shared, so the ceiling moves): prints figures, asserts
//! nothing. `cargo bench --bench bert`.

use std::time::Instant;

use perfbench::server::config::parse_pbtxt;
use perfbench::server::models::{BertModel, Model};
use perfbench::tensor::Tensor;

/// `batch` sequences of `seq` token ids below `vocab`, the second half of each typed 1, and
/// the first `masks[i]` positions of sequence `i` attended.
fn inputs(batch: usize, seq: usize, vocab: i32, masks: &[usize]) -> Vec<Tensor> {
    let n = batch * seq;
    let ids: Vec<i32> = (0..n).map(|i| (i as i32 * 7 + 3) % vocab).collect();
    let types: Vec<i32> = (0..n).map(|i| ((i % seq) >= seq / 2) as i32).collect();
    let mask: Vec<i32> = (0..n).map(|i| ((i % seq) < masks[i / seq]) as i32).collect();
    let shape = vec![batch as i64, seq as i64];
    vec![Tensor::from_i32(shape.clone(), &ids), Tensor::from_i32(shape.clone(), &types), Tensor::from_i32(shape, &mask)]
}

/// GFLOP/s of one FFN-sized product (`rows × k` by `k × n`), best of three.
fn sgemm_ceiling(rows: usize, k: usize, n: usize) -> f64 {
    let (a, b, mut c) = (vec![0.5f32; rows * k], vec![0.25f32; k * n], vec![0.0f32; rows * n]);
    let t0 = Instant::now();
    for _ in 0..3 {
        // SAFETY: a, b and c are contiguous row-major buffers of exactly these shapes.
        unsafe {
            matrixmultiply::sgemm(
                rows,
                k,
                n,
                1.0,
                a.as_ptr(),
                k as isize,
                1,
                b.as_ptr(),
                n as isize,
                1,
                0.0,
                c.as_mut_ptr(),
                n as isize,
                1,
            );
        }
    }
    let secs = t0.elapsed().as_secs_f64() / 3.0;
    2.0 * (rows * k * n) as f64 / secs / 1e9
}

fn main() {
    let zoo = parse_pbtxt(include_str!("../src/server/zoo/bert.pbtxt"), "bert").expect("the zoo's bert parses");
    let model = BertModel::new(&zoo).expect("the zoo's bert builds");
    let dims = model.dims();
    let (rows, k, n) = (16 * dims.seq, dims.hidden, dims.ffn);
    println!("sgemm {rows}x{k}x{n}: {:6.1} GFLOP/s", sgemm_ceiling(rows, k, n));
    for batch in [1, 8, 16] {
        let x = inputs(batch, dims.seq, dims.vocab as i32, &vec![dims.seq; batch]);
        model.execute(&x).expect("bert executes"); // warm-up: sizes the scratch buffers
        let runs = if batch == 1 { 10 } else { 3 };
        let t0 = Instant::now();
        for _ in 0..runs {
            model.execute(&x).expect("bert executes");
        }
        let secs = t0.elapsed().as_secs_f64() / runs as f64;
        println!(
            "bert batch {batch:2}: {:8.1} ms/execute, {:6.2} GFLOP/execute, {:6.1} GFLOP/s, {:6.1} seq/s",
            secs * 1e3,
            model.flops(batch) / 1e9,
            model.flops(batch) / secs / 1e9,
            batch as f64 / secs
        );
    }
}
