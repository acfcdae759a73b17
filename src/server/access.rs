//! Restricted endpoint groups (`--restricted-api`), as Triton's `--http-restricted-api` and
//! `--grpc-restricted-protocol`: each restricted group answers only requests that carry its
//! header with the exact value, over HTTP (403) and gRPC (PERMISSION_DENIED) alike.

use std::fmt;
use std::str::FromStr;

use super::error::{ServerError, ServerResult};

/// Triton's endpoint groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiGroup {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
}

impl ApiGroup {
    pub const ALL: [ApiGroup; 9] = [
        ApiGroup::Health,
        ApiGroup::Metadata,
        ApiGroup::Inference,
        ApiGroup::SharedMemory,
        ApiGroup::ModelConfig,
        ApiGroup::ModelRepository,
        ApiGroup::Statistics,
        ApiGroup::Trace,
        ApiGroup::Logging,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApiGroup::Health => "health",
            ApiGroup::Metadata => "metadata",
            ApiGroup::Inference => "inference",
            ApiGroup::SharedMemory => "shared-memory",
            ApiGroup::ModelConfig => "model-config",
            ApiGroup::ModelRepository => "model-repository",
            ApiGroup::Statistics => "statistics",
            ApiGroup::Trace => "trace",
            ApiGroup::Logging => "logging",
        }
    }

    /// The group of an HTTP path (KSERVE_V2.md §3.1); `None` for paths no route serves.
    pub fn of_http_path(path: &str) -> Option<ApiGroup> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let group = match segments.as_slice() {
            ["v2"] => ApiGroup::Metadata,
            ["v2", "health", ..] => ApiGroup::Health,
            ["v2", "systemsharedmemory" | "cudasharedmemory", ..] => ApiGroup::SharedMemory,
            ["v2", "repository", ..] => ApiGroup::ModelRepository,
            ["v2", "logging"] => ApiGroup::Logging,
            ["v2", "trace", ..] => ApiGroup::Trace,
            ["v2", "models", "stats"] => ApiGroup::Statistics,
            ["v1", "models"] => ApiGroup::Metadata,
            ["v1", "chat", "completions"] | ["v1", "completions" | "embeddings"] => ApiGroup::Inference,
            // vLLM's own routes (server/vllm.rs, server/rerank.rs).
            ["health" | "ping"] => ApiGroup::Health,
            ["version"] => ApiGroup::Metadata,
            ["metrics"] => ApiGroup::Statistics,
            ["tokenize" | "detokenize" | "rerank"] | ["v1" | "v2", "rerank"] => ApiGroup::Inference,
            ["v1", "messages" | "responses"] => ApiGroup::Inference,
            ["v2", "models", _, rest @ ..] => {
                // Drop an optional `versions/{v}`, then the last segment names the endpoint.
                let rest = match rest {
                    ["versions", _, tail @ ..] => tail,
                    tail => tail,
                };
                match rest {
                    [] => ApiGroup::Metadata,
                    ["ready"] => ApiGroup::Health,
                    ["config"] => ApiGroup::ModelConfig,
                    ["stats"] => ApiGroup::Statistics,
                    ["infer" | "generate" | "generate_stream"] => ApiGroup::Inference,
                    ["trace", ..] => ApiGroup::Trace,
                    _ => return None,
                }
            }
            _ => return None,
        };
        Some(group)
    }

    /// The group of a gRPC method path (`/package.Service/Method`).
    pub fn of_grpc_path(path: &str) -> Option<ApiGroup> {
        let (service, method) = path.trim_start_matches('/').split_once('/')?;
        if service == "grpc.health.v1.Health" {
            return Some(ApiGroup::Health);
        }
        if service != "inference.GRPCInferenceService" {
            return None;
        }
        Some(match method {
            "ServerLive" | "ServerReady" | "ModelReady" => ApiGroup::Health,
            "ServerMetadata" | "ModelMetadata" => ApiGroup::Metadata,
            "ModelInfer" | "ModelStreamInfer" => ApiGroup::Inference,
            "ModelConfig" => ApiGroup::ModelConfig,
            "ModelStatistics" => ApiGroup::Statistics,
            "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => ApiGroup::ModelRepository,
            "TraceSetting" => ApiGroup::Trace,
            "LogSettings" => ApiGroup::Logging,
            m if m.starts_with("SystemSharedMemory") || m.starts_with("CudaSharedMemory") => ApiGroup::SharedMemory,
            _ => return None,
        })
    }
}

