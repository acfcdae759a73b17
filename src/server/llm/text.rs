//! What the generative twin says: words of a bundled corpus, in order, from a seeded starting
//! point. Only words that are one token (with their leading space) under the model's tokenizer
//! are kept, and the whole corpus is checked to split word by word, so N generated pieces are
//! exactly N tokens when a client tokenizes the text again.

use rand::Rng;

use crate::server::error::{ServerError, ServerResult};
use crate::tokenize::Tokenizer;

const CORPUS: &str = include_str!("corpus.txt");

/// Fewest one-token words a tokenizer must leave, so the text does not repeat every few words.
const MIN_PIECES: usize = 32;

pub struct TextSource {
    pieces: Vec<String>,
}

impl TextSource {
    pub fn new(tokenizer: &Tokenizer) -> ServerResult<TextSource> {
        let pieces: Vec<String> =
            CORPUS.split_whitespace().map(|w| format!(" {w}")).filter(|p| tokenizer.count(p) == 1).collect();
        let whole: String = pieces.concat();
        // The wrap from the last piece to the first must split the same way as the rest.
        let wrapped = format!("{whole}{}", pieces.first().map_or("", String::as_str));
        if pieces.len() < MIN_PIECES || tokenizer.count(&wrapped) != pieces.len() + 1 {
            return Err(ServerError::invalid_arg(format!(
                "tokenizer '{}' does not split the bundled corpus into one token per word ({} of {} words are one token)",
                tokenizer.name(),
                pieces.len(),
                CORPUS.split_whitespace().count()
            )));
        }
        Ok(TextSource { pieces })
    }

    /// Where a request's text starts.
    pub fn start(&self, rng: &mut impl Rng) -> usize {
        rng.random_range(0..self.pieces.len())
    }

    /// The `n`th piece after `start` (the text wraps around the corpus).
    pub fn piece(&self, start: usize, n: usize) -> &str {
        &self.pieces[(start + n) % self.pieces.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn any_run_of_pieces_is_exactly_that_many_tokens() {
        let tokenizer = Tokenizer::open("cl100k_base").unwrap();
        let text = TextSource::new(&tokenizer).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for len in [1, 2, 17, 300, 1000] {
            let start = text.start(&mut rng);
            let s: String = (0..len).map(|i| text.piece(start, i)).collect();
            assert_eq!(tokenizer.count(&s), len, "{s}");
        }
    }
}
