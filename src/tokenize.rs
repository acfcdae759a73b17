//! Exact token counts: one tokenizer interface over OpenAI's BPE vocabularies (shipped inside
//! tiktoken-rs, nothing downloaded) and a local Hugging Face `tokenizer.json` (the `tokenizers`
//! crate). The server's generative twin counts `usage` with it; a client can count the same way.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The tokenizer the generative twin uses unless its config names another.
pub const DEFAULT_TOKENIZER: &str = "cl100k_base";

/// Why a tokenizer could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("tokenizer '{name}': {why}")]
pub struct TokenizerError {
    pub name: String,
    pub why: String,
}

#[derive(Clone)]
enum Inner {
    Tiktoken(&'static tiktoken_rs::CoreBPE),
    HuggingFace(Arc<tokenizers::Tokenizer>),
}

/// A tokenizer, cheap to clone and safe to share between threads.
#[derive(Clone)]
pub struct Tokenizer {
    name: String,
    inner: Inner,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("name", &self.name).finish()
    }
}

impl Tokenizer {
    /// `cl100k_base` or `o200k_base` (bundled), or a path to a `tokenizer.json` or to a
    /// directory holding one (a Hugging Face tokenizer directory).
    pub fn open(name: &str) -> Result<Tokenizer, TokenizerError> {
        let inner = match name {
            "cl100k_base" => Inner::Tiktoken(tiktoken_rs::cl100k_base_singleton()),
            "o200k_base" => Inner::Tiktoken(tiktoken_rs::o200k_base_singleton()),
            path => Inner::HuggingFace(Arc::new(open_json(Path::new(path))?)),
        };
        Ok(Tokenizer { name: name.to_string(), inner })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Token ids of `text`, with no special tokens added.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match &self.inner {
            Inner::Tiktoken(bpe) => bpe.encode_ordinary(text),
            // Encoding plain text with no special tokens added cannot fail for a loaded tokenizer;
            // an error would be a bug in its model, counted as no tokens rather than a crash.
            Inner::HuggingFace(t) => t.encode(text, false).map(|e| e.get_ids().to_vec()).unwrap_or_default(),
        }
    }

    /// How many tokens `text` is.
    pub fn count(&self, text: &str) -> usize {
        self.encode(text).len()
    }

    /// The text of token ids (bytes that end mid-character read as U+FFFD); `Err` holds the
    /// first id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, u32> {
        match &self.inner {
            Inner::Tiktoken(bpe) => {
                bpe.decode_bytes(ids).map(|b| String::from_utf8_lossy(&b).into_owned()).map_err(|e| e.token)
            }
            Inner::HuggingFace(t) => {
                if let Some(&unknown) = ids.iter().find(|&&id| t.id_to_token(id).is_none()) {
                    return Err(unknown);
                }
                // Every id is known, so decoding cannot fail but for a bug in its decoder.
                Ok(t.decode(ids, false).unwrap_or_default())
            }
        }
    }

    /// One token's vocabulary entry, as Hugging Face's `convert_ids_to_tokens` shows it (a
    /// BPE piece's bytes read lossily); `None` outside the vocabulary.
    pub fn token_str(&self, id: u32) -> Option<String> {
        match &self.inner {
            Inner::Tiktoken(bpe) => bpe.decode_bytes(&[id]).ok().map(|b| String::from_utf8_lossy(&b).into_owned()),
            Inner::HuggingFace(t) => t.id_to_token(id),
        }
    }
}

fn open_json(path: &Path) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let file: PathBuf = if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() };
    let error = |why: String| TokenizerError { name: path.display().to_string(), why };
    if !file.is_file() {
        return Err(error(
            "not a bundled vocabulary (cl100k_base, o200k_base) nor a tokenizer.json or a directory holding one".into(),
        ));
    }
    tokenizers::Tokenizer::from_file(&file).map_err(|e| error(format!("cannot read {}: {e}", file.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_vocabularies_count_known_texts() {
        let t = Tokenizer::open("cl100k_base").unwrap();
        // "hello world" is two tokens in cl100k_base, as OpenAI's tokenizer page shows.
        assert_eq!(t.count("hello world"), 2);
        assert_eq!(t.count(""), 0);
        let o = Tokenizer::open("o200k_base").unwrap();
        assert_eq!(o.count("hello world"), 2);
    }

    #[test]
    fn a_missing_file_is_named_in_the_error() {
        let e = Tokenizer::open("/nonexistent/tok").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/tok"), "{e}");
    }

    #[test]
    fn a_hugging_face_tokenizer_json_is_read() {
        // A word-level tokenizer: whitespace-split words, unknown words map to [UNK].
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"a":1,"b":2},"unk_token":"[UNK]"}}"#;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), json).unwrap();
        let t = Tokenizer::open(dir.path().to_str().unwrap()).unwrap();
        assert_eq!(t.encode("a b zz a"), [1, 2, 0, 1]);
        assert_eq!(t.token_str(2).as_deref(), Some("b"));
        assert_eq!(t.decode(&[1, 9]), Err(9));
    }

    #[test]
    fn decode_inverts_encode_and_names_an_unknown_id() {
        let t = Tokenizer::open("cl100k_base").unwrap();
        let text = "Tokens, then text again: caf\u{e9} \u{1f600}!";
        let ids = t.encode(text);
        assert_eq!(t.decode(&ids).unwrap(), text);
        let pieces: String = ids.iter().map(|&id| t.token_str(id).unwrap()).collect();
        assert!(pieces.starts_with("Tokens, then"), "{pieces}");
        assert_eq!(t.decode(&[ids[0], u32::MAX]), Err(u32::MAX));
        assert_eq!(t.token_str(u32::MAX), None);
    }
}
