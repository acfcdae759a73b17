//! `zero` and `random` input data: one step of generated values, valid for each dtype, repeatable
//! from a seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{dynamic_shape, known_dims, InputData, InputError, InputOptions, InputSpec, Step};
use crate::tensor::{element_count, DataType, Tensor};

/// `zero` or `random`: one step of generated values.
pub(super) fn generated_step(options: &InputOptions, inputs: &[InputSpec<'_>]) -> Result<Step, InputError> {
    let zero = options.data.contains(&InputData::Zero);
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let mut step = Step::default();
    for input in inputs {
        let name = &input.meta.name;
        let dims = known_dims(&input.dims).ok_or_else(|| dynamic_shape(name))?;
        let count = element_count(&dims).ok_or_else(|| InputError::Input {
            model: input.meta.name.clone(),
            input: name.clone(),
            reason: format!("shape {dims:?} is too large"),
        })?;
        let data = if let (DataType::Bytes, Some(text)) = (input.dtype, &options.string_data) {
            bytes_elements((0..count).map(|_| text.as_bytes().to_vec()))
        } else if zero {
            zero_data(input.dtype, count, options.string_length)
        } else {
            random_data(input.dtype, count, options.string_length, &mut rng)
        };
        step.inputs.push((name.clone(), Tensor { dtype: input.dtype, shape: dims, data: data.into() }));
    }
    Ok(step)
}

pub(super) fn zero_data(dtype: DataType, count: usize, string_length: usize) -> Vec<u8> {
    match dtype.element_size() {
        Some(size) => vec![0u8; count * size],
        None => bytes_elements((0..count).map(|_| vec![b'0'; string_length])),
    }
}

/// Values that are valid for their dtype: floats in [0, 1), small integers, 0/1 bools,
/// alphanumeric strings.
pub(super) fn random_data(dtype: DataType, count: usize, string_length: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * dtype.element_size().unwrap_or(4 + string_length));
    for _ in 0..count {
        match dtype {
            DataType::Bool => out.push(rng.random_range(0..=1u8)),
            DataType::Uint8 => out.push(rng.random()),
            DataType::Int8 => out.push(rng.random_range(-100..=100i8) as u8),
            DataType::Uint16 => out.extend(rng.random_range(0..1000u16).to_le_bytes()),
            DataType::Int16 => out.extend(rng.random_range(-1000..1000i16).to_le_bytes()),
            DataType::Uint32 => out.extend(rng.random_range(0..1000u32).to_le_bytes()),
            DataType::Int32 => out.extend(rng.random_range(-1000..1000i32).to_le_bytes()),
            DataType::Uint64 => out.extend(rng.random_range(0..1000u64).to_le_bytes()),
            DataType::Int64 => out.extend(rng.random_range(-1000..1000i64).to_le_bytes()),
            DataType::Fp16 => out.extend(half::f16::from_f32(rng.random::<f32>()).to_le_bytes()),
            DataType::Bf16 => out.extend(half::bf16::from_f32(rng.random::<f32>()).to_le_bytes()),
            DataType::Fp32 => out.extend(rng.random::<f32>().to_le_bytes()),
            DataType::Fp64 => out.extend(rng.random::<f64>().to_le_bytes()),
            DataType::Bytes => {
                out.extend((string_length as u32).to_le_bytes());
                out.extend((0..string_length).map(|_| rng.sample(rand::distr::Alphanumeric)));
            }
        }
    }
    out
}

/// Length-prefixed BYTES layout (KSERVE_V2.md §2.2).
pub(super) fn bytes_elements<I: IntoIterator<Item = Vec<u8>>>(elements: I) -> Vec<u8> {
    let mut out = Vec::new();
    for e in elements {
        out.extend((e.len() as u32).to_le_bytes());
        out.extend(e);
    }
    out
}
