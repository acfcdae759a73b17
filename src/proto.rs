//! Generated KServe v2 gRPC types (`proto/`), compiled by build.rs with protox.

#[allow(clippy::all, clippy::pedantic)]
pub mod inference {
    tonic::include_proto!("inference");
}

#[allow(clippy::all, clippy::pedantic)]
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

/// The encoded `FileDescriptorSet` of `proto/`, for prost-reflect (config JSON and pbtxt).
pub const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));

/// Descriptor pool over [`DESCRIPTOR_SET`], built once.
pub fn descriptor_pool() -> &'static prost_reflect::DescriptorPool {
    static POOL: std::sync::OnceLock<prost_reflect::DescriptorPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        prost_reflect::DescriptorPool::decode(DESCRIPTOR_SET).expect("descriptor set built by build.rs")
    })
}

/// A generated message as a prost-reflect `DynamicMessage` (for JSON printing), by full name.
pub fn to_dynamic<M: prost::Message>(message: &M, full_name: &str) -> prost_reflect::DynamicMessage {
    let desc = descriptor_pool().get_message_by_name(full_name).expect("message in descriptor set");
    prost_reflect::DynamicMessage::decode(desc, message.encode_to_vec().as_slice())
        .expect("round trip through descriptor")
}

/// Triton's JSON printing of a message: proto field names, defaults printed, enums by name,
/// 64-bit integers as numbers.
pub fn to_json<M: prost::Message>(message: &M, full_name: &str) -> serde_json::Value {
    let options = prost_reflect::SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false)
        .stringify_64_bit_integers(false);
    to_dynamic(message, full_name)
        .serialize_with_options(serde_json::value::Serializer, &options)
        .expect("message serialises to JSON")
}
