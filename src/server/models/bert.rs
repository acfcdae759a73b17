//! `bert`: a BERT-style question-answering encoder on the CPU, shaped like seed 000's model
//! (a 4-layer distilled BERT: hidden 288, 12 heads, FFN 1152, sequence 384).
//!
//! Inputs (INT32 `[seq]` per item): `input__0` token ids (`0..vocab`), `input__1` token type ids
//! (0 or 1), `input__2` attention mask (0 = padding, any other value = attend). Outputs (FP32
//! `[seq]`): `output__0` start logits, `output__1` end logits.
//!
//! Word + position + token-type embeddings and a layer norm, then `layers` post-norm encoder
//! layers (multi-head self-attention with the mask as a -10000 bias on padded keys, then a GELU
//! FFN, each with a residual and a layer norm), then a 2-way linear QA head. Weights are
//! N(0, 0.02²) from a fixed seed. Parameters: `layers`, `hidden`, `heads`, `ffn`, `vocab`, `seq`
//! and `seed`; the config dims must equal `seq`. An id outside its table fails the execution with
//! an error naming the id and where it is.
//!
//! The dense layers are single large `sgemm`s (threaded by `matrixmultiply`); the attention of
//! each (sequence, head) pair and the GELU are spread over scoped threads, one per core.

use super::nn::{
    add_in_place, gelu_in_place, gemm, par_chunks, sized, softmax_in_place, Embedding, LayerNorm, Linear, Mat, MatMut,
    NnError, ScratchPool, WeightInit,
};
use super::signature::{Signature, TensorSpec};
use super::{check_floats, mlp_floats, param, sum_floats, Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::error::{ServerError, ServerResult};
use crate::tensor::{DataType, Tensor};

/// Token types a segment id may take (sentence A or B), as in BERT.
const TYPE_VOCAB: usize = 2;
/// Added to the attention scores of padded keys: their softmax weight becomes ~0.
const MASKED_SCORE_BIAS: f32 = -10_000.0;
const INIT_STD: f32 = 0.02;
const DEFAULT_SEED: u64 = 0xBE27;

/// The encoder's sizes (the model parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertDims {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub seq: usize,
}

impl BertDims {
    fn from_config(config: &ModelConfig) -> ServerResult<Self> {
        let dims = BertDims {
            layers: param(config, "layers", 4)?,
            hidden: param(config, "hidden", 288)?,
            heads: param(config, "heads", 12)?,
            ffn: param(config, "ffn", 1152)?,
            vocab: param(config, "vocab", 30522)?,
            seq: param(config, "seq", 384)?,
        };
        let name = &config.name;
        if [dims.layers, dims.hidden, dims.heads, dims.ffn, dims.vocab, dims.seq].contains(&0) {
            return Err(ServerError::invalid_arg(format!("model '{name}': bert sizes must be positive, got {dims:?}")));
        }
        if !dims.hidden.is_multiple_of(dims.heads) {
            return Err(ServerError::invalid_arg(format!(
                "model '{name}': hidden ({}) must be a multiple of heads ({})",
                dims.hidden, dims.heads
            )));
        }
        let BertDims { layers, hidden, ffn, vocab, seq, heads } = dims;
        let qkv = hidden.checked_mul(3).and_then(|h3| mlp_floats(&[hidden, h3]));
        let per_layer = sum_floats(&[qkv, mlp_floats(&[hidden, hidden]), mlp_floats(&[hidden, ffn, hidden])]);
        let weights = sum_floats(&[
            vocab.checked_mul(hidden),
            seq.checked_mul(hidden),
            per_layer.and_then(|n| n.checked_mul(layers)),
        ]);
        check_floats(config, "bert's weights", weights)?;
        // The widest activation of one execution: a full batch's FFN, QKV or attention scores.
        let widest = sum_floats(&[Some(ffn), hidden.checked_mul(3), heads.checked_mul(seq)]);
        let rows = (config.max_batch_size.max(1) as usize).checked_mul(seq);
        check_floats(config, "one batch's activations", rows.zip(widest).and_then(|(r, w)| r.checked_mul(w)))?;
        Ok(dims)
    }

    fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

struct EncoderLayer {
    /// Q, K and V projections fused into one `hidden × 3·hidden` GEMM.
    qkv: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    ffn_in: Linear,
    ffn_out: Linear,
    ffn_norm: LayerNorm,
}

impl EncoderLayer {
    fn random(init: &mut WeightInit, d: &BertDims) -> Self {
        EncoderLayer {
            qkv: Linear::random(init, d.hidden, 3 * d.hidden, INIT_STD),
            attn_out: Linear::random(init, d.hidden, d.hidden, INIT_STD),
            attn_norm: LayerNorm::random(init, d.hidden),
            ffn_in: Linear::random(init, d.hidden, d.ffn, INIT_STD),
            ffn_out: Linear::random(init, d.ffn, d.hidden, INIT_STD),
            ffn_norm: LayerNorm::random(init, d.hidden),
        }
    }
}

/// Activations of one execution, kept between executions so steady state allocates nothing.
#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    tmp: Vec<f32>,
    ffn: Vec<f32>,
    heads_ctx: Vec<f32>,
    attention: Vec<AttentionScratch>,
    logits: Vec<f32>,
}

/// One attention worker's buffers.
#[derive(Default)]
struct AttentionScratch {
    scores: Vec<f32>,
    mask_bias: Vec<f32>,
}

pub struct BertModel {
    dims: BertDims,
    signature: Signature,
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    embed_norm: LayerNorm,
    layers: Vec<EncoderLayer>,
    qa: Linear,
    /// Threads sharing the attention and GELU of one execution (the cores available to us).
    threads: usize,
    scratch: ScratchPool<Scratch>,
}

impl BertModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let dims = BertDims::from_config(config)?;
        let int32 = |name| TensorSpec { name, dtype: DataType::Int32 };
        let fp32 = |name| TensorSpec { name, dtype: DataType::Fp32 };
        let signature = Signature::bind(
            config,
            &[int32("input__0"), int32("input__1"), int32("input__2")],
            &[fp32("output__0"), fp32("output__1")],
        )?;
        for slot in signature.inputs.iter().chain(&signature.outputs) {
            if slot.dims != [dims.seq as i64] {
                return Err(ServerError::invalid_arg(format!(
                    "model '{}': '{}' has dims {:?}; the bert parameter seq = {} needs [ {} ]",
                    config.name, slot.name, slot.dims, dims.seq, dims.seq
                )));
            }
        }
        let mut init = WeightInit::new(param(config, "seed", DEFAULT_SEED)?);
        Ok(BertModel {
            word: Embedding::random(&mut init, dims.vocab, dims.hidden, INIT_STD),
            position: Embedding::random(&mut init, dims.seq, dims.hidden, INIT_STD),
            token_type: Embedding::random(&mut init, TYPE_VOCAB, dims.hidden, INIT_STD),
            embed_norm: LayerNorm::random(&mut init, dims.hidden),
            layers: (0..dims.layers).map(|_| EncoderLayer::random(&mut init, &dims)).collect(),
            qa: Linear::random(&mut init, dims.hidden, 2, INIT_STD),
            dims,
            signature,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            scratch: ScratchPool::new(),
        })
    }

    pub fn dims(&self) -> BertDims {
        self.dims
    }

    /// Floating-point operations of one execution of `batch` sequences (a multiply-add is 2).
    pub fn flops(&self, batch: usize) -> f64 {
        let d = &self.dims;
        let rows = (batch * d.seq) as f64;
        let per_layer_dense = self.layers.first().map_or(0, |l| {
            l.qkv.macs_per_row() + l.attn_out.macs_per_row() + l.ffn_in.macs_per_row() + l.ffn_out.macs_per_row()
        }) as f64;
        // Scores (Q·Kᵀ) and context (P·V): two seq × seq × head_dim products per head.
        let per_layer_attention = (batch * d.heads * 2 * d.seq * d.seq * d.head_dim()) as f64;
        let macs =
            d.layers as f64 * (rows * per_layer_dense + per_layer_attention) + rows * self.qa.macs_per_row() as f64;
        2.0 * macs
    }

    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        let sig = &self.signature;
        let batch = sig.batch_size(inputs)?;
        let ids = sig.input_i32(inputs, 0)?;
        let types = sig.input_i32(inputs, 1)?;
        let mask = sig.input_i32(inputs, 2)?;
        let (start, end) = self.scratch.with(|s| self.forward(batch, &ids, &types, &mask, s))?;
        Ok(sig.outputs_f32(batch, vec![start, end]))
    }

    fn forward(
        &self,
        batch: usize,
        ids: &[i32],
        types: &[i32],
        mask: &[i32],
        s: &mut Scratch,
    ) -> Result<(Vec<f32>, Vec<f32>), NnError> {
        let BertDims { seq, hidden, .. } = self.dims;
        let rows = batch * seq;
        let x = sized(&mut s.x, rows * hidden);
        for (r, out) in x.chunks_exact_mut(hidden).enumerate() {
            let word = self.word.lookup(ids[r].into(), "token id (input__0)", r)?;
            let token_type = self.token_type.lookup(types[r].into(), "token type id (input__1)", r)?;
            let position = self.position.lookup((r % seq) as i64, "position", r)?;
            for (((o, w), t), p) in out.iter_mut().zip(word).zip(token_type).zip(position) {
                *o = w + t + p;
            }
        }
        self.embed_norm.apply(x);
        for layer in &self.layers {
            self.encode(layer, batch, mask, s);
        }
        let logits = sized(&mut s.logits, rows * 2);
        self.qa.forward(&s.x[..rows * hidden], rows, logits);
        let start = logits.iter().step_by(2).copied().collect();
        let end = logits.iter().skip(1).step_by(2).copied().collect();
        Ok((start, end))
    }

    /// One encoder layer over `s.x` (`batch·seq × hidden`), in place.
    fn encode(&self, layer: &EncoderLayer, batch: usize, mask: &[i32], s: &mut Scratch) {
        let BertDims { seq, hidden, heads, ffn, .. } = self.dims;
        let head_dim = self.dims.head_dim();
        let rows = batch * seq;
        let x = &mut s.x[..rows * hidden];

        let qkv = sized(&mut s.qkv, rows * 3 * hidden);
        layer.qkv.forward(x, rows, qkv);
        let heads_ctx = sized(&mut s.heads_ctx, rows * hidden);
        self.attend(qkv, mask, batch, heads_ctx, &mut s.attention);
        // Back from one block per (sequence, head) to rows of `hidden`, heads side by side.
        let ctx = sized(&mut s.ctx, rows * hidden);
        for (pair, block) in heads_ctx.chunks_exact(seq * head_dim).enumerate() {
            let (b, h) = (pair / heads, pair % heads);
            for (pos, head_row) in block.chunks_exact(head_dim).enumerate() {
                let at = (b * seq + pos) * hidden + h * head_dim;
                ctx[at..at + head_dim].copy_from_slice(head_row);
            }
        }

        let tmp = sized(&mut s.tmp, rows * hidden);
        layer.attn_out.forward(ctx, rows, tmp);
        add_in_place(x, tmp);
        layer.attn_norm.apply(x);

        let inner = sized(&mut s.ffn, rows * ffn);
        layer.ffn_in.forward(x, rows, inner);
        par_chunks(inner, self.threads, gelu_in_place);
        layer.ffn_out.forward(inner, rows, tmp);
        add_in_place(x, tmp);
        layer.ffn_norm.apply(x);
    }
}

