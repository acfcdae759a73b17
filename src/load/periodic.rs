//! perf_analyzer's periodic concurrency (`--periodic-concurrency-range start:end:step` with
//! `--request-period N`): `start` request slots each send one request; once every request of
//! the latest batch of slots has had N responses, `step` more slots start, until `end` requests
//! have been started. The run ends when all of them have had their final response. Each slot
//! sends exactly one request. A request whose final response comes before its N-th fails the
//! run, as perf_analyzer's does.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use super::ResponseCheck;
use crate::client::{ClientError, InferClient, STALL_TIMEOUT};
use crate::results::{RequestRecord, ResponseRecord};

/// perf_analyzer 2.50's words when a request ends before its request period.
pub const PERIOD_NOT_REACHED: &str = "Request received final response before request period was reached. Request \
     period must be at most the total number of responses received by any request.";

/// The shape of one periodic run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeriodicSpec {
    pub start: u64,
    pub end: u64,
    pub step: u64,
    /// Responses each request of the latest batch must have had before the next batch starts.
    pub request_period: u64,
}

/// What a slot tells the driver.
enum Event {
    /// A request had its `request_period`-th response.
    Period,
    /// A request finished: its record, or why it failed.
    Done(Result<RequestRecord, ClientError>),
}

/// Runs `spec` with `steps` (one prepared request per data step, cycled) and returns every
/// request with its responses' wall-clock times, in the order they finished. Nothing answered
/// for [`STALL_TIMEOUT`] while requests are in flight ends the run with [`ClientError::Stalled`].
pub async fn run<C: InferClient>(
    client: Arc<C>,
    steps: Arc<[C::Prepared]>,
    spec: PeriodicSpec,
    check: Option<ResponseCheck>,
) -> Result<Vec<RequestRecord>, ClientError> {
    if steps.is_empty() || spec.start == 0 || spec.step == 0 || spec.request_period == 0 {
        return Err(ClientError::Invalid("periodic concurrency needs start, step and request period > 0".into()));
    }
    let clock = (Instant::now(), SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64);
    let epoch_ns = move |t: Instant| clock.1 + t.saturating_duration_since(clock.0).as_nanos() as u64;
    let (events, mut inbox) = mpsc::unbounded_channel();
    let mut slots = Vec::new();
    let mut started = 0u64;
    let mut start_batch = |count: u64, started: &mut u64| {
        for _ in 0..count {
            let step = (*started % steps.len() as u64) as usize;
            *started += 1;
            let (client, steps, events, check) = (client.clone(), steps.clone(), events.clone(), check.clone());
            let period = spec.request_period as usize;
            slots.push(tokio::spawn(async move {
                let sent = Instant::now();
                let watch = |n: usize| {
                    if n == period {
                        let _ = events.send(Event::Period);
                    }
                };
                let (result, _) = client.infer_watched(&steps[step], true, &watch).await;
                let record = result.and_then(|answer| {
                    if answer.responses.len().max(1) < period {
                        return Err(ClientError::Invalid(PERIOD_NOT_REACHED.into()));
                    }
                    if let Some(check) = &check {
                        check(step, None, &answer).map_err(ClientError::Invalid)?;
                    }
                    let responses = answer
                        .responses
                        .iter()
                        .map(|(at, outputs)| ResponseRecord { ns: epoch_ns(*at), outputs: outputs.clone() })
                        .collect();
                    Ok(RequestRecord { send_ns: epoch_ns(sent), step, sequence_id: None, responses })
                });
                let _ = events.send(Event::Done(record));
            }));
        }
    };
    start_batch(spec.start, &mut started);
    let mut incomplete = spec.start;
    let mut records = Vec::with_capacity(spec.end as usize);
    let outcome = loop {
        if records.len() as u64 == started && started >= spec.end {
            break Ok(());
        }
        let event = match tokio::time::timeout(STALL_TIMEOUT, inbox.recv()).await {
            Ok(Some(event)) => event,
            Ok(None) => break Err(ClientError::Protocol("the periodic load's requests ended unseen".into())),
            Err(_) => {
                break Err(ClientError::Stalled(format!(
                    "none of the {} requests in flight was answered in {}s",
                    started - records.len() as u64,
                    STALL_TIMEOUT.as_secs()
                )))
            }
        };
        match event {
            Event::Period => {
                incomplete = incomplete.saturating_sub(1);
                if incomplete == 0 && started < spec.end {
                    let count = spec.step.min(spec.end - started);
                    start_batch(count, &mut started);
                    incomplete = count;
                }
            }
            Event::Done(Ok(record)) => records.push(record),
            Event::Done(Err(e)) => break Err(e),
        }
    };
    for slot in &slots {
        slot.abort();
    }
    outcome.map(|()| records)
}