impl fmt::Display for ApiGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApiGroup {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ApiGroup::ALL.into_iter().find(|g| g.as_str() == s.trim()).ok_or_else(|| {
            let names: Vec<&str> = ApiGroup::ALL.iter().map(|g| g.as_str()).collect();
            format!("unknown endpoint group '{}' (groups: {})", s.trim(), names.join(", "))
        })
    }
}

/// One `--restricted-api GROUP[,GROUP...]:HEADER=VALUE`.
#[derive(Clone, PartialEq, Eq)]
pub struct Restriction {
    pub groups: Vec<ApiGroup>,
    /// Lower-cased: HTTP header names are case-insensitive and gRPC metadata keys lower-case.
    pub header: String,
    pub value: String,
}

impl fmt::Debug for Restriction {
    /// Never prints the key's value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Restriction").field("groups", &self.groups).field("header", &self.header).finish()
    }
}

impl FromStr for Restriction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || format!("bad --restricted-api '{s}': expected GROUP[,GROUP...]:HEADER=VALUE");
        let (groups, key) = s.split_once(':').ok_or_else(usage)?;
        let (header, value) = key.split_once('=').ok_or_else(usage)?;
        let header = header.trim().to_ascii_lowercase();
        // The header must be one both protocols can carry: an HTTP token that is also a valid
        // gRPC metadata key (no `-bin` suffix, no `grpc-` reserved prefix).
        let valid_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.');
        if header.is_empty()
            || !header.chars().all(valid_char)
            || header.starts_with("grpc-")
            || header.ends_with("-bin")
        {
            return Err(format!("bad --restricted-api '{s}': '{header}' cannot be a header name"));
        }
        if value.is_empty() || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(format!("bad --restricted-api '{s}': the value must be non-empty printable ASCII"));
        }
        let groups = groups.split(',').map(str::parse).collect::<Result<Vec<ApiGroup>, String>>()?;
        Ok(Restriction { groups, header, value: value.to_string() })
    }
}

/// Every restriction of a server; an endpoint group may appear in at most one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestrictedApi {
    restrictions: Vec<Restriction>,
}

impl RestrictedApi {
    pub fn new(restrictions: Vec<Restriction>) -> Result<Self, String> {
        for (i, r) in restrictions.iter().enumerate() {
            for g in &r.groups {
                if restrictions[i + 1..].iter().any(|later| later.groups.contains(g))
                    || r.groups.iter().filter(|x| *x == g).count() > 1
                {
                    return Err(format!("--restricted-api names the endpoint group '{g}' more than once"));
                }
            }
        }
        Ok(RestrictedApi { restrictions })
    }

    pub fn is_empty(&self) -> bool {
        self.restrictions.is_empty()
    }

    /// Whether a request to `group` may go on; `header` looks a (lower-case) header up.
    pub fn check<'a>(&self, group: Option<ApiGroup>, header: impl Fn(&str) -> Option<&'a [u8]>) -> ServerResult<()> {
        let Some(group) = group else {
            return Ok(());
        };
        let Some(r) = self.restrictions.iter().find(|r| r.groups.contains(&group)) else {
            return Ok(());
        };
        match header(&r.header) {
            Some(sent) if constant_time_eq(sent, r.value.as_bytes()) => Ok(()),
            _ => Err(ServerError::permission_denied(format!(
                "This API is restricted: the '{group}' endpoints need the '{}' header with the right value",
                r.header
            ))),
        }
    }
}

