//! How long one batcher step takes: a fixed cost per forward pass (reading the weights once),
//! a cost per decoding sequence (its attention over its context, its sampling) and a cost per
//! prefill token (compute-bound). The figures are `config.pbtxt` parameters; the defaults, and
//! where they come from, are in docs/server.md ("The generative twin").

/// Step-time parameters, in µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    pub step_us: f64,
    pub decode_us_per_seq: f64,
    pub prefill_us_per_token: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel { step_us: 7000.0, decode_us_per_seq: 50.0, prefill_us_per_token: 30.0 }
    }
}

impl CostModel {
    /// The duration of a step that prefills `prefill_tokens` and decodes `decode_seqs`, in µs.
    pub fn step_us(&self, prefill_tokens: usize, decode_seqs: usize) -> u64 {
        let us = self.step_us
            + self.decode_us_per_seq * decode_seqs as f64
            + self.prefill_us_per_token * prefill_tokens as f64;
        us.round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_adds_its_parts() {
        let cost = CostModel { step_us: 1000.0, decode_us_per_seq: 10.0, prefill_us_per_token: 2.0 };
        assert_eq!(cost.step_us(0, 1), 1010);
        assert_eq!(cost.step_us(500, 31), 1000 + 310 + 1000);
    }
}
