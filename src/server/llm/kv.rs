//! The KV cache's block accounting, with a prefix cache keyed by block hash (as vLLM's
//! automatic prefix caching): a full prompt block is identified by the hash of its tokens and
//! of every block before it, so two prompts share a block only when they share everything up to
//! its end. Blocks hold no data here; only who holds how many matters to the scheduler.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

/// Chained hashes of a prompt's full blocks: block i's hash covers blocks 0..=i.
pub fn block_hashes(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut parent = 0u64;
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            parent.hash(&mut h);
            block.hash(&mut h);
            parent = h.finish();
            parent
        })
        .collect()
}

struct Cached {
    refs: u32,
    /// When it was last released (for LRU eviction once unreferenced).
    released: u64,
}

/// What one sequence holds in the cache.
#[derive(Debug, Default)]
pub struct Holding {
    /// Shared, hashed prompt blocks, in prompt order.
    pub shared: Vec<u64>,
    /// Blocks only this sequence uses.
    pub private: usize,
}

impl Holding {
    pub fn blocks(&self) -> usize {
        self.shared.len() + self.private
    }
}

pub struct KvCache {
    pub block_size: usize,
    pub capacity: usize,
    private_used: usize,
    cached: HashMap<u64, Cached>,
    /// Unreferenced cached blocks by release tick: the first is evicted first.
    evictable: BTreeMap<u64, u64>,
    tick: u64,
}

impl KvCache {
    pub fn new(block_size: usize, capacity: usize) -> KvCache {
        KvCache { block_size, capacity, private_used: 0, cached: HashMap::new(), evictable: BTreeMap::new(), tick: 0 }
    }

    /// Blocks held by running sequences (unreferenced cached blocks count as free).
    pub fn used(&self) -> usize {
        self.private_used + self.cached.len() - self.evictable.len()
    }

    pub fn free(&self) -> usize {
        self.capacity - self.used()
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// How many leading blocks of `hashes` are cached.
    pub fn leading_hits(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.cached.contains_key(h)).count()
    }

    /// Takes a reference on each of the first `hits` blocks of `hashes` (from
    /// [`leading_hits`](Self::leading_hits)) for a sequence being admitted.
    pub fn share(&mut self, holding: &mut Holding, hashes: &[u64], hits: usize) {
        for &h in &hashes[..hits] {
            let block = self.cached.get_mut(&h).expect("a leading hit is cached");
            if block.refs == 0 {
                self.evictable.remove(&block.released);
            }
            block.refs += 1;
            holding.shared.push(h);
        }
    }

    /// Grows `holding` to `blocks` blocks; false (and nothing taken) when the cache is full.
    pub fn grow(&mut self, holding: &mut Holding, blocks: usize) -> bool {
        let more = blocks.saturating_sub(holding.blocks());
        if more > self.free() {
            return false;
        }
        for _ in 0..more {
            if self.private_used + self.cached.len() == self.capacity {
                self.evict_one();
            }
            self.private_used += 1;
        }
        holding.private += more;
        true
    }

    fn evict_one(&mut self) {
        if let Some((_, h)) = self.evictable.pop_first() {
            self.cached.remove(&h);
        }
    }

    /// Publishes the sequence's next full prompt block (hash `h`) to the prefix cache: one of its
    /// private blocks becomes shared. A block another sequence already published stays private.
    pub fn publish(&mut self, holding: &mut Holding, h: u64) -> bool {
        if holding.private == 0 || self.cached.contains_key(&h) {
            return false;
        }
        holding.private -= 1;
        self.private_used -= 1;
        self.cached.insert(h, Cached { refs: 1, released: 0 });
        holding.shared.push(h);
        true
    }

    /// Gives back everything a sequence holds; its shared blocks stay cached until evicted.
    pub fn release(&mut self, holding: &mut Holding) {
        for h in holding.shared.drain(..) {
            if let Some(block) = self.cached.get_mut(&h) {
                block.refs -= 1;
                if block.refs == 0 {
                    self.tick += 1;
                    block.released = self.tick;
                    self.evictable.insert(self.tick, h);
                }
            }
        }
        self.private_used -= holding.private;
        holding.private = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_chain_so_only_shared_prefixes_match() {
        let a = block_hashes(&[1, 2, 3, 4, 5], 2);
        let b = block_hashes(&[1, 2, 9, 4, 5], 2);
        assert_eq!(a.len(), 2, "a partial last block has no hash");
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
    }

    #[test]
    fn blocks_are_taken_released_and_reused_by_a_later_prompt() {
        let mut kv = KvCache::new(4, 10);
        let hashes = block_hashes(&(0..12).collect::<Vec<_>>(), 4);
        let mut first = Holding::default();
        assert!(kv.grow(&mut first, 3));
        for &h in &hashes {
            assert!(kv.publish(&mut first, h));
        }
        assert_eq!(kv.used(), 3);
        kv.release(&mut first);
        assert_eq!(kv.used(), 0, "cached but unreferenced blocks count as free");
        let mut second = Holding::default();
        assert_eq!(kv.leading_hits(&hashes), 3);
        kv.share(&mut second, &hashes, 3);
        assert_eq!(kv.used(), 3);
        assert!(!kv.grow(&mut second, 11), "more than the capacity is refused whole");
        assert!(kv.grow(&mut second, 10));
        assert_eq!(kv.free(), 0);
        kv.release(&mut second);
        assert_eq!(kv.free(), 10);
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_released_block() {
        let mut kv = KvCache::new(1, 2);
        let mut a = Holding::default();
        assert!(kv.grow(&mut a, 2));
        assert!(kv.publish(&mut a, 11));
        assert!(kv.publish(&mut a, 22));
        kv.release(&mut a);
        let mut b = Holding::default();
        assert!(kv.grow(&mut b, 1));
        assert_eq!(kv.leading_hits(&[11]), 0, "the older release was evicted");
        assert_eq!(kv.leading_hits(&[22]), 1);
    }
}
