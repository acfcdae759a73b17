//! Where the twin's finished requests go: the `--record-requests` file (one JSON line each) and
//! the `--otlp-traces-endpoint` collector (one span each).

use std::io::Write;
use std::path::Path;

use parking_lot::Mutex;

use super::record::RequestRecord;

/// Where finished requests go: the `--record-requests` file, the `--otlp-traces-endpoint`
/// collector as spans, or both.
pub struct RequestLog {
    file: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
    spans: Option<super::otlp::SpanExport>,
}

impl RequestLog {
    /// A log for whichever of the two is asked for; `None` for neither. Errors name the flag.
    pub fn open(record: Option<&Path>, otlp_endpoint: Option<&str>) -> Result<Option<RequestLog>, String> {
        if record.is_none() && otlp_endpoint.is_none() {
            return Ok(None);
        }
        let file = match record {
            None => None,
            Some(path) => Some(
                std::fs::File::create(path)
                    .map_err(|e| format!("--record-requests: cannot create '{}': {e}", path.display()))?,
            ),
        };
        let spans = otlp_endpoint.map(super::otlp::SpanExport::start).transpose()?;
        Ok(Some(RequestLog { file: file.map(|f| Mutex::new(std::io::BufWriter::new(f))), spans }))
    }

    /// Appends `record` and flushes it, so a reader sees every finished request; queues its
    /// span.
    pub fn write(&self, record: &RequestRecord) {
        if let Some(spans) = &self.spans {
            spans.send(record);
        }
        let Some(file) = &self.file else { return };
        let mut line = serde_json::to_vec(record).expect("a record serializes");
        line.push(b'\n');
        let mut file = file.lock();
        if let Err(e) = file.write_all(&line).and_then(|_| file.flush()) {
            tracing::warn!("--record-requests: cannot write a record: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_json_line_per_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let log = RequestLog::open(Some(&path), None).unwrap().unwrap();
        let record = RequestRecord {
            id: "a".into(),
            model: "llm".into(),
            arrival_ns: 1,
            admitted_ns: Some(2),
            first_chunk_ns: Some(3),
            first_read_ns: Some(3),
            chunk_ns: vec![3, 4],
            finish_ns: 4,
            prompt_tokens: 5,
            completion_tokens: 2,
            reasoning_tokens: 0,
            cached_tokens: 0,
            preemptions: 0,
            finish_reason: "length",
        };
        log.write(&record);
        log.write(&record);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["chunk_ns"], serde_json::json!([3, 4]));
        assert_eq!(lines[1]["finish_reason"], "length");
        assert_eq!(lines[0]["model"], "llm");
    }

    #[test]
    fn neither_flag_opens_nothing_and_a_bad_endpoint_names_its_flag() {
        assert!(RequestLog::open(None, None).unwrap().is_none());
        let err = RequestLog::open(None, Some("ftp://x")).err().unwrap();
        assert!(err.starts_with("--otlp-traces-endpoint"), "{err}");
    }
}
