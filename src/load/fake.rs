//! A test-only backend: an [`InferClient`] whose latency, failures and statistics are chosen by
//! the test, so the engine and the measurement loop can be checked without a network.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::client::{
    ClientError, ClientResult, CorrelationId, InferClient, InferResult, RequestSpec, RequestTiming, SequenceFlags,
    ServerInfo,
};
use crate::proto::inference::{
    InferStatistics, ModelConfig, ModelMetadataResponse, ModelStatistics, StatisticDuration,
};

#[derive(Default)]
pub struct FakeClient {
    /// Each request takes this long, times the requests in flight when `scale_with_in_flight`.
    pub latency: Duration,
    pub scale_with_in_flight: bool,
    /// Each request's latency is drawn uniformly from `latency ± jitter` in whole milliseconds
    /// (seeded by `seed`): random yet repeatable, and on paused time exactly as drawn (tokio's
    /// timer rounds sleeps up to whole milliseconds).
    pub jitter: Duration,
    pub seed: u64,
    pub rng: Mutex<Option<ChaCha8Rng>>,
    /// Block the calling thread instead of yielding (a client that cannot keep up).
    pub blocking: bool,
    /// Every N-th request fails with a server error.
    pub fail_every: u64,
    /// After this many requests, the server is unreachable.
    pub unreachable_after: Option<u64>,
    /// After this many requests, the server restarts: requests, statistics and the first
    /// metadata request after fail as unreachable; the second metadata request finds it back.
    pub restart_after: Option<u64>,
    /// Restarting: set when the restart begins, cleared once the server answers again.
    pub down: std::sync::atomic::AtomicBool,
    pub metadata_asked_while_down: AtomicU64,
    /// Calls of `drop_connections` and `register_system_shm`.
    pub connections_dropped: AtomicU64,
    pub registered: Mutex<Vec<String>>,
    /// After this many requests, the server hangs: requests are never answered.
    pub hang_after: Option<u64>,
    pub sent: AtomicU64,
    pub in_flight: AtomicU64,
    /// (requests, ns of model time) the fake "server" has done.
    pub served: Mutex<(u64, u64)>,
    /// Every sequence step in the order it was sent: (sequence id, start, end).
    pub sequence_log: Mutex<Vec<(u64, bool, bool)>>,
    /// Sequences with a request in flight, and how often a second one of the same sequence
    /// arrived while one was.
    pub sequence_busy: Mutex<std::collections::HashSet<u64>>,
    pub sequence_overlaps: AtomicU64,
}

impl FakeClient {
    pub fn with_latency(latency: Duration) -> FakeClient {
        FakeClient { latency, ..Default::default() }
    }
}

impl InferClient for FakeClient {
    type Prepared = ();

