//! A tensor's JSON `data` (KSERVE_V2.md §2.3) straight to and from its raw little-endian bytes,
//! for both sides of HTTP: parsed element by element into the typed buffer (no `Value` per
//! element), written element by element into the body with shortest round-trip numbers.
//!
//! The tensor object (`name`, `datatype`, `shape`, `parameters`, `data`) is read by
//! [`TensorJson`] with any serde deserializer; `data` is converted as it is parsed when
//! `datatype` comes first, as every client writes it.

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{byte_size, element_count, DataType, JsonValuesError};

/// One KServe tensor object of a request's `inputs` or a response's `outputs`.
pub struct TensorJson {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub parameters: Option<Map<String, Value>>,
    pub data: Option<JsonData>,
}

/// A tensor's JSON `data`, converted as parsed when the datatype was known by then; otherwise
/// the value, converted once it is.
pub enum JsonData {
    Converted(DataSink),
    Value(Value),
}

/// Why `data` does not make a tensor of its datatype and shape.
#[derive(Debug, PartialEq)]
pub enum DataError {
    /// The shape is negative or overflows.
    BadShape,
    /// `found` elements, not the shape's count.
    Count { found: usize },
    /// FP16 and BF16 only travel as binary data.
    Half,
    /// The first element that is not a value of the datatype, as JSON text.
    Invalid { index: usize, text: String },
}

impl JsonData {
    /// The raw bytes of `data` for a tensor of `dtype` and `shape`.
    pub fn into_bytes(self, dtype: DataType, shape: &[i64]) -> Result<Vec<u8>, DataError> {
        let sink = match self {
            JsonData::Converted(sink) if sink.dtype == dtype => sink,
            JsonData::Converted(sink) => return JsonData::Value(sink.into_value()).into_bytes(dtype, shape),
            JsonData::Value(value) => {
                let mut sink = DataSink::new(dtype, 0);
                Elements(&mut sink).deserialize(&value).expect("a JSON value holds only JSON types");
                sink
            }
        };
        let expected = element_count(shape).ok_or(DataError::BadShape)?;
        if sink.count != expected {
            return Err(DataError::Count { found: sink.count });
        }
        if matches!(dtype, DataType::Fp16 | DataType::Bf16) {
            return Err(DataError::Half);
        }
        if let Some((index, text)) = sink.bad {
            return Err(DataError::Invalid { index, text });
        }
        Ok(sink.bytes)
    }
}

impl<'de> Deserialize<'de> for TensorJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TensorVisitor)
    }
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum TensorField {
    Name,
    Datatype,
    Shape,
    Parameters,
    Data,
    #[serde(other)]
    Other,
}

struct TensorVisitor;

