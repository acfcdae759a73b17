//! One error type for the whole server. HTTP turns it into a KServe `{"error": "..."}` body and
//! gRPC into a `tonic::Status`, so both protocols report the same failure the same way.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Triton's error codes (KSERVE_V2.md §3.2, §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidArg,
    NotFound,
    AlreadyExists,
    Unavailable,
    Unsupported,
    Internal,
    /// A server limit was hit (elements per tensor, registered shared memory, connections).
    Exhausted,
    /// A restricted endpoint group without its key (`--restricted-api`).
    PermissionDenied,
    /// The request ran past `--request-timeout`.
    Timeout,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ServerError {
    pub kind: ErrorKind,
    pub message: String,
}

pub type ServerResult<T> = Result<T, ServerError>;

impl ServerError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ServerError { kind, message: message.into() }
    }
    pub fn invalid_arg(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArg, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::AlreadyExists, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    pub fn exhausted(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Exhausted, message)
    }
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::PermissionDenied, message)
    }
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Timeout, message)
    }

    pub fn http_status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::InvalidArg | ErrorKind::AlreadyExists => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::Exhausted => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
            ErrorKind::Timeout => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn grpc_code(&self) -> tonic::Code {
        match self.kind {
            ErrorKind::InvalidArg => tonic::Code::InvalidArgument,
            ErrorKind::NotFound => tonic::Code::NotFound,
            ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
            ErrorKind::Unavailable => tonic::Code::Unavailable,
            ErrorKind::Unsupported => tonic::Code::Unimplemented,
            ErrorKind::Internal => tonic::Code::Internal,
            ErrorKind::Exhausted => tonic::Code::ResourceExhausted,
            // Triton answers a restricted gRPC group with UNAVAILABLE; the clearer code is ours.
            ErrorKind::PermissionDenied => tonic::Code::PermissionDenied,
            ErrorKind::Timeout => tonic::Code::DeadlineExceeded,
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        (self.http_status(), axum::Json(body)).into_response()
    }
}

impl From<ServerError> for tonic::Status {
    fn from(e: ServerError) -> Self {
        tonic::Status::new(e.grpc_code(), e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_mapping_matches_triton() {
        assert_eq!(ServerError::invalid_arg("x").http_status(), StatusCode::BAD_REQUEST);
        assert_eq!(ServerError::already_exists("x").http_status(), StatusCode::BAD_REQUEST);
        assert_eq!(ServerError::not_found("x").grpc_code(), tonic::Code::NotFound);
        let s: tonic::Status = ServerError::unsupported("nope").into();
        assert_eq!(s.code(), tonic::Code::Unimplemented);
        assert_eq!(s.message(), "nope");
        assert_eq!(ServerError::exhausted("x").http_status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(ServerError::exhausted("x").grpc_code(), tonic::Code::ResourceExhausted);
        assert_eq!(ServerError::permission_denied("x").http_status(), StatusCode::FORBIDDEN);
        assert_eq!(ServerError::permission_denied("x").grpc_code(), tonic::Code::PermissionDenied);
    }
}
