//! Server-Sent Events, read as they arrive: bytes go in as the network delivers them, whole
//! events come out, each stamped with the instant of the read that completed it. An event split
//! over several reads is one event (at its last read); several events packed in one read are
//! several events (at that read). An event keeps its `data` and its `event:` name (Anthropic's
//! and the Responses API's streams name each event); comments (`:`), `id:` and `retry:` lines
//! are read and ignored.

use std::time::Instant;

/// One complete event: its `data` lines joined by `\n`, its `event:` name if it had one, and
/// when its last byte arrived.
#[derive(Clone, Debug, PartialEq)]
pub struct SseEvent {
    pub data: String,
    pub event: Option<String>,
    pub at: Instant,
}

/// Incremental SSE parser (the WHATWG event-stream rules for `data:` fields and blank-line
/// dispatch; CR, LF and CRLF all end a line).
#[derive(Debug, Default)]
pub struct SseReader {
    /// Bytes of an unfinished line.
    line: Vec<u8>,
    /// `data` of the event being built; `None` until a `data` field arrives.
    data: Option<String>,
    /// `event` of the event being built.
    event: Option<String>,
    /// The last byte seen was a CR: a following LF belongs to the same line end.
    after_cr: bool,
}

impl SseReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one network read; pushes every event it completes onto `out`, stamped `at`.
    pub fn feed(&mut self, bytes: &[u8], at: Instant, out: &mut Vec<SseEvent>) {
        let mut rest = bytes;
        if self.after_cr {
            self.after_cr = false;
            if let Some(b'\n') = rest.first() {
                rest = &rest[1..];
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..end]);
            let cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.end_line(&line, at, out);
        }
        self.line.extend_from_slice(rest);
    }

    /// The stream ended: an event left without its blank line is dispatched too (servers that
    /// close right after the last `data:` line lose nothing).
    pub fn finish(&mut self, at: Instant, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.end_line(&line, at, out);
        }
        self.dispatch(at, out);
    }

    /// A blank line (or the end) ends the event: one with data goes out, with its name.
    fn dispatch(&mut self, at: Instant, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if let Some(data) = self.data.take() {
            out.push(SseEvent { data, event, at });
        }
    }

    fn end_line(&mut self, line: &[u8], at: Instant, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(at, out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        if field == b"event" {
            self.event = Some(String::from_utf8_lossy(value).into_owned());
        } else if field == b"data" {
            let value = String::from_utf8_lossy(value);
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn read(chunks: &[&[u8]]) -> Vec<(String, usize)> {
        let start = Instant::now();
        let mut reader = SseReader::new();
        let mut out = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            reader.feed(chunk, start + Duration::from_millis(i as u64), &mut out);
        }
        reader.finish(start + Duration::from_millis(chunks.len() as u64), &mut out);
        out.into_iter().map(|e| (e.data, e.at.duration_since(start).as_millis() as usize)).collect()
    }

    #[test]
    fn events_packed_in_one_read_are_separate_events_at_that_read() {
        let got = read(&[b"data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n"]);
        assert_eq!(got, vec![("{\"a\":1}".into(), 0), ("{\"a\":2}".into(), 0), ("[DONE]".into(), 0)]);
    }

    #[test]
    fn an_event_split_over_reads_arrives_with_its_last_byte() {
        let got = read(&[b"da", b"ta: hel", b"lo\n", b"\n", b"data: x\n\n"]);
        assert_eq!(got, vec![("hello".into(), 3), ("x".into(), 4)]);
    }

    #[test]
    fn crlf_split_between_reads_is_one_line_end() {
        let got = read(&[b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]);
        assert_eq!(got, vec![("a".into(), 1), ("b".into(), 2)]);
    }

    #[test]
    fn comments_and_other_fields_are_ignored_and_data_lines_join() {
        let got = read(&[b": ping\n\nevent: msg\nid: 7\ndata: one\ndata:two\n\n"]);
        assert_eq!(got, vec![("one\ntwo".into(), 0)]);
    }

    #[test]
    fn an_event_keeps_its_own_name_and_the_next_starts_without_one() {
        let mut reader = SseReader::new();
        let mut out = Vec::new();
        let at = Instant::now();
        let stream =
            b"event: ping\ndata: {}\n\nevent: lost\n\ndata: {\"a\":1}\n\nevent: message_stop\r\ndata: {}\r\n\r\n";
        reader.feed(stream, at, &mut out);
        let names: Vec<Option<&str>> = out.iter().map(|e| e.event.as_deref()).collect();
        assert_eq!(names, vec![Some("ping"), None, Some("message_stop")], "a name without data goes with nothing");
        assert_eq!(out[1].data, "{\"a\":1}");
    }

    #[test]
    fn an_event_without_its_blank_line_is_dispatched_at_the_end() {
        let got = read(&[b"data: {\"text_output\":\"x\"}\n\ndata: last"]);
        assert_eq!(got, vec![("{\"text_output\":\"x\"}".into(), 0), ("last".into(), 1)]);
    }
}
