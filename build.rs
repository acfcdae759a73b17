//! Compiles `proto/` with protox (pure Rust, no `protoc` binary) and keeps the descriptor set,
//! so the server can print ModelConfig as JSON and parse `config.pbtxt` through prost-reflect.
use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/grpc_service.proto", "proto/model_config.proto", "proto/health.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out.join("descriptor.bin"), prost::Message::encode_to_vec(&fds))?;
    // Raw tensor contents as `Bytes`: decoding slices the received buffer and encoding takes
    // the output's buffer, with no copy of the tensor data in between. A request that is not
    // valid protobuf is the client's mistake: INVALID_ARGUMENT, not the INTERNAL that tonic's own
    // codec answers (see `proto::codec`).
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        .codec_path("crate::proto::codec::ProtoCodec")
        .compile_fds(fds)?;
    Ok(())
}