impl<'de> Visitor<'de> for TensorVisitor {
    type Value = TensorJson;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a tensor object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TensorJson, A::Error> {
        use serde::de::Error;
        let (mut name, mut datatype, mut shape, mut parameters, mut data) = (None, None, None, None, None);
        fn once<T, E: Error>(slot: &mut Option<T>, field: &'static str, value: T) -> Result<(), E> {
            match slot.replace(value) {
                Some(_) => Err(E::duplicate_field(field)),
                None => Ok(()),
            }
        }
        while let Some(field) = map.next_key::<TensorField>()? {
            match field {
                TensorField::Name => once(&mut name, "name", map.next_value::<String>()?)?,
                TensorField::Datatype => once(&mut datatype, "datatype", map.next_value::<String>()?)?,
                TensorField::Shape => once(&mut shape, "shape", map.next_value::<Vec<i64>>()?)?,
                TensorField::Parameters => once(&mut parameters, "parameters", map.next_value()?)?,
                TensorField::Data => {
                    let value = match datatype.as_deref().and_then(DataType::parse) {
                        Some(dtype) => {
                            let hint = shape.as_deref().and_then(|s| byte_size(dtype, s)).unwrap_or(0);
                            map.next_value_seed(OptionalData(DataSink::new(dtype, hint)))?.map(JsonData::Converted)
                        }
                        None => map.next_value::<Option<Value>>()?.map(JsonData::Value),
                    };
                    once(&mut data, "data", value)?;
                }
                TensorField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(TensorJson {
            name: name.ok_or_else(|| Error::missing_field("name"))?,
            datatype: datatype.ok_or_else(|| Error::missing_field("datatype"))?,
            shape: shape.ok_or_else(|| Error::missing_field("shape"))?,
            parameters: parameters.flatten(),
            data: data.flatten(),
        })
    }
}

/// JSON `data` elements in the raw little-endian layout of §2.2, nested arrays flattened in
/// row-major order. Elements are counted, and the first one that is not a valid value of the
/// datatype is kept for the error message.
pub struct DataSink {
    dtype: DataType,
    bytes: Vec<u8>,
    count: usize,
    /// Index and JSON text of the first invalid element.
    bad: Option<(usize, String)>,
}

impl DataSink {
    fn new(dtype: DataType, capacity_hint: usize) -> Self {
        // The hint comes from the sender's shape: trust it only so far.
        DataSink { dtype, bytes: Vec::with_capacity(capacity_hint.min(1 << 20)), count: 0, bad: None }
    }

    /// The elements as JSON values again (a datatype that differs from the one they were read as).
    fn into_value(self) -> Value {
        let values = super::json_values(self.dtype, &self.bytes).unwrap_or_default();
        Value::Array(values)
    }

    fn reject_value(&mut self, value: impl FnOnce() -> Value) {
        if self.bad.is_none() {
            self.bad = Some((self.count, value().to_string()));
        }
        self.count += 1;
    }

    fn integer(&mut self, v: i128) {
        let as_json = || if v < 0 { Value::from(v as i64) } else { Value::from(v as u64) };
        macro_rules! int {
            ($t:ty) => {
                match <$t>::try_from(v) {
                    Ok(x) => self.bytes.extend_from_slice(&x.to_le_bytes()),
                    Err(_) => return self.reject_value(as_json),
                }
            };
        }
        match self.dtype {
            DataType::Uint8 => int!(u8),
            DataType::Uint16 => int!(u16),
            DataType::Uint32 => int!(u32),
            DataType::Uint64 => int!(u64),
            DataType::Int8 => int!(i8),
            DataType::Int16 => int!(i16),
            DataType::Int32 => int!(i32),
            DataType::Int64 => int!(i64),
            DataType::Fp32 => self.bytes.extend_from_slice(&(v as f64 as f32).to_le_bytes()),
            DataType::Fp64 => self.bytes.extend_from_slice(&(v as f64).to_le_bytes()),
            DataType::Fp16 | DataType::Bf16 => {}
            DataType::Bool | DataType::Bytes => return self.reject_value(as_json),
        }
        self.count += 1;
    }

    fn float(&mut self, v: f64) {
        match self.dtype {
            // A finite number beyond FP32's range is refused, not turned into an infinity.
            DataType::Fp32 if (v as f32).is_finite() => self.bytes.extend_from_slice(&(v as f32).to_le_bytes()),
            DataType::Fp64 => self.bytes.extend_from_slice(&v.to_le_bytes()),
            DataType::Fp16 | DataType::Bf16 => {}
            _ => return self.reject_value(|| Value::from(v)),
        }
        self.count += 1;
    }
}

/// `data` that may be `null` (no data).
struct OptionalData(DataSink);

impl<'de> DeserializeSeed<'de> for OptionalData {
    type Value = Option<DataSink>;
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for OptionalData {
    type Value = Option<DataSink>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("tensor data")
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: serde::Deserializer<'de>>(mut self, deserializer: D) -> Result<Self::Value, D::Error> {
        Elements(&mut self.0).deserialize(deserializer)?;
        Ok(Some(self.0))
    }
}

/// One JSON value of `data`: an array (flattened) or one element.
struct Elements<'a>(&'a mut DataSink);

impl<'de> DeserializeSeed<'de> for Elements<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Elements<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("tensor data")
    }
    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        while seq.next_element_seed(Elements(&mut *self.0))?.is_some() {}
        Ok(())
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        match self.0.dtype {
            DataType::Bool => {
                self.0.bytes.push(v as u8);
                self.0.count += 1;
            }
            _ => self.0.reject_value(|| Value::Bool(v)),
        }
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.0.integer(v.into());
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.0.integer(v.into());
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.0.float(v);
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        match self.0.dtype {
            DataType::Bytes => {
                self.0.bytes.extend_from_slice(&(v.len() as u32).to_le_bytes());
                self.0.bytes.extend_from_slice(v.as_bytes());
                self.0.count += 1;
            }
            _ => self.0.reject_value(|| Value::from(v)),
        }
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.reject_value(|| Value::Null);
        Ok(())
    }
    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<(), M::Error> {
        let value = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        self.0.reject_value(|| value);
        Ok(())
    }
}

