//! perf_analyzer 2.50's data loader as its `--service-kind openai` reads `--input-data`: the model
//! has one JSON input, `payload`, whose value in a step is the request body. Each `--input-data`
//! names a JSON file (`{"data": [step, ...]}`, or streams `{"data": [[step, ...], ...]}`) or a
//! folder; files add their steps (or streams) to the ones before. A model that is not a sequence
//! model sends stream 0 only, its steps in turn. A refusal is perf_analyzer's message, with the
//! file and step it is about.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail};
use base64::Engine;
use serde_json::Value;

/// perf_analyzer's framing of a data error.
const FRAME: &str = "Failed to init manager inputs";

/// The bodies to send, in order, and the count perf_analyzer reports ("Successfully read data
/// for N stream/streams ...").
#[derive(Debug, Default)]
pub struct Payloads {
    pub bodies: Vec<String>,
    pub streams: usize,
}

impl Payloads {
    /// perf_analyzer's line once the data is read.
    pub fn read_line(&self) -> String {
        match self.streams {
            1 => format!(" Successfully read data for 1 stream/streams with {} step/steps.", self.bodies.len()),
            n => format!(" Successfully read data for {n} stream/streams."),
        }
    }
}

fn refuse(what: impl std::fmt::Display, path: &Path) -> anyhow::Error {
    anyhow!("{FRAME}: {what} ({})", path.display())
}

/// Reads every `--input-data` in order, as perf_analyzer does (a folder first is read alone).
pub fn read(paths: &[PathBuf]) -> anyhow::Result<Payloads> {
    let Some(first) = paths.first() else { bail!("Must supply --input-data for OpenAI service kind.") };
    if first.is_dir() {
        return read_dir(first);
    }
    let mut loader = Loader::default();
    for path in paths {
        loader.file(path)?;
    }
    if loader.stream0.is_empty() {
        // perf_analyzer crashes on this; say why instead.
        bail!("{FRAME}: no request in --input-data: its \"data\" holds no step ({})", first.display());
    }
    Ok(Payloads { bodies: loader.stream0, streams: loader.streams })
}

/// A folder holds one file per tensor; the `payload` tensor is JSON, whose size perf_analyzer
/// cannot know, so it refuses every folder once the names are checked.
fn read_dir(dir: &Path) -> anyhow::Result<Payloads> {
    let entries = std::fs::read_dir(dir).map_err(|e| refuse(e, dir))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "payload" && name != "response" {
            return Err(refuse(
                format!("Provided data file '{name}' does not correspond to a valid model input or output."),
                dir,
            ));
        }
    }
    let file = dir.join("payload");
    match std::fs::metadata(&file) {
        Err(_) => Err(refuse(format!("failed to open file '{}'", file.display()), dir)),
        Ok(m) if m.len() == 0 => Err(refuse(format!("file '{}' is empty", file.display()), dir)),
        Ok(_) => {
            Err(refuse("input payload contains dynamic shape, provide shapes to send along with the request", dir))
        }
    }
}

#[derive(Default)]
struct Loader {
    /// Whether the data holds streams (arrays of steps), fixed by the first step read.
    nested: Option<bool>,
    streams: usize,
    stream0: Vec<String>,
}

impl Loader {
    fn file(&mut self, path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| refuse(format!("failed to open file for reading provided data: {e}"), path))?;
        let json: Value = serde_json::from_str(&text).map_err(|e| {
            refuse(format!("failed to parse the specified json file for reading provided data: {e}"), path)
        })?;
        let Some(data) = json.get("data") else {
            return Err(refuse("The json file doesn't contain data field", path));
        };
        let Some(items) = data.as_array() else {
            return Err(refuse("\"data\" is not an array of steps", path));
        };
        for item in items {
            let nested = item.is_array();
            if *self.nested.get_or_insert(nested) != nested {
                return Err(refuse(
                    "Inconsistency in input-data provided. Can not have a combination of objects and arrays \
                     inside of the Data array",
                    path,
                ));
            }
        }
        if self.nested == Some(true) {
            for stream in items {
                let index = self.streams;
                for (k, step) in stream.as_array().into_iter().flatten().enumerate() {
                    let body = body(step, index, k).map_err(|e| refuse(e, path))?;
                    if index == 0 {
                        self.stream0.push(body);
                    }
                }
                self.streams += 1;
            }
        } else {
            // Steps with no streams around them: all go to stream 0, after the earlier files'.
            for step in items {
                let k = self.stream0.len();
                self.stream0.push(body(step, 0, k).map_err(|e| refuse(e, path))?);
            }
            self.streams = 1;
        }
        Ok(())
    }
}