/// Compares without stopping at the first difference, so timing does not reveal the key.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_and_key() {
        let r: Restriction = "shared-memory,statistics:X-Admin-Key=s3cret".parse().unwrap();
        assert_eq!(r.groups, vec![ApiGroup::SharedMemory, ApiGroup::Statistics]);
        assert_eq!(r.header, "x-admin-key");
        assert_eq!(r.value, "s3cret");
        assert!(!format!("{r:?}").contains("s3cret"));
        assert!("shared-memory".parse::<Restriction>().is_err());
        assert!("bogus:k=v".parse::<Restriction>().unwrap_err().contains("unknown endpoint group"));
        assert!("statistics:k=".parse::<Restriction>().is_err());
        assert!("statistics:grpc-x=v".parse::<Restriction>().is_err());
        assert!("statistics:a b=v".parse::<Restriction>().is_err());
        let twice = vec!["statistics:a=1".parse().unwrap(), "statistics,health:b=2".parse().unwrap()];
        assert!(RestrictedApi::new(twice).unwrap_err().contains("'statistics'"));
    }

    #[test]
    fn http_paths_map_to_groups() {
        let g = ApiGroup::of_http_path;
        assert_eq!(g("/v2"), Some(ApiGroup::Metadata));
        assert_eq!(g("/v2/health/live"), Some(ApiGroup::Health));
        assert_eq!(g("/v2/models/m"), Some(ApiGroup::Metadata));
        assert_eq!(g("/v2/models/m/versions/1"), Some(ApiGroup::Metadata));
        assert_eq!(g("/v2/models/m/versions/1/ready"), Some(ApiGroup::Health));
        assert_eq!(g("/v2/models/m/config"), Some(ApiGroup::ModelConfig));
        assert_eq!(g("/v2/models/stats"), Some(ApiGroup::Statistics));
        assert_eq!(g("/v2/models/m/versions/1/stats"), Some(ApiGroup::Statistics));
        assert_eq!(g("/v2/models/m/infer"), Some(ApiGroup::Inference));
        assert_eq!(g("/v2/models/m/trace/setting"), Some(ApiGroup::Trace));
        assert_eq!(g("/v2/trace/setting"), Some(ApiGroup::Trace));
        assert_eq!(g("/v2/logging"), Some(ApiGroup::Logging));
        assert_eq!(g("/v2/repository/index"), Some(ApiGroup::ModelRepository));
        assert_eq!(g("/v2/repository/models/m/load"), Some(ApiGroup::ModelRepository));
        assert_eq!(g("/v2/systemsharedmemory/region/r/register"), Some(ApiGroup::SharedMemory));
        assert_eq!(g("/v2/cudasharedmemory/status"), Some(ApiGroup::SharedMemory));
        assert_eq!(g("/health"), Some(ApiGroup::Health));
        assert_eq!(g("/ping"), Some(ApiGroup::Health));
        assert_eq!(g("/version"), Some(ApiGroup::Metadata));
        assert_eq!(g("/metrics"), Some(ApiGroup::Statistics));
        for path in ["/tokenize", "/detokenize", "/rerank", "/v1/rerank", "/v2/rerank"] {
            assert_eq!(g(path), Some(ApiGroup::Inference), "{path}");
        }
        assert_eq!(g("/v3/rerank"), None);
        assert_eq!(g("/v1/messages"), Some(ApiGroup::Inference));
        assert_eq!(g("/v1/responses"), Some(ApiGroup::Inference));
        assert_eq!(g("/nope"), None);
    }

    #[test]
    fn grpc_methods_map_to_groups() {
        let g = ApiGroup::of_grpc_path;
        assert_eq!(g("/inference.GRPCInferenceService/ModelInfer"), Some(ApiGroup::Inference));
        assert_eq!(g("/inference.GRPCInferenceService/SystemSharedMemoryRegister"), Some(ApiGroup::SharedMemory));
        assert_eq!(g("/inference.GRPCInferenceService/CudaSharedMemoryStatus"), Some(ApiGroup::SharedMemory));
        assert_eq!(g("/inference.GRPCInferenceService/ModelStatistics"), Some(ApiGroup::Statistics));
        assert_eq!(g("/inference.GRPCInferenceService/RepositoryModelLoad"), Some(ApiGroup::ModelRepository));
        assert_eq!(g("/grpc.health.v1.Health/Check"), Some(ApiGroup::Health));
        assert_eq!(g("/other.Service/X"), None);
    }

    #[test]
    fn check_needs_the_exact_value() {
        let api = RestrictedApi::new(vec!["statistics:x-key=abc".parse().unwrap()]).unwrap();
        let with = |v: &'static [u8]| move |h: &str| (h == "x-key").then_some(v);
        assert!(api.check(Some(ApiGroup::Statistics), with(b"abc")).is_ok());
        let e = api.check(Some(ApiGroup::Statistics), with(b"abd")).unwrap_err();
        assert_eq!(e.kind, super::super::ErrorKind::PermissionDenied);
        assert!(api.check(Some(ApiGroup::Statistics), |_| None).is_err());
        assert!(api.check(Some(ApiGroup::Inference), |_| None).is_ok());
        assert!(api.check(None, |_| None).is_ok());
    }
}
