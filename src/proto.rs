//! Generated KServe v2 gRPC types (`proto/`), compiled by build.rs with protox.

#[allow(clippy::all, clippy::pedantic)]
pub mod inference {
    tonic::include_proto!("inference");
}

#[allow(clippy::all, clippy::pedantic)]
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

/// Makes ring the process's rustls crypto provider, once. reqwest is built without a provider
/// of its own (no aws-lc build), so a `reqwest::Client` built without a preconfigured TLS setup
/// needs this to have run; the server's start and the network clients' constructors call it.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider is installed already, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The codec of the generated services: prost, with undecodable messages answered as
/// INVALID_ARGUMENT (tonic's `ProstCodec` calls them INTERNAL, which reads as a server fault),
/// and small starting buffers.
pub mod codec {
    use std::marker::PhantomData;

    use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
    use tonic::Status;
    use tonic_prost::{ProstCodec, ProstDecoder};

    /// Each call's encode and decode buffers start at 1 KiB and grow to the message's length,
    /// instead of tonic's 8 KiB each held while the call is in flight: at concurrency 256 those
    /// were megabytes of mostly empty heap that came and went with the load (issue 13's soak).
    pub const BUFFER_START: usize = 1024;
    /// tonic's default: how many encoded bytes a streaming body gathers before sending them (a
    /// unary call sends its one message at once).
    pub const YIELD_THRESHOLD: usize = 32 * 1024;

    pub fn buffers() -> BufferSettings {
        BufferSettings::new(BUFFER_START, YIELD_THRESHOLD)
    }

    pub struct ProtoCodec<T, U>(PhantomData<(T, U)>);

    impl<T, U> Default for ProtoCodec<T, U> {
        fn default() -> Self {
            ProtoCodec(PhantomData)
        }
    }

    impl<T, U> Codec for ProtoCodec<T, U>
    where
        T: prost::Message + Send + 'static,
        U: prost::Message + Default + Send + 'static,
    {
        type Encode = T;
        type Decode = U;
        type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
        type Decoder = ProtoDecoder<U>;

        fn encoder(&mut self) -> Self::Encoder {
            ProstCodec::<T, U>::raw_encoder(buffers())
        }

        fn decoder(&mut self) -> Self::Decoder {
            ProtoDecoder(ProstCodec::<T, U>::raw_decoder(buffers()))
        }
    }

    pub struct ProtoDecoder<U>(ProstDecoder<U>);

    impl<U: prost::Message + Default> Decoder for ProtoDecoder<U> {
        type Item = U;
        type Error = Status;

        fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
            self.0
                .decode(buf)
                .map_err(|s| Status::invalid_argument(format!("the message is not valid protobuf: {}", s.message())))
        }

        fn buffer_settings(&self) -> BufferSettings {
            self.0.buffer_settings()
        }
    }
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