/// One step's request body, or perf_analyzer's reason for refusing it.
fn body(step: &Value, stream: usize, k: usize) -> Result<String, String> {
    let at = format!("( Location stream id: {stream}, step id: {k})");
    let Some(fields) = step.as_object() else {
        return Err(format!("step {k} of stream {stream} is not an object"));
    };
    let body = match fields.get("payload") {
        None => None,
        Some(Value::Array(values)) => Some(one_json(values)?),
        Some(Value::Object(tensor)) => Some(match (tensor.get("b64"), tensor.get("content")) {
            (Some(Value::String(b64)), _) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| format!("the b64 field does not decode: {e} {at}"))?;
                String::from_utf8_lossy(&bytes).into_owned()
            }
            (Some(_), _) => return Err(format!("the value of b64 field should be of type string {at}")),
            (None, None) => return Err(format!("missing content field. {at}")),
            (None, Some(Value::Array(values))) => one_json(values)?,
            (None, Some(_)) => {
                return Err(format!("The tensor values are not supported. Expected an array or b64 string {at}"))
            }
        }),
        Some(_) => return Err("Input data file is malformed.".into()),
    };
    // perf_analyzer also accepts `model` in a step; any other key is a tensor the model lacks.
    if let Some(other) = fields.keys().find(|key| *key != "payload" && *key != "model") {
        return Err(format!("The input or output '{other}' is not found in the model configuration"));
    }
    // perf_analyzer reads such a step and its workers then stall; refuse it here.
    body.ok_or_else(|| format!("step {k} of stream {stream} has no \"payload\": nothing to send"))
}

/// A `payload` array holds exactly one JSON value, the body.
fn one_json(values: &[Value]) -> Result<String, String> {
    match values {
        [value] => Ok(value.to_string()),
        _ => Err("JSON format does not yet support multiple json objects in the input".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(texts: &[&str]) -> anyhow::Result<Payloads> {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let path = dir.path().join(format!("{i}.json"));
                std::fs::write(&path, text).unwrap();
                path
            })
            .collect();
        read(&paths)
    }

    fn refusal(texts: &[&str]) -> String {
        read_text(texts).unwrap_err().to_string()
    }

    #[test]
    fn bodies_are_read_as_perf_analyzer_reads_them() {
        let p = read_text(&[
            r#"{"data": [{"payload": [{"model": "m"}]}, {"payload": {"content": [{"n": 1}]}, "model": "x"}]}"#,
        ])
        .unwrap();
        assert_eq!(p.bodies, [r#"{"model":"m"}"#, r#"{"n":1}"#]);
        assert_eq!(p.read_line(), " Successfully read data for 1 stream/streams with 2 step/steps.");
        // Any JSON value is a body, and b64 is sent as it decodes.
        let p = read_text(&[r#"{"data": [{"payload": ["text"]}, {"payload": {"b64": "eyJhIjoxfQ=="}}]}"#]).unwrap();
        assert_eq!(p.bodies, [r#""text""#, r#"{"a":1}"#]);
        // Files add up; streams: stream 0 alone is sent.
        let p = read_text(&[r#"{"data": [{"payload": [1]}]}"#, r#"{"data": [{"payload": [2]}]}"#]).unwrap();
        assert_eq!(p.bodies, ["1", "2"]);
        let p = read_text(&[r#"{"data": [[{"payload": [1]}, {"payload": [2]}], [{"payload": [3]}]]}"#]).unwrap();
        assert_eq!((p.bodies.len(), p.streams), (2, 2));
        assert_eq!(p.read_line(), " Successfully read data for 2 stream/streams.");
    }

    #[test]
    fn refusals_are_in_perf_analyzers_words() {
        for (texts, want) in [
            (
                vec![r#"{"data": [{"payload": [{"a": 1}, {"b": 2}]}]}"#],
                "JSON format does not yet support multiple json objects in the input",
            ),
            (vec![r#"{"data": [{"payload": []}]}"#], "JSON format does not yet support multiple json objects"),
            (
                vec![r#"{"data": [{"payload": {"a": 1}}]}"#],
                "missing content field. ( Location stream id: 0, step id: 0)",
            ),
            (vec![r#"{"data": [{"payload": "x"}]}"#], "Input data file is malformed."),
            (
                vec![r#"{"data": [{"payload": [1]}, {"text_input": ["x"]}]}"#],
                "The input or output 'text_input' is not found in the model configuration",
            ),
            (vec![r#"{"nodata": 1}"#], "The json file doesn't contain data field"),
            (vec![r#"{"data": ["#], "failed to parse the specified json file for reading provided data"),
            (
                vec![r#"{"data": [[{"payload": [1]}], {"payload": [1]}]}"#],
                "Inconsistency in input-data provided. Can not have a combination of objects and arrays",
            ),
            (vec![r#"{"data": [{"payload": [1]}]}"#, r#"{"data": [[{"payload": [1]}]]}"#], "Inconsistency"),
            (vec![r#"{"data": []}"#], "holds no step"),
            (vec![r#"{"data": [{"model": "m"}]}"#], "has no \"payload\""),
        ] {
            let e = refusal(&texts);
            assert!(e.starts_with("Failed to init manager inputs: "), "{e}");
            assert!(e.contains(want), "{texts:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_folder_is_refused_as_perf_analyzer_refuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = read(&[dir.path().to_path_buf()]).unwrap_err().to_string();
        assert!(e.contains("failed to open file"), "{e}");
        std::fs::write(dir.path().join("payload"), "{}").unwrap();
        let e = read(&[dir.path().to_path_buf()]).unwrap_err().to_string();
        assert!(e.contains("input payload contains dynamic shape"), "{e}");
        std::fs::write(dir.path().join("INPUT0"), "x").unwrap();
        let e = read(&[dir.path().to_path_buf()]).unwrap_err().to_string();
        assert!(e.contains("Provided data file 'INPUT0' does not correspond to a valid model input or output."), "{e}");
    }
}