/// The elements of BYTES data (4-byte little-endian length, then the bytes), as text. Trailing
/// bytes too short for a length are ignored, as [`super::json_values`] does.
fn bytes_elements(data: &[u8]) -> impl Iterator<Item = Result<&str, JsonValuesError>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let len = u32::from_le_bytes(data.get(pos..pos + 4)?.try_into().expect("4 bytes")) as usize;
        let Some(element) = data.get(pos + 4..pos + 4 + len) else {
            pos = data.len();
            return Some(Err(JsonValuesError::MalformedBytes));
        };
        pos += 4 + len;
        Some(std::str::from_utf8(element).map_err(|_| JsonValuesError::NotUtf8))
    })
}

/// Appends `data` as a flat JSON array, exactly as [`super::json_values`] prints through
/// serde_json: integers in decimal, floats (FP32, FP16 and BF16 widened to doubles) in their
/// shortest round-trip form, NaN and infinities as `null`, BYTES as strings. On an error the
/// array is left unfinished in `out`.
pub fn write_data(dtype: DataType, data: &[u8], out: &mut Vec<u8>) -> Result<(), JsonValuesError> {
    let mut float = zmij::Buffer::new();
    let mut int = itoa::Buffer::new();
    macro_rules! each {
        ($t:ty, $write:expr) => {
            for (i, c) in data.chunks_exact(std::mem::size_of::<$t>()).enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let x = <$t>::from_le_bytes(c.try_into().expect("chunk of the element size"));
                $write(out, x);
            }
        };
    }
    let mut number = |out: &mut Vec<u8>, x: f64| match x.is_finite() {
        true => out.extend_from_slice(float.format_finite(x).as_bytes()),
        false => out.extend_from_slice(b"null"),
    };
    out.push(b'[');
    match dtype {
        DataType::Bool => {
            each!(u8, |out: &mut Vec<u8>, x: u8| out.extend_from_slice(if x != 0 { b"true" } else { b"false" }))
        }
        DataType::Uint8 => each!(u8, |out: &mut Vec<u8>, x: u8| out.extend_from_slice(int.format(x).as_bytes())),
        DataType::Uint16 => each!(u16, |out: &mut Vec<u8>, x: u16| out.extend_from_slice(int.format(x).as_bytes())),
        DataType::Uint32 => each!(u32, |out: &mut Vec<u8>, x: u32| out.extend_from_slice(int.format(x).as_bytes())),
        DataType::Uint64 => each!(u64, |out: &mut Vec<u8>, x: u64| out.extend_from_slice(int.format(x).as_bytes())),
        DataType::Int8 => each!(i8, |out: &mut Vec<u8>, x: i8| out.extend_from_slice(int.format(x).as_bytes())),
        DataType::Int16 => each!(i16, |out: &mut Vec<u8>, x: i16| out.extend_from_slice(int.format(x).as_bytes())),
        DataType::Int32 => each!(i32, |out: &mut Vec<u8>, x: i32| out.extend_from_slice(int.format(x).as_bytes())),
        DataType::Int64 => each!(i64, |out: &mut Vec<u8>, x: i64| out.extend_from_slice(int.format(x).as_bytes())),
        DataType::Fp16 => each!(u16, |out, x| number(out, half::f16::from_bits(x).to_f64())),
        DataType::Bf16 => each!(u16, |out, x| number(out, half::bf16::from_bits(x).to_f64())),
        DataType::Fp32 => each!(f32, |out, x: f32| number(out, x as f64)),
        DataType::Fp64 => each!(f64, |out, x: f64| number(out, x)),
        DataType::Bytes => {
            for (i, element) in bytes_elements(data).enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, element?).expect("writing to a Vec cannot fail");
            }
        }
    }
    out.push(b']');
    Ok(())
}

