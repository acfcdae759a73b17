//! The leaf every consumer of measurements reads: the row types ([`LoadPoint`], [`ReportRow`],
//! [`PointResult`]), server-stat deltas, the one CSV reader, the perf_analyzer CSV and
//! `report.csv` writers, and the number formatters. It imports only plain types (`proto`,
//! `tensor`), so `measure`, `report`, `gate` and `run` can all depend on it.

pub mod client_limit;
pub mod client_load;
pub mod composing_csv;
pub mod csv;
pub mod failures;
pub mod format;
pub mod pa_csv;
pub mod point;
pub mod row;
pub mod server_stats;
pub mod shard;

pub use client_load::ClientLoad;
pub use failures::{FailureCounts, FailureKind};
pub use point::{GpuFigures, PointDetail, PointResult, PointSlot, RequestRecord, ResponseRecord};
pub use row::{min_requests_for, Interval, LoadPoint, ReportRow, TokenFigures, PERCENTILES};
pub use server_stats::{ComposingModel, ComposingStats, EnsembleTimes, ServerStats, StageTotal};
