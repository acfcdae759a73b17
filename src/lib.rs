//! perfbench: a load generator and latency profiler for KServe v2 / Triton inference servers,
//! with its own reference server. See ARCHITECTURE.md for the path of one request.

pub mod cli;
pub mod client;
pub mod compare;
pub mod gate;
pub mod genai;
pub mod input;
pub mod load;
pub mod measure;
pub mod plan;
pub mod proto;
pub mod report;
pub mod results;
pub mod run;
pub mod rx_stamp;
pub mod search;
pub mod server;
pub mod tensor;
pub mod tokenize;
pub mod x509_v1;
