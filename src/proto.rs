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