impl BertModel {
    /// Self-attention of every (sequence, head) pair: softmax(Q·Kᵀ/√d + mask)·V. The pairs are
    /// independent, so they are spread over scoped threads (the per-head products are too small
    /// for `matrixmultiply` to thread); pair `p`'s context lands in block `p` of `heads_ctx`.
    fn attend(
        &self,
        qkv: &[f32],
        mask: &[i32],
        batch: usize,
        heads_ctx: &mut [f32],
        scratch: &mut Vec<AttentionScratch>,
    ) {
        let block = self.dims.seq * self.dims.head_dim();
        let pairs = batch * self.dims.heads;
        if pairs == 0 {
            return;
        }
        let workers = self.threads.clamp(1, pairs);
        let pairs_per_worker = pairs.div_ceil(workers);
        if scratch.len() < workers {
            scratch.resize_with(workers, AttentionScratch::default);
        }
        let jobs = heads_ctx[..pairs * block].chunks_mut(pairs_per_worker * block).zip(scratch.iter_mut());
        let run = |(w, (blocks, scratch)): (usize, (&mut [f32], &mut AttentionScratch))| {
            for (i, out) in blocks.chunks_exact_mut(block).enumerate() {
                self.attend_pair(qkv, mask, w * pairs_per_worker + i, out, scratch);
            }
        };
        if workers == 1 {
            jobs.enumerate().for_each(run);
        } else {
            std::thread::scope(|scope| {
                for job in jobs.enumerate() {
                    scope.spawn(move || run(job));
                }
            });
        }
    }

