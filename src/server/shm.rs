//! The system shared-memory extension on the server side: a registry of client-created POSIX
//! regions (KSERVE_V2.md §3.10, §10). Regions stay mapped while any request holds an `Arc`.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use shared_memory::{Shmem, ShmemConf};

use super::error::{ServerError, ServerResult};

/// One registered region: `byte_size` bytes starting at `offset` inside the POSIX object `key`.
pub struct Region {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    mapping: Shmem,
}

// SAFETY: the mapping is plain process memory. We only copy bytes in and out through raw
// pointers, bounds-checked against the registered window; the client owns synchronisation of the
// contents, exactly as with Triton.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// Checks `offset..offset+len` (relative to the region start) against the region.
    fn window(&self, offset: u64, len: u64) -> ServerResult<usize> {
        match offset.checked_add(len) {
            Some(end) if end <= self.byte_size => Ok((self.offset + offset) as usize),
            _ => Err(ServerError::invalid(format!(
                "Invalid offset + byte size for shared memory region: '{}'",
                self.name
            ))),
        }
    }

    /// Validates an access without touching memory (used when a request is admitted).
    pub fn check(&self, offset: u64, len: u64) -> ServerResult<()> {
        self.window(offset, len).map(|_| ())
    }

    /// Copies `dst.len()` bytes from the region at `offset`.
    pub fn read_into(&self, offset: u64, dst: &mut [u8]) -> ServerResult<()> {
        let start = self.window(offset, dst.len() as u64)?;
        // SAFETY: `window` proved start..start+len lies inside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(self.mapping.as_ptr().add(start), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the region at `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> ServerResult<()> {
        let start = self.window(offset, src.len() as u64)?;
        // SAFETY: as in `read_into`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.mapping.as_ptr().add(start), src.len()) };
        Ok(())
    }
}

/// Registered system shared-memory regions, by name.
#[derive(Default)]
pub struct SharedMemoryManager {
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
    /// Successful registrations since start (clients that re-register per point show here).
    registrations: std::sync::atomic::AtomicU64,
}

impl SharedMemoryManager {
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> ServerResult<()> {
        if name.is_empty() || key.is_empty() {
            return Err(ServerError::invalid("shared memory region needs a name and a key"));
        }
        let mut regions = self.regions.lock();
        if regions.contains_key(name) {
            return Err(ServerError::already_exists(format!("shared memory region '{name}' already in manager")));
        }
        let mapping = ShmemConf::new()
            .os_id(key)
            .open()
            .map_err(|e| ServerError::invalid(format!("Unable to open shared memory region: '{key}': {e}")))?;
        let end = offset.checked_add(byte_size);
        if end.is_none_or(|end| end > mapping.len() as u64) {
            return Err(ServerError::invalid(format!(
                "Invalid offset + byte size for shared memory region: '{name}' ({} bytes at offset {offset} exceed the {}-byte object '{key}')",
                byte_size,
                mapping.len()
            )));
        }
        let region = Region { name: name.into(), key: key.into(), offset, byte_size, mapping };
        regions.insert(name.to_string(), Arc::new(region));
        self.registrations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// How many regions were registered since the server started.
    pub fn registrations(&self) -> u64 {
        self.registrations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Unregisters one region, or all with an empty name. Unknown names are not an error.
    pub fn unregister(&self, name: &str) {
        let mut regions = self.regions.lock();
        if name.is_empty() {
            regions.clear();
        } else {
            regions.remove(name);
        }
    }

    pub fn get(&self, name: &str) -> ServerResult<Arc<Region>> {
        self.regions
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| ServerError::invalid(format!("Unable to find system shared memory region: '{name}'")))
    }

    /// Status of one region (an error if unknown) or of all with an empty name.
    pub fn status(&self, name: &str) -> ServerResult<Vec<Arc<Region>>> {
        if name.is_empty() {
            Ok(self.regions.lock().values().cloned().collect())
        } else {
            Ok(vec![self.get(name)?])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_read_write_and_bounds() {
        let key = format!("/pb_test_{}", std::process::id());
        let owner = ShmemConf::new().os_id(&key).size(64).create().unwrap();
        let mgr = SharedMemoryManager::default();
        mgr.register("r", &key, 8, 32).unwrap();
        let dup = mgr.register("r", &key, 0, 8).unwrap_err();
        assert!(dup.message.contains("already in manager"));
        let r = mgr.get("r").unwrap();
        r.write(0, &[1, 2, 3]).unwrap();
        // SAFETY: test owns the mapping; reading back what was written at region offset 8.
        let raw = unsafe { std::slice::from_raw_parts(owner.as_ptr(), 16) };
        assert_eq!(&raw[8..11], &[1, 2, 3]);
        let mut back = [0u8; 3];
        r.read_into(0, &mut back).unwrap();
        assert_eq!(back, [1, 2, 3]);
        assert!(r.check(30, 4).is_err());
        assert!(r.check(u64::MAX, 2).is_err());
        assert!(mgr.register("big", &key, 60, 8).is_err());
        assert!(mgr.register("nokey", "/pb_does_not_exist_x", 0, 8).is_err());
        mgr.unregister("r");
        assert!(mgr.get("r").is_err());
        mgr.unregister("");
    }
}
