//! The request bytes the HTTP front end holds at once (`--max-body-bytes-in-flight`). A request
//! takes its share of the budget (its Content-Length) before its body is read and keeps it until
//! it is answered, so many large uploads at once wait in their TCP windows, not in memory: the
//! server's memory stays within a small multiple of the budget (the body, the batch gathered
//! from it, the answer) whatever the number of clients.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Budget unit: whole KiB, so a budget of terabytes still fits the semaphore's `u32` grants.
const UNIT: u64 = 1024;

/// Default budget: 2 GiB.
pub const DEFAULT_BODY_BYTES_IN_FLIGHT: u64 = 2 << 30;

#[derive(Debug)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
    total_units: u32,
}

/// A request's share of the budget, given back when dropped.
#[derive(Debug)]
pub struct BodyShare {
    _permit: OwnedSemaphorePermit,
}

impl BodyBudget {
    /// A budget of `bytes` (0: no limit).
    pub fn new(bytes: u64) -> BodyBudget {
        let total_units = if bytes == 0 { u32::MAX } else { bytes.div_ceil(UNIT).clamp(1, u32::MAX as u64) as u32 };
        BodyBudget { units: Arc::new(Semaphore::new(total_units as usize)), total_units }
    }

    /// Waits until `bytes` of the budget are free and takes them. A request larger than the
    /// whole budget waits for all of it, so it still runs, alone.
    pub async fn reserve(&self, bytes: u64) -> BodyShare {
        let units = bytes.div_ceil(UNIT).clamp(1, self.total_units as u64) as u32;
        let permit =
            self.units.clone().acquire_many_owned(units).await.expect("the budget's semaphore is never closed");
        BodyShare { _permit: permit }
    }

    /// Bytes of the budget free now.
    pub fn free_bytes(&self) -> u64 {
        self.units.available_permits() as u64 * UNIT
    }
}

/// An answer's body that keeps its request's share until it is dropped (sent, or abandoned by
/// the client), so answers waiting for slow readers count against the budget too.
pub struct HeldBody {
    data: Option<Bytes>,
    _share: BodyShare,
}

impl HeldBody {
    pub fn new(data: Bytes, share: BodyShare) -> HeldBody {
        HeldBody { data: Some(data), _share: share }
    }
}

impl hyper::body::Body for HeldBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.data.take().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_share_waits_until_the_bytes_are_given_back() {
        let budget = Arc::new(BodyBudget::new(10 * UNIT));
        let first = budget.reserve(8 * UNIT).await;
        assert_eq!(budget.free_bytes(), 2 * UNIT);
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(4 * UNIT).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "4 KiB do not fit in the 2 KiB left");
        drop(first);
        let _second = waiting.await.unwrap();
        assert_eq!(budget.free_bytes(), 6 * UNIT);
        // Larger than the whole budget: it takes all of it, and runs alone.
        drop(_second);
        let all = budget.reserve(100 * UNIT).await;
        assert_eq!(budget.free_bytes(), 0);
        drop(all);
        assert_eq!(budget.free_bytes(), 10 * UNIT);
    }
}