    fn attend_pair(&self, qkv: &[f32], mask: &[i32], pair: usize, out: &mut [f32], s: &mut AttentionScratch) {
        let BertDims { seq, hidden, heads, .. } = self.dims;
        let head_dim = self.dims.head_dim();
        let (b, h) = (pair / heads, pair % heads);
        let mask_bias = sized(&mut s.mask_bias, seq);
        for (bias, &m) in mask_bias.iter_mut().zip(&mask[b * seq..(b + 1) * seq]) {
            *bias = if m != 0 { 0.0 } else { MASKED_SCORE_BIAS };
        }
        // This sequence's rows of [Q | K | V]; head h owns columns h·head_dim.. of each part.
        let item = &qkv[b * seq * 3 * hidden..(b + 1) * seq * 3 * hidden];
        let part = |p: usize| Mat::strided(&item[p * hidden + h * head_dim..], seq, head_dim, 3 * hidden, 1);
        let (q, k, v) = (part(0), part(1), part(2));
        let scores = sized(&mut s.scores, seq * seq);
        gemm(1.0 / (head_dim as f32).sqrt(), q, k.t(), 0.0, MatMut::new(scores, seq, seq));
        for row in scores.chunks_exact_mut(seq) {
            add_in_place(row, mask_bias);
            softmax_in_place(row);
        }
        gemm(1.0, Mat::new(scores, seq, seq), v, 0.0, MatMut::new(out, seq, head_dim));
    }
}