/// Appends `object` (a tensor object serialized without its data) with `"data":[...]` added as
/// its last field, the array written by [`write_data`].
pub fn write_with_data<T: serde::Serialize>(
    object: &T,
    dtype: DataType,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), JsonValuesError> {
    serde_json::to_writer(&mut *out, object).expect("a tensor object serializes");
    debug_assert_eq!(out.last(), Some(&b'}'), "a tensor object is a JSON object");
    out.pop();
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
    out.extend_from_slice(b"\"data\":");
    write_data(dtype, data, out)?;
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Parses a tensor object as the server and the client do.
    fn parse(dtype: DataType, shape: &[i64], data: &str) -> Result<Vec<u8>, DataError> {
        let text = format!(r#"{{"name":"x","datatype":"{dtype}","shape":{shape:?},"data":{data}}}"#);
        let tensor: TensorJson = serde_json::from_str(&text).expect("valid JSON");
        tensor.data.expect("data given").into_bytes(dtype, shape)
    }

    fn written(dtype: DataType, bytes: &[u8]) -> String {
        let mut out = Vec::new();
        write_data(dtype, bytes, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn le<T: Copy, const N: usize>(values: &[T], to: fn(T) -> [u8; N]) -> Vec<u8> {
        values.iter().flat_map(|&v| to(v)).collect()
    }

    #[test]
    fn writes_what_json_values_prints() {
        let f32s = le(&[1.1f32, -0.0, f32::NAN, f32::INFINITY, 3e-42, f32::MAX], f32::to_le_bytes);
        let f64s = le(&[0.1f64, f64::MIN_POSITIVE, f64::NEG_INFINITY, 1e300], f64::to_le_bytes);
        let i64s = le(&[i64::MIN, i64::MAX, 0], i64::to_le_bytes);
        let u64s = le(&[u64::MAX, 0], u64::to_le_bytes);
        let i8s = le(&[i8::MIN, i8::MAX], i8::to_le_bytes);
        let halves = le(&[0x3c00u16, 0x7e00, 0x0001], u16::to_le_bytes);
        let mut strings = Vec::new();
        for s in ["ab", "", "quote \" and \\ and \u{1} é"] {
            strings.extend_from_slice(&(s.len() as u32).to_le_bytes());
            strings.extend_from_slice(s.as_bytes());
        }
        for (dtype, bytes) in [
            (DataType::Fp32, &f32s[..]),
            (DataType::Fp64, &f64s[..]),
            (DataType::Int64, &i64s[..]),
            (DataType::Uint64, &u64s[..]),
            (DataType::Int8, &i8s[..]),
            (DataType::Int16, &i8s[..]),
            (DataType::Uint8, &[0u8, 255][..]),
            (DataType::Bool, &[0u8, 1, 7][..]),
            (DataType::Fp16, &halves[..]),
            (DataType::Bf16, &halves[..]),
            (DataType::Bytes, &strings[..]),
            (DataType::Fp32, &[][..]),
        ] {
            let values = serde_json::to_string(&super::super::json_values(dtype, bytes).unwrap()).unwrap();
            assert_eq!(written(dtype, bytes), values, "{dtype}");
        }
        assert_eq!(written(DataType::Fp32, &f32s[..8]), "[1.100000023841858,-0.0]");
        let mut out = Vec::new();
        assert_eq!(write_data(DataType::Bytes, &[1, 0, 0, 0, 0xff], &mut out), Err(JsonValuesError::NotUtf8));
        assert_eq!(write_data(DataType::Bytes, &[9, 0, 0, 0, b'a'], &mut out), Err(JsonValuesError::MalformedBytes));
    }

    #[test]
    fn integers_at_their_limits_and_one_past() {
        macro_rules! limits {
            ($t:ty, $dtype:expr) => {
                let (lo, hi) = (<$t>::MIN as i128, <$t>::MAX as i128);
                let bytes = parse($dtype, &[2], &format!("[{lo},{hi}]")).unwrap();
                assert_eq!(bytes, le(&[<$t>::MIN, <$t>::MAX], <$t>::to_le_bytes), "{}", $dtype);
                for past in [lo - 1, hi + 1] {
                    let e = parse($dtype, &[1], &format!("[{past}]")).unwrap_err();
                    assert_eq!(e, DataError::Invalid { index: 0, text: past.to_string() }, "{}", $dtype);
                }
            };
        }
        limits!(u8, DataType::Uint8);
        limits!(u16, DataType::Uint16);
        limits!(u32, DataType::Uint32);
        limits!(i8, DataType::Int8);
        limits!(i16, DataType::Int16);
        limits!(i32, DataType::Int32);
        // The 64-bit limits, whose neighbours JSON parsers read as doubles.
        let bytes = parse(DataType::Int64, &[2], &format!("[{},{}]", i64::MIN, i64::MAX)).unwrap();
        assert_eq!(bytes, le(&[i64::MIN, i64::MAX], i64::to_le_bytes));
        let bytes = parse(DataType::Uint64, &[2], &format!("[0,{}]", u64::MAX)).unwrap();
        assert_eq!(bytes, le(&[0, u64::MAX], u64::to_le_bytes));
        assert!(matches!(parse(DataType::Uint64, &[1], "[-1]"), Err(DataError::Invalid { index: 0, .. })));
        assert!(matches!(parse(DataType::Int64, &[1], "[9223372036854775808]"), Err(DataError::Invalid { .. })));
        assert!(matches!(parse(DataType::Uint64, &[1], "[18446744073709551616]"), Err(DataError::Invalid { .. })));
        assert!(matches!(parse(DataType::Int32, &[1], "[1.5]"), Err(DataError::Invalid { .. })));
    }

    #[test]
    fn nested_large_and_mixed_data() {
        let bytes = parse(DataType::Int32, &[2, 2, 1], "[[[1],[2]],[[3],[4]]]").unwrap();
        assert_eq!(bytes, le(&[1i32, 2, 3, 4], i32::to_le_bytes));
        assert_eq!(parse(DataType::Int32, &[2, 2], "[[1,2],[3]]"), Err(DataError::Count { found: 3 }));
        // One element for a one-element shape need not be in an array.
        assert_eq!(parse(DataType::Fp64, &[1], "2.5").unwrap(), 2.5f64.to_le_bytes());
        assert_eq!(parse(DataType::Bool, &[3], "[true,false,true]").unwrap(), [1, 0, 1]);
        assert_eq!(parse(DataType::Bytes, &[2], r#"["a\"b",""]"#).unwrap(), b"\x03\0\0\0a\"b\0\0\0\0");
        assert!(matches!(parse(DataType::Fp32, &[2], "[1,null]"), Err(DataError::Invalid { index: 1, .. })));
        assert!(matches!(parse(DataType::Fp32, &[1], r#"["1"]"#), Err(DataError::Invalid { .. })));
        assert_eq!(parse(DataType::Fp16, &[1], "[1]"), Err(DataError::Half));
        // Beyond FP32's range: refused, not stored as an infinity.
        assert!(matches!(parse(DataType::Fp32, &[1], "[1e39]"), Err(DataError::Invalid { .. })));
        let big: Vec<f64> = (0..100_000).map(|i| i as f64 * 0.5 - 1e4).collect();
        let text = serde_json::to_string(&big.chunks(100).collect::<Vec<_>>()).unwrap();
        assert_eq!(parse(DataType::Fp64, &[1000, 100], &text).unwrap(), le(&big, f64::to_le_bytes));
        // The datatype after the data: converted once it is known.
        let late: TensorJson =
            serde_json::from_str(r#"{"data":[[1,2]],"shape":[2],"name":"x","datatype":"INT8"}"#).unwrap();
        assert_eq!(late.data.unwrap().into_bytes(DataType::Int8, &[2]).unwrap(), [1, 2]);
    }

    #[test]
    fn json_has_no_nan_or_infinity() {
        for text in ["[NaN]", "[Infinity]", "[-Infinity]", "[inf]", "[nan]"] {
            let body = format!(r#"{{"name":"x","datatype":"FP32","shape":[1],"data":{text}}}"#);
            assert!(serde_json::from_str::<TensorJson>(&body).is_err(), "{text}");
        }
        // Written as null, which is not read back as a number.
        let nan = written(DataType::Fp64, &f64::NAN.to_le_bytes());
        assert_eq!(nan, "[null]");
        assert!(matches!(parse(DataType::Fp64, &[1], &nan), Err(DataError::Invalid { .. })));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every finite value of every width reads back bit for bit from what is written.
        #[test]
        fn numbers_round_trip(
            f32s in prop::collection::vec(any::<f32>().prop_filter("finite", |x| x.is_finite()), 0..64),
            f64s in prop::collection::vec(any::<f64>().prop_filter("finite", |x| x.is_finite()), 0..64),
            i64s in prop::collection::vec(any::<i64>(), 0..64),
            u64s in prop::collection::vec(any::<u64>(), 0..64),
            i32s in prop::collection::vec(any::<i32>(), 0..64),
            u16s in prop::collection::vec(any::<u16>(), 0..64),
            i8s in prop::collection::vec(any::<i8>(), 0..64),
        ) {
            let cases = [
                (DataType::Fp32, le(&f32s, f32::to_le_bytes), f32s.len()),
                (DataType::Fp64, le(&f64s, f64::to_le_bytes), f64s.len()),
                (DataType::Int64, le(&i64s, i64::to_le_bytes), i64s.len()),
                (DataType::Uint64, le(&u64s, u64::to_le_bytes), u64s.len()),
                (DataType::Int32, le(&i32s, i32::to_le_bytes), i32s.len()),
                (DataType::Uint32, le(&i32s, |x| (x as u32).to_le_bytes()), i32s.len()),
                (DataType::Uint16, le(&u16s, u16::to_le_bytes), u16s.len()),
                (DataType::Int16, le(&u16s, |x| (x as i16).to_le_bytes()), u16s.len()),
                (DataType::Int8, le(&i8s, i8::to_le_bytes), i8s.len()),
                (DataType::Uint8, le(&i8s, |x| (x as u8).to_le_bytes()), i8s.len()),
            ];
            for (dtype, bytes, n) in cases {
                let text = written(dtype, &bytes);
                prop_assert_eq!(parse(dtype, &[n as i64], &text).unwrap(), bytes, "{} {}", dtype, text);
            }
            // An FP32 tensor printed at its own width (as Python's float32 repr and other clients do).
            let short: Vec<String> = f32s.iter().map(|x| format!("{x:?}")).collect();
            let text = format!("[{}]", short.join(","));
            prop_assert_eq!(parse(DataType::Fp32, &[f32s.len() as i64], &text).unwrap(), le(&f32s, f32::to_le_bytes));
        }
    }
}
