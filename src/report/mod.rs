//! How a run reads: perf_analyzer's CSV, the seeds' report CSV and Markdown, plots.

pub mod row;

pub use row::{LoadPoint, ReportRow};
pub mod pa_csv;
pub mod pa_export;
pub mod pa_summary;
