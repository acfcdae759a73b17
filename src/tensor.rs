//! Tensor data types and layouts shared by the client and the server (KSERVE_V2.md §2).

use std::fmt;

use serde_json::Value;

pub mod json;

/// A KServe v2 datatype. `BYTES` is spelled `TYPE_STRING` in model configs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bytes,
    Bf16,
}

impl DataType {
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bytes,
        DataType::Bf16,
    ];

    /// The protocol string (`"FP32"`), as used in metadata, infer requests and statistics.
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bytes => "BYTES",
            DataType::Bf16 => "BF16",
        }
    }

    /// Parses a protocol string. Case-sensitive, as the protocol is.
    pub fn parse(s: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The model-config enum value (`model_config.proto` `DataType`).
    pub fn config_enum(self) -> i32 {
        match self {
            DataType::Bool => 1,
            DataType::Uint8 => 2,
            DataType::Uint16 => 3,
            DataType::Uint32 => 4,
            DataType::Uint64 => 5,
            DataType::Int8 => 6,
            DataType::Int16 => 7,
            DataType::Int32 => 8,
            DataType::Int64 => 9,
            DataType::Fp16 => 10,
            DataType::Fp32 => 11,
            DataType::Fp64 => 12,
            DataType::Bytes => 13,
            DataType::Bf16 => 14,
        }
    }

    pub fn from_config_enum(v: i32) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.config_enum() == v)
    }

    /// Bytes per element; `None` for the variable-size `BYTES`.
    pub fn element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Number of elements of a fully specified shape; `None` if a dim is negative or it overflows.
pub fn element_count(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| if d < 0 { None } else { acc.checked_mul(d as usize) })
}

/// Byte size of a fixed-size tensor; `None` for `BYTES` or a bad shape.
pub fn byte_size(dtype: DataType, shape: &[i64]) -> Option<usize> {
    element_count(shape)?.checked_mul(dtype.element_size()?)
}

/// Checks that `data` is a well-formed BYTES tensor of `count` length-prefixed elements (§2.2).
pub fn bytes_tensor_is_valid(data: &[u8], count: usize) -> bool {
    let mut pos = 0usize;
    for _ in 0..count {
        let Some(len) = data.get(pos..pos + 4) else {
            return false;
        };
        let len = u32::from_le_bytes(len.try_into().unwrap()) as usize;
        pos += 4;
        if pos + len > data.len() {
            return false;
        }
        pos += len;
    }
    pos == data.len()
}

/// Why raw tensor bytes have no JSON form.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonValuesError {
    #[error("malformed BYTES data")]
    MalformedBytes,
    #[error("BYTES that are not UTF-8")]
    NotUtf8,
}

/// Raw little-endian tensor bytes as flat JSON values (KSERVE_V2.md §2.3): numbers (FP32, FP16 and
/// BF16 widened to doubles), booleans, or strings for BYTES.
pub fn json_values(dtype: DataType, data: &[u8]) -> Result<Vec<serde_json::Value>, JsonValuesError> {
    use serde_json::Number;
    macro_rules! each {
        ($t:ty, $to:expr) => {
            data.chunks_exact(std::mem::size_of::<$t>())
                .map(|c| $to(<$t>::from_le_bytes(c.try_into().expect("chunk of the element size"))))
                .collect()
        };
    }
    let float = |x: f64| Number::from_f64(x).map(Value::Number).unwrap_or(Value::Null);
    Ok(match dtype {
        DataType::Bool => data.iter().map(|&b| Value::Bool(b != 0)).collect(),
        DataType::Uint8 => each!(u8, Value::from),
        DataType::Uint16 => each!(u16, Value::from),
        DataType::Uint32 => each!(u32, Value::from),
        DataType::Uint64 => each!(u64, Value::from),
        DataType::Int8 => each!(i8, Value::from),
        DataType::Int16 => each!(i16, Value::from),
        DataType::Int32 => each!(i32, Value::from),
        DataType::Int64 => each!(i64, Value::from),
        DataType::Fp16 => each!(u16, |x: u16| float(half::f16::from_bits(x).to_f64())),
        DataType::Bf16 => each!(u16, |x: u16| float(half::bf16::from_bits(x).to_f64())),
        DataType::Fp32 => each!(f32, |x: f32| float(x as f64)),
        DataType::Fp64 => each!(f64, float),
        DataType::Bytes => {
            let mut values = Vec::new();
            let mut pos = 0;
            while pos + 4 <= data.len() {
                let len = u32::from_le_bytes(data[pos..pos + 4].try_into().expect("4 bytes")) as usize;
                let element = data.get(pos + 4..pos + 4 + len).ok_or(JsonValuesError::MalformedBytes)?;
                let text = std::str::from_utf8(element).map_err(|_| JsonValuesError::NotUtf8)?;
                values.push(Value::String(text.to_string()));
                pos += 4 + len;
            }
            values
        }
    })
}

/// Does `shape` fit the config `dims` (where -1 matches any size)?
pub fn shape_matches(dims: &[i64], shape: &[i64]) -> bool {
    dims.len() == shape.len() && dims.iter().zip(shape).all(|(&d, &s)| d == -1 || d == s)
}

