//! The bundled KServe v2 inference server: a protocol-neutral core ([`InferenceServer`]) with a
//! real dynamic batcher, statistics and shared memory, served over HTTP, gRPC and Prometheus.

pub mod access;
pub mod anthropic;
pub mod authority;
pub mod batch;
pub mod batch_policy;
pub mod bls;
pub mod body_budget;
pub mod config;
pub mod core;
pub mod ensemble;
pub mod error;
pub mod generate;
pub mod grpc;
pub mod http;
pub mod http_json;
pub mod infer;
pub mod listen;
pub mod llm;
pub mod llm_http;
pub mod metrics;
pub mod models;
pub mod openai;
pub mod repository;
pub mod rerank;
pub mod responses;
pub mod scheduler;
pub mod sequence;
pub mod serve;
pub mod shm;
pub mod stats;
pub mod trace;
pub mod vllm;

pub use self::core::{InferenceServer, ServerOptions};
pub use error::{ErrorKind, ServerError, ServerResult};
