//! `--request-timeout`: every call a client makes, inference or not, ends within the limit, with
//! [`ClientError::TimedOut`] when the server has not answered. One decorator over any transport,
//! so HTTP, gRPC unary and gRPC streaming are bounded the same way; the call's future is dropped
//! at the deadline (a pooled HTTP connection with it, a gRPC stream's request reset).

use std::time::Duration;

use super::{
    ClientError, ClientResult, InferClient, InferResult, RequestSpec, RequestTiming, SequenceFlags, ServerInfo,
};
use crate::proto::inference::{ModelConfig, ModelMetadataResponse, ModelStatistics};

/// `inner`, each call bounded by `limit` (unbounded without one).
pub struct Deadline<C> {
    inner: C,
    limit: Option<Duration>,
}

impl<C> Deadline<C> {
    pub fn new(inner: C, limit: Option<Duration>) -> Deadline<C> {
        Deadline { inner, limit }
    }

    async fn bound<T>(&self, call: impl std::future::Future<Output = ClientResult<T>>) -> ClientResult<T> {
        match self.limit {
            None => call.await,
            Some(after) => tokio::time::timeout(after, call).await.unwrap_or(Err(ClientError::TimedOut { after })),
        }
    }

    async fn bound_infer(
        &self,
        call: impl std::future::Future<Output = (ClientResult<InferResult>, RequestTiming)>,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        let Some(after) = self.limit else { return call.await };
        match tokio::time::timeout(after, call).await {
            Ok(done) => done,
            Err(_) => {
                (Err(ClientError::TimedOut { after }), RequestTiming { total: after, ..RequestTiming::default() })
            }
        }
    }
}

impl<C: InferClient> InferClient for Deadline<C> {
    type Prepared = C::Prepared;

    async fn server_metadata(&self) -> ClientResult<ServerInfo> {
        self.bound(self.inner.server_metadata()).await
    }

    async fn model_metadata(&self, model: &str, version: &str) -> ClientResult<ModelMetadataResponse> {
        self.bound(self.inner.model_metadata(model, version)).await
    }

    async fn model_config(&self, model: &str, version: &str) -> ClientResult<ModelConfig> {
        self.bound(self.inner.model_config(model, version)).await
    }

    async fn statistics(&self, model: &str, version: &str) -> ClientResult<Vec<ModelStatistics>> {
        self.bound(self.inner.statistics(model, version)).await
    }

    fn prepare(&self, spec: &RequestSpec) -> ClientResult<C::Prepared> {
        self.inner.prepare(spec)
    }

    async fn infer_step(
        &self,
        request: &C::Prepared,
        sequence: Option<&SequenceFlags>,
        keep_outputs: bool,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        self.bound_infer(self.inner.infer_step(request, sequence, keep_outputs)).await
    }

    async fn infer_watched(
        &self,
        request: &C::Prepared,
        keep_outputs: bool,
        watch: &(dyn Fn(usize) + Sync),
    ) -> (ClientResult<InferResult>, RequestTiming) {
        self.bound_infer(self.inner.infer_watched(request, keep_outputs, watch)).await
    }

    fn drop_connections(&self) {
        self.inner.drop_connections()
    }

    async fn register_system_shm(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> ClientResult<()> {
        self.bound(self.inner.register_system_shm(name, key, offset, byte_size)).await
    }

    async fn unregister_system_shm(&self, name: &str) -> ClientResult<()> {
        self.bound(self.inner.unregister_system_shm(name)).await
    }

    async fn unregister_cuda_shm(&self, name: &str) -> ClientResult<()> {
        self.bound(self.inner.unregister_cuda_shm(name)).await
    }

    async fn trace_setting(&self, model: &str, settings: &[(String, Vec<String>)]) -> ClientResult<()> {
        self.bound(self.inner.trace_setting(model, settings)).await
    }

    async fn repository_load(&self, model: &str, config: Option<&str>) -> ClientResult<()> {
        self.bound(self.inner.repository_load(model, config)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::inprocess::InProcessClient;

    /// A client whose every call waits forever: only the deadline ends it.
    struct Silent;

    impl InferClient for Silent {
        type Prepared = ();
        async fn server_metadata(&self) -> ClientResult<ServerInfo> {
            std::future::pending().await
        }
        async fn model_metadata(&self, _: &str, _: &str) -> ClientResult<ModelMetadataResponse> {
            std::future::pending().await
        }
        async fn model_config(&self, _: &str, _: &str) -> ClientResult<ModelConfig> {
            std::future::pending().await
        }
        async fn statistics(&self, _: &str, _: &str) -> ClientResult<Vec<ModelStatistics>> {
            std::future::pending().await
        }
        fn prepare(&self, _: &RequestSpec) -> ClientResult<()> {
            Ok(())
        }
        async fn infer_step(
            &self,
            _: &(),
            _: Option<&SequenceFlags>,
            _: bool,
        ) -> (ClientResult<InferResult>, RequestTiming) {
            std::future::pending().await
        }
        async fn register_system_shm(&self, _: &str, _: &str, _: u64, _: u64) -> ClientResult<()> {
            std::future::pending().await
        }
        async fn unregister_system_shm(&self, _: &str) -> ClientResult<()> {
            std::future::pending().await
        }
        async fn unregister_cuda_shm(&self, _: &str) -> ClientResult<()> {
            std::future::pending().await
        }
        async fn trace_setting(&self, _: &str, _: &[(String, Vec<String>)]) -> ClientResult<()> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_call_ends_at_the_deadline() {
        let limit = Duration::from_secs(3);
        let client = Deadline::new(Silent, Some(limit));
        let timed_out = |e: ClientError| matches!(e, ClientError::TimedOut { after } if after == limit);
        assert!(timed_out(client.server_metadata().await.unwrap_err()));
        assert!(timed_out(client.statistics("m", "").await.unwrap_err()));
        assert!(timed_out(client.register_system_shm("r", "/k", 0, 8).await.unwrap_err()));
        let start = tokio::time::Instant::now();
        let (result, timing) = client.infer(&(), false).await;
        assert!(timed_out(result.unwrap_err()));
        assert_eq!(start.elapsed(), limit);
        assert_eq!(timing.total, limit);
        assert!(!ClientError::TimedOut { after: limit }.is_fatal(), "one timed-out request does not end a run");
    }

    #[tokio::test]
    async fn answered_calls_pass_through() {
        let core = crate::server::InferenceServer::new(crate::server::ServerOptions::default()).unwrap();
        let client = Deadline::new(InProcessClient::new(core), Some(Duration::from_secs(30)));
        assert!(client.server_metadata().await.is_ok());
    }
}