impl Model for BertModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        self.run(inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;

    /// A small bert config: `seq` positions, with `extra` parameters appended.
    fn config(seq: usize, params: &[(&str, &str)]) -> ModelConfig {
        let mut text = format!(
            r#"backend: "bert" max_batch_size: 4
               input [ {{ name: "input__0" data_type: TYPE_INT32 dims: [ {seq} ] }},
                       {{ name: "input__1" data_type: TYPE_INT32 dims: [ {seq} ] }},
                       {{ name: "input__2" data_type: TYPE_INT32 dims: [ {seq} ] }} ]
               output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {seq} ] }},
                        {{ name: "output__1" data_type: TYPE_FP32 dims: [ {seq} ] }} ]"#
        );
        for (k, v) in params {
            text.push_str(&format!(r#" parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}"#));
        }
        parse_pbtxt(&text, "bert").unwrap()
    }

    const SEQ: usize = 8;
    const SMALL: &[(&str, &str)] =
        &[("layers", "2"), ("hidden", "16"), ("heads", "4"), ("ffn", "32"), ("vocab", "50"), ("seq", "8")];

    fn small() -> BertModel {
        BertModel::new(&config(SEQ, SMALL)).unwrap()
    }

    /// Inputs for `batch` sequences: varied ids, sentence B in the second half, mask per item.
    fn inputs(batch: usize, seq: usize, vocab: i32, masks: &[usize]) -> Vec<Tensor> {
        let n = batch * seq;
        let ids: Vec<i32> = (0..n).map(|i| (i as i32 * 7 + 3) % vocab).collect();
        let types: Vec<i32> = (0..n).map(|i| ((i % seq) >= seq / 2) as i32).collect();
        let mask: Vec<i32> = (0..n).map(|i| ((i % seq) < masks[i / seq]) as i32).collect();
        let shape = vec![batch as i64, seq as i64];
        vec![
            Tensor::from_i32(shape.clone(), &ids),
            Tensor::from_i32(shape.clone(), &types),
            Tensor::from_i32(shape, &mask),
        ]
    }

    fn slice_item(t: &Tensor, item: usize) -> Tensor {
        let per_item = t.data.len() / t.shape[0] as usize;
        Tensor {
            dtype: t.dtype,
            shape: vec![1, t.shape[1]],
            data: t.data.slice(item * per_item..(item + 1) * per_item),
        }
    }

    #[test]
    fn outputs_are_start_and_end_logits_per_position() {
        let out = small().execute(&inputs(3, SEQ, 50, &[8, 5, 2])).unwrap();
        assert_eq!(out.len(), 2);
        for t in &out {
            assert_eq!(t.dtype, DataType::Fp32);
            assert_eq!(t.shape, vec![3, SEQ as i64]);
            assert!(t.to_f32().iter().all(|v| v.is_finite()));
        }
        assert_ne!(out[0], out[1], "start and end heads differ");
    }

    #[test]
    fn same_input_gives_bit_identical_output_across_runs_and_instances() {
        let (a, b) = (small(), small());
        let x = inputs(2, SEQ, 50, &[8, 6]);
        let first = a.execute(&x).unwrap();
        assert_eq!(a.execute(&x).unwrap(), first);
        assert_eq!(b.execute(&x).unwrap(), first);
    }

    #[test]
    fn a_batch_of_two_matches_two_batches_of_one() {
        let m = small();
        let x = inputs(2, SEQ, 50, &[8, 3]);
        let batched = m.execute(&x).unwrap();
        for item in 0..2 {
            let single: Vec<Tensor> = x.iter().map(|t| slice_item(t, item)).collect();
            let alone = m.execute(&single).unwrap();
            for (o, a) in batched.iter().zip(&alone) {
                let from_batch = slice_item(o, item).to_f32();
                for (p, q) in from_batch.iter().zip(a.to_f32()) {
                    assert!((p - q).abs() < 1e-5, "item {item}: {p} vs {q}");
                }
            }
        }
    }

    #[test]
    fn the_attention_mask_changes_the_logits() {
        let m = small();
        let full = m.execute(&inputs(1, SEQ, 50, &[8])).unwrap();
        let half = m.execute(&inputs(1, SEQ, 50, &[4])).unwrap();
        // Positions 0..4 attend in both runs; they differ only because keys 4..8 were masked.
        let (a, b) = (full[0].to_f32(), half[0].to_f32());
        assert!((0..4).all(|i| (a[i] - b[i]).abs() > 1e-6), "{a:?} vs {b:?}");
    }

    #[test]
    fn out_of_range_ids_are_errors_naming_the_input() {
        let m = small();
        let mut x = inputs(1, SEQ, 50, &[8]);
        let mut ids = x[0].to_i32();
        ids[5] = 50;
        x[0] = Tensor::from_i32(vec![1, SEQ as i64], &ids);
        let err = m.execute(&x).unwrap_err();
        assert_eq!(err.to_string(), "token id (input__0) 50 at position 5 is out of range (valid ids are 0..50)");

        let mut x = inputs(1, SEQ, 50, &[8]);
        x[1] = Tensor::from_i32(vec![1, SEQ as i64], &[-1; SEQ]);
        assert!(m.execute(&x).unwrap_err().to_string().contains("token type id (input__1) -1 at position 0"));
    }

    #[test]
    fn wrong_shapes_and_dtypes_are_errors() {
        let m = small();
        let mut x = inputs(1, SEQ, 50, &[8]);
        x[2] = Tensor::from_i32(vec![1, 4], &[1; 4]);
        assert!(m.execute(&x).unwrap_err().to_string().contains("input 'input__2' has shape [1, 4]"));
        let mut x = inputs(1, SEQ, 50, &[8]);
        x[0] = Tensor::from_i64(vec![1, SEQ as i64], &[1; SEQ]);
        assert!(m.execute(&x).unwrap_err().to_string().contains("dtype INT64"));
        let mut x = inputs(2, SEQ, 50, &[8, 8]);
        x[1] = inputs(1, SEQ, 50, &[8])[1].clone();
        assert!(m.execute(&x).unwrap_err().to_string().contains("batch size"));
    }

    #[test]
    fn bad_configs_are_refused_at_load() {
        let err = |c: ModelConfig| BertModel::new(&c).err().unwrap().message;
        assert!(err(config(8, &[("seq", "16")])).contains("seq = 16"));
        assert!(err(config(8, &[("seq", "8"), ("hidden", "10"), ("heads", "4")])).contains("multiple of heads"));
        assert!(err(config(8, &[("seq", "8"), ("layers", "x")])).contains("'layers'"));
    }

    #[test]
    fn the_zoo_model_runs_at_batch_one() {
        let zoo = parse_pbtxt(include_str!("../zoo/bert.pbtxt"), "bert").unwrap();
        let m = BertModel::new(&zoo).unwrap();
        assert_eq!(m.dims(), BertDims { layers: 4, hidden: 288, heads: 12, ffn: 1152, vocab: 30522, seq: 384 });
        let out = m.execute(&inputs(1, 384, 30522, &[300])).unwrap();
        assert_eq!(out[0].shape, vec![1, 384]);
        assert!(out[1].to_f32().iter().all(|v| v.is_finite()));
    }
}
