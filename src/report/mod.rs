//! How a run reads: perf_analyzer's CSV, the seeds' report CSV and Markdown, plots.

pub mod row;

pub use row::{LoadPoint, ReportRow};