/// Encodes JSON tensor values (flat or nested arrays, row-major) in `dtype`'s binary layout.
/// Returns the bytes and the element count. Used for data files and for JSON `data` outputs.
pub fn encode_json_values(dtype: DataType, value: &Value) -> Result<(Vec<u8>, usize), String> {
    let mut flat = Vec::new();
    flatten(value, &mut flat);
    let mut out = Vec::with_capacity(flat.len() * dtype.element_size().unwrap_or(8));
    for v in &flat {
        encode_one(dtype, v, &mut out).map_err(|e| format!("{e} (value {v})"))?;
    }
    Ok((out, flat.len()))
}

fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| flatten(v, out)),
        v => out.push(v),
    }
}

fn encode_one(dtype: DataType, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    fn int<T: TryFrom<i64> + TryFrom<u64>>(v: &Value) -> Result<T, String> {
        let fits = "out of range for the datatype".to_string();
        match (v.as_i64(), v.as_u64()) {
            (_, Some(u)) => T::try_from(u).map_err(|_| fits),
            (Some(i), _) => T::try_from(i).map_err(|_| fits),
            _ => Err("not an integer".into()),
        }
    }
    let float = |v: &Value| v.as_f64().ok_or_else(|| "not a number".to_string());
    match dtype {
        DataType::Bool => out.push(match v {
            Value::Bool(b) => *b as u8,
            other => (int::<u8>(other)? != 0) as u8,
        }),
        DataType::Uint8 => out.push(int::<u8>(v)?),
        DataType::Int8 => out.extend(int::<i8>(v)?.to_le_bytes()),
        DataType::Uint16 => out.extend(int::<u16>(v)?.to_le_bytes()),
        DataType::Int16 => out.extend(int::<i16>(v)?.to_le_bytes()),
        DataType::Uint32 => out.extend(int::<u32>(v)?.to_le_bytes()),
        DataType::Int32 => out.extend(int::<i32>(v)?.to_le_bytes()),
        DataType::Uint64 => out.extend(int::<u64>(v)?.to_le_bytes()),
        DataType::Int64 => out.extend(int::<i64>(v)?.to_le_bytes()),
        DataType::Fp16 => out.extend(half::f16::from_f64(float(v)?).to_le_bytes()),
        DataType::Bf16 => out.extend(half::bf16::from_f64(float(v)?).to_le_bytes()),
        DataType::Fp32 => out.extend((float(v)? as f32).to_le_bytes()),
        DataType::Fp64 => out.extend(float(v)?.to_le_bytes()),
        DataType::Bytes => {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(_) | Value::Bool(_) => v.to_string(),
                _ => return Err("not a string".into()),
            };
            out.extend((s.len() as u32).to_le_bytes());
            out.extend(s.as_bytes());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_strings_round_trip() {
        for d in DataType::ALL {
            assert_eq!(DataType::parse(d.as_str()), Some(d));
            assert_eq!(DataType::from_config_enum(d.config_enum()), Some(d));
        }
        assert_eq!(DataType::parse("fp32"), None);
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(byte_size(DataType::Fp32, &[2, 3]), Some(24));
        assert_eq!(byte_size(DataType::Bytes, &[2]), None);
        assert_eq!(byte_size(DataType::Int8, &[-1]), None);
        assert_eq!(element_count(&[]), Some(1));
    }

    #[test]
    fn bytes_tensor_walk() {
        let mut v = vec![];
        for s in ["ab", ""] {
            v.extend_from_slice(&(s.len() as u32).to_le_bytes());
            v.extend_from_slice(s.as_bytes());
        }
        assert!(bytes_tensor_is_valid(&v, 2));
        assert!(!bytes_tensor_is_valid(&v, 3));
        assert!(!bytes_tensor_is_valid(&v[..5], 1));
    }
}

/// A dense tensor as the models see it: row-major little-endian bytes (§2.2).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dtype: DataType,
    pub shape: Vec<i64>,
    pub data: bytes::Bytes,
}

macro_rules! typed_access {
    ($get:ident, $from:ident, $t:ty, $dt:expr) => {
        /// Decodes the elements (the bytes need not be aligned).
        pub fn $get(&self) -> Vec<$t> {
            self.data
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap()))
                .collect()
        }
        /// Encodes `values` with `shape`.
        pub fn $from(shape: Vec<i64>, values: &[$t]) -> Tensor {
            let mut data = Vec::with_capacity(values.len() * std::mem::size_of::<$t>());
            for v in values {
                data.extend_from_slice(&v.to_le_bytes());
            }
            Tensor { dtype: $dt, shape, data: data.into() }
        }
    };
}

impl Tensor {
    typed_access!(to_f32, from_f32, f32, DataType::Fp32);
    typed_access!(to_i32, from_i32, i32, DataType::Int32);
    typed_access!(to_i64, from_i64, i64, DataType::Int64);
    typed_access!(to_u32, from_u32, u32, DataType::Uint32);
}
