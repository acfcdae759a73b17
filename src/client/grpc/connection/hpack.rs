//! A request's header block: every field a literal that HPACK's dynamic table never keeps, so
//! it is the same bytes on every call and can be encoded once per client.

use bytes::{BufMut, Bytes, BytesMut};

/// A request's header block, the same bytes on every call: each field a literal that HPACK's
/// dynamic table never keeps (`:method: POST` and `:scheme` from the static table).
pub fn header_block(https: bool, authority: &str, path: &str, fields: &[(&str, &[u8])]) -> Bytes {
    let mut block = BytesMut::new();
    block.put_u8(0x83); // :method: POST
    block.put_u8(if https { 0x87 } else { 0x86 }); // :scheme
    literal_indexed_name(&mut block, 4, path.as_bytes()); // :path
    literal_indexed_name(&mut block, 1, authority.as_bytes()); // :authority
    for (name, value) in fields {
        block.put_u8(0x10); // literal never indexed, new name
        string(&mut block, name.as_bytes());
        string(&mut block, value);
    }
    block.freeze()
}

fn literal_indexed_name(block: &mut BytesMut, index: u8, value: &[u8]) {
    block.put_u8(0x10 | index); // never indexed, name from the static table (index < 15)
    string(block, value);
}

/// An HPACK string literal, not Huffman-coded.
fn string(block: &mut BytesMut, value: &[u8]) {
    integer(block, 7, value.len());
    block.put_slice(value);
}

/// An HPACK integer with a `bits`-bit prefix (the first byte's other bits clear: no Huffman).
fn integer(block: &mut BytesMut, bits: u8, mut value: usize) {
    let max = (1usize << bits) - 1;
    if value < max {
        block.put_u8(value as u8);
        return;
    }
    block.put_u8(max as u8);
    value -= max;
    while value >= 128 {
        block.put_u8((value % 128) as u8 | 0x80);
        value /= 128;
    }
    block.put_u8(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_block_decodes_to_the_request_headers() {
        let long = "v".repeat(300);
        let block = header_block(
            false,
            "localhost:8001",
            "/inference.GRPCInferenceService/ModelInfer",
            &[("content-type", b"application/grpc"), ("te", b"trailers"), ("x-long", long.as_bytes())],
        );
        let decoded = fluke_hpack::Decoder::new().decode(&block).unwrap();
        let text: Vec<(String, String)> =
            decoded.into_iter().map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap())).collect();
        let pairs: Vec<(&str, &str)> = text.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/inference.GRPCInferenceService/ModelInfer"),
                (":authority", "localhost:8001"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("x-long", long.as_str()),
            ]
        );
        // The same bytes on a decoder that has seen them before: no table state.
        let mut decoder = fluke_hpack::Decoder::new();
        assert_eq!(decoder.decode(&block).unwrap(), decoder.decode(&block).unwrap());
    }
}
