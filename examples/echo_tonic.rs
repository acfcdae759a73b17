//! The floor for `perfbench serve`'s gRPC path (scripts/bench-hot-paths.sh): a bare tonic
//! server with the KServe `ModelInfer` and `ModelStreamInfer` signatures that answers each
//! request with its own inputs as outputs, on the same runtime and socket options as
//! `perfbench serve`. It also answers the three calls `perfbench profile` makes before it
//! starts (server and model metadata, model config) for one model, `echo`: FP32 `INPUT0`
//! → `OUTPUT0`, any length, no batching. Every other call answers `unimplemented`.
//!
//! Usage: `cargo run --release --example echo_tonic -- [PORT]` (default 24201).

use std::pin::Pin;

use futures::{Stream, StreamExt};
use perfbench::proto::inference::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use perfbench::proto::inference::model_infer_response::InferOutputTensor;
use perfbench::proto::inference::model_metadata_response::TensorMetadata;
use perfbench::proto::inference::*;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status, Streaming};

/// Input i becomes output i (named as the request asks, else after the input) with its dtype and
/// shape; raw contents are moved across.
fn echo(request: ModelInferRequest) -> ModelInferResponse {
    let mut names = request.outputs.into_iter().map(|o| o.name);
    let outputs = request
        .inputs
        .into_iter()
        .map(|i| InferOutputTensor {
            name: names.next().unwrap_or(i.name),
            datatype: i.datatype,
            shape: i.shape,
            ..Default::default()
        })
        .collect();
    ModelInferResponse {
        model_name: request.model_name,
        model_version: request.model_version,
        id: request.id,
        outputs,
        raw_output_contents: request.raw_input_contents,
        ..Default::default()
    }
}

struct Echo;

/// The service: the calls listed as unimplemented answer so, the others are written out. (The
/// `async_trait` attribute has to see the listed methods expanded, so it sits in the macro.)
macro_rules! service {
    (unimplemented { $($name:ident($request:ty) -> $response:ty;)* } $($body:tt)*) => {
        #[tonic::async_trait]
        impl GrpcInferenceService for Echo {
            $(
                async fn $name(&self, _: Request<$request>) -> Result<Response<$response>, Status> {
                    Err(Status::unimplemented(stringify!($name)))
                }
            )*
            $($body)*
        }
    };
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

service! {
    unimplemented {
        server_live(ServerLiveRequest) -> ServerLiveResponse;
        server_ready(ServerReadyRequest) -> ServerReadyResponse;
        model_ready(ModelReadyRequest) -> ModelReadyResponse;
        model_statistics(ModelStatisticsRequest) -> ModelStatisticsResponse;
        repository_index(RepositoryIndexRequest) -> RepositoryIndexResponse;
        repository_model_load(RepositoryModelLoadRequest) -> RepositoryModelLoadResponse;
        repository_model_unload(RepositoryModelUnloadRequest) -> RepositoryModelUnloadResponse;
        system_shared_memory_status(SystemSharedMemoryStatusRequest) -> SystemSharedMemoryStatusResponse;
        system_shared_memory_register(SystemSharedMemoryRegisterRequest) -> SystemSharedMemoryRegisterResponse;
        system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest) -> SystemSharedMemoryUnregisterResponse;
        cuda_shared_memory_status(CudaSharedMemoryStatusRequest) -> CudaSharedMemoryStatusResponse;
        cuda_shared_memory_register(CudaSharedMemoryRegisterRequest) -> CudaSharedMemoryRegisterResponse;
        cuda_shared_memory_unregister(CudaSharedMemoryUnregisterRequest) -> CudaSharedMemoryUnregisterResponse;
        trace_setting(TraceSettingRequest) -> TraceSettingResponse;
        log_settings(LogSettingsRequest) -> LogSettingsResponse;
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        Ok(Response::new(echo(request.into_inner())))
    }

    type ModelStreamInferStream = ResponseStream;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let answers = request.into_inner().map(|r| {
            r.map(|r| ModelStreamInferResponse { error_message: String::new(), infer_response: Some(echo(r)) })
        });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(ServerMetadataResponse { name: "echo_tonic".into(), ..Default::default() }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let tensor = |name: &str| TensorMetadata { name: name.into(), datatype: "FP32".into(), shape: vec![-1] };
        Ok(Response::new(ModelMetadataResponse {
            name: request.into_inner().name,
            versions: vec!["1".into()],
            platform: "echo".into(),
            inputs: vec![tensor("INPUT0")],
            outputs: vec![tensor("OUTPUT0")],
        }))
    }

    async fn model_config(&self, request: Request<ModelConfigRequest>) -> Result<Response<ModelConfigResponse>, Status> {
        let config = ModelConfig {
            name: request.into_inner().name,
            backend: "echo".into(),
            input: vec![ModelInput {
                name: "INPUT0".into(),
                data_type: DataType::TypeFp32 as i32,
                dims: vec![-1],
                ..Default::default()
            }],
            output: vec![ModelOutput {
                name: "OUTPUT0".into(),
                data_type: DataType::TypeFp32 as i32,
                dims: vec![-1],
                ..Default::default()
            }],
            ..Default::default()
        };
        Ok(Response::new(ModelConfigResponse { config: Some(config) }))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::args().nth(1).map_or(24201, |p| p.parse().expect("PORT is a number"));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let incoming = TcpListenerStream::new(listener).map(|accepted| {
            accepted.inspect(|tcp| {
                let _ = tcp.set_nodelay(true);
            })
        });
        let service = GrpcInferenceServiceServer::new(Echo).max_decoding_message_size(256 << 20);
        eprintln!("echo_tonic on 127.0.0.1:{port}");
        tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await?;
        Ok(())
    })
}