    async fn server_metadata(&self) -> ClientResult<ServerInfo> {
        // Down or gone, the fake server answers nothing (a request's lost connection probes this).
        let gone = self.unreachable_after.is_some_and(|limit| self.sent.load(Ordering::Acquire) > limit);
        if gone || self.down.load(Ordering::Acquire) {
            return Err(unreachable());
        }
        Ok(ServerInfo { name: "fake".into(), version: "0".into(), extensions: vec!["statistics".into()] })
    }
    async fn model_metadata(&self, _: &str, _: &str) -> ClientResult<ModelMetadataResponse> {
        let gone = self.unreachable_after.is_some_and(|limit| self.sent.load(Ordering::Acquire) > limit);
        if self.down.load(Ordering::Acquire) && self.metadata_asked_while_down.fetch_add(1, Ordering::AcqRel) > 0 {
            self.down.store(false, Ordering::Release);
        } else if gone || self.down.load(Ordering::Acquire) {
            return Err(unreachable());
        }
        Ok(ModelMetadataResponse::default())
    }
    async fn model_config(&self, _: &str, _: &str) -> ClientResult<ModelConfig> {
        Ok(ModelConfig::default())
    }
    async fn statistics(&self, model: &str, _: &str) -> ClientResult<Vec<ModelStatistics>> {
        if self.down.load(Ordering::Acquire) {
            return Err(unreachable());
        }
        let (count, ns) = *self.served.lock();
        let d = |ns| Some(StatisticDuration { count, ns });
        Ok(vec![ModelStatistics {
            name: model.into(),
            version: "1".into(),
            inference_count: count,
            execution_count: count,
            inference_stats: Some(InferStatistics {
                success: d(ns),
                queue: d(0),
                compute_input: d(0),
                compute_infer: d(ns),
                compute_output: d(0),
                ..Default::default()
            }),
            ..Default::default()
        }])
    }
    fn prepare(&self, _: &RequestSpec) -> ClientResult<()> {
        Ok(())
    }
    async fn infer_step(
        &self,
        _: &(),
        sequence: Option<&SequenceFlags>,
        _: bool,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        let Some(sequence) = sequence else {
            return self.serve().await;
        };
        let CorrelationId::Number(id) = sequence.id else { panic!("the load sends numeric sequence ids") };
        self.sequence_log.lock().push((id, sequence.start, sequence.end));
        if !self.sequence_busy.lock().insert(id) {
            self.sequence_overlaps.fetch_add(1, Ordering::AcqRel);
        }
        let answer = self.serve().await;
        self.sequence_busy.lock().remove(&id);
        answer
    }
    fn drop_connections(&self) {
        self.connections_dropped.fetch_add(1, Ordering::AcqRel);
    }
    async fn register_system_shm(&self, name: &str, _: &str, _: u64, _: u64) -> ClientResult<()> {
        if self.down.load(Ordering::Acquire) {
            return Err(unreachable());
        }
        self.registered.lock().push(name.to_string());
        Ok(())
    }
    async fn unregister_system_shm(&self, _: &str) -> ClientResult<()> {
        Ok(())
    }
    async fn unregister_cuda_shm(&self, _: &str) -> ClientResult<()> {
        Ok(())
    }
    async fn trace_setting(&self, _: &str, _: &[(String, Vec<String>)]) -> ClientResult<()> {
        Ok(())
    }
}

fn unreachable() -> ClientError {
    ClientError::Unreachable { url: "fake".into(), reason: "connection refused".into() }
}

impl FakeClient {
    async fn serve(&self) -> (ClientResult<InferResult>, RequestTiming) {
        let n = self.sent.fetch_add(1, Ordering::AcqRel) + 1;
        if self.restart_after == Some(n - 1) {
            self.down.store(true, Ordering::Release);
        }
        if self.unreachable_after.is_some_and(|limit| n > limit) || self.down.load(Ordering::Acquire) {
            return (Err(unreachable()), RequestTiming::default());
        }
        if self.hang_after.is_some_and(|limit| n > limit) {
            std::future::pending::<()>().await;
        }
        let in_flight = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        let mut latency = if self.scale_with_in_flight { self.latency * in_flight as u32 } else { self.latency };
        if !self.jitter.is_zero() {
            let mut rng = self.rng.lock();
            let rng = rng.get_or_insert_with(|| ChaCha8Rng::seed_from_u64(self.seed));
            let (mid, spread) = (latency.as_millis() as i64, self.jitter.as_millis() as i64);
            latency = Duration::from_millis(rng.random_range(mid - spread..=mid + spread).max(0) as u64);
        }
        if self.blocking {
            std::thread::sleep(latency);
        } else {
            tokio::time::sleep(latency).await;
        }
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        let timing = RequestTiming { send: Duration::from_micros(10), recv: Duration::from_micros(5), total: latency };
        if self.fail_every > 0 && n.is_multiple_of(self.fail_every) {
            return (Err(ClientError::Server(format!("injected failure {n}"))), timing);
        }
        let mut served = self.served.lock();
        served.0 += 1;
        served.1 += latency.as_nanos() as u64;
        (Ok(InferResult::default()), timing)
    }
}
