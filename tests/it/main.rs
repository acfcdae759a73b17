//! The integration tests, one binary: each module was a test file of its own. One binary links
//! once, which keeps a cold `cargo test` within CI's disk and time (every test binary links the
//! whole crate, polars included).

mod chaos;
mod client;
mod client_limits;
mod common;
mod compare;
mod compute_models;
mod coverage;
mod docs_examples;
mod fuzz_llm;
mod fuzz_server;
mod gate;
mod gate_run;
mod input;
mod large_run;
mod llm_client;
mod llm_endpoints;
mod llm_mix;
mod llm_prefix;
mod llm_sessions;
mod llm_timeline;
mod llm_traces;
mod pa_openai;
mod plan;
mod profile;
mod proxy;
mod search;
mod seed_tables;
mod sequence;
mod server_dropin;
mod server_ensemble;
mod server_grpc;
mod server_guard;
mod server_http;
mod server_llm;
mod server_llm_apis;
mod server_sequence;
mod server_tls;
mod server_vllm;
mod shard;
mod sweep;
