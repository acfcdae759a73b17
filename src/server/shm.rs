//! The system shared-memory extension on the server side: a registry of client-created POSIX
//! regions (KSERVE_V2.md §3.10, §10). Regions stay open while any request holds an `Arc`.
//!
//! A region is accessed with `pread`/`pwrite` on its descriptor, not through a mapping: the
//! client owns the object and may shrink it at any time, and touching a mapped page past the new
//! end would kill the server with SIGBUS. A positioned read of a shrunk object just comes up
//! short, which becomes a client error.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use parking_lot::Mutex;

use super::error::{ServerError, ServerResult};

/// One registered region: `byte_size` bytes starting at `offset` inside the POSIX object `key`.
pub struct Region {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
    file: File,
}

impl Region {
    /// Checks `offset..offset+len` (relative to the region start) against the region and returns
    /// the absolute position in the object.
    fn window(&self, offset: u64, len: u64) -> ServerResult<u64> {
        match offset.checked_add(len) {
            Some(end) if end <= self.byte_size => Ok(self.offset + offset),
            _ => Err(ServerError::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{}'",
                self.name
            ))),
        }
    }

    /// Validates an access without touching memory (used when a request is admitted).
    pub fn check(&self, offset: u64, len: u64) -> ServerResult<()> {
        self.window(offset, len).map(|_| ())
    }

    fn shrunk(&self, e: std::io::Error) -> ServerError {
        ServerError::invalid_arg(format!(
            "shared memory region '{}' (object '{}') cannot be accessed as registered, it may have shrunk: {e}",
            self.name, self.key
        ))
    }

    /// Copies `dst.len()` bytes from the region at `offset`.
    pub fn read_into(&self, offset: u64, dst: &mut [u8]) -> ServerResult<()> {
        let at = self.window(offset, dst.len() as u64)?;
        self.file.read_exact_at(dst, at).map_err(|e| self.shrunk(e))
    }

    /// Copies `src` into the region at `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> ServerResult<()> {
        let at = self.window(offset, src.len() as u64)?;
        // Writing past the end would grow the client's object: refuse instead.
        let size = self.file.metadata().map_err(|e| self.shrunk(e))?.len();
        if at + src.len() as u64 > size {
            return Err(self.shrunk(std::io::Error::other(format!("the object now has {size} bytes"))));
        }
        self.file.write_all_at(src, at).map_err(|e| self.shrunk(e))
    }
}

/// Opens the POSIX shared-memory object `key` for reading and writing.
fn open_object(key: &str) -> std::io::Result<File> {
    let c_key = CString::new(key).map_err(|_| std::io::Error::other("the key holds a NUL byte"))?;
    // SAFETY: shm_open only reads the NUL-terminated name; a non-negative result is a new
    // descriptor that we own from here on.
    let fd = unsafe { libc::shm_open(c_key.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is open and owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Registered system shared-memory regions, by name, spanning at most `limit` bytes together.
pub struct SharedMemoryManager {
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
    limit: u64,
    /// Successful registrations since start (clients that re-register per point show here).
    registrations: std::sync::atomic::AtomicU64,
}

impl Default for SharedMemoryManager {
    fn default() -> Self {
        Self::with_limit(u64::MAX)
    }
}

impl SharedMemoryManager {
    pub fn with_limit(limit: u64) -> Self {
        SharedMemoryManager { regions: Mutex::new(BTreeMap::new()), limit, registrations: Default::default() }
    }

    /// Registers a region only if the object exists, can be opened for reading and writing, and
    /// holds `offset + byte_size` bytes, and if the total stays within the limit.
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> ServerResult<()> {
        if name.is_empty() || key.is_empty() {
            return Err(ServerError::invalid_arg("shared memory region needs a name and a key"));
        }
        let mut regions = self.regions.lock();
        if regions.contains_key(name) {
            return Err(ServerError::already_exists(format!("shared memory region '{name}' already in manager")));
        }
        let file = open_object(key)
            .map_err(|e| ServerError::invalid_arg(format!("Unable to open shared memory region: '{key}': {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| ServerError::invalid_arg(format!("Unable to open shared memory region: '{key}': {e}")))?
            .len();
        if offset.checked_add(byte_size).is_none_or(|end| end > len) {
            return Err(ServerError::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{name}' ({byte_size} bytes at offset {offset} exceed the {len}-byte object '{key}')"
            )));
        }
        let registered: u64 = regions.values().map(|r| r.byte_size).sum();
        if registered.saturating_add(byte_size) > self.limit {
            return Err(ServerError::exhausted(format!(
                "registering '{name}' ({byte_size} bytes) would exceed the server's limit of {} bytes of registered shared memory ({registered} in use, --max-shm-bytes)",
                self.limit
            )));
        }
        let region = Region { name: name.into(), key: key.into(), offset, byte_size, file };
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
            .ok_or_else(|| ServerError::invalid_arg(format!("Unable to find system shared memory region: '{name}'")))
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
    use shared_memory::ShmemConf;

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

    #[test]
    fn total_registered_size_is_limited() {
        let key = format!("/pb_test_limit_{}", std::process::id());
        let _owner = ShmemConf::new().os_id(&key).size(64).create().unwrap();
        let mgr = SharedMemoryManager::with_limit(100);
        mgr.register("a", &key, 0, 64).unwrap();
        let e = mgr.register("b", &key, 0, 64).unwrap_err();
        assert_eq!(e.kind, super::super::ErrorKind::Exhausted, "{e}");
        assert!(e.message.contains("--max-shm-bytes"), "{e}");
        mgr.register("c", &key, 0, 36).unwrap();
        mgr.unregister("a");
        mgr.register("b", &key, 0, 64).unwrap();
    }

    #[test]
    fn a_shrunk_object_is_a_client_error_not_a_crash() {
        let key = format!("/pb_test_shrink_{}", std::process::id());
        let owner = ShmemConf::new().os_id(&key).size(4096).create().unwrap();
        let mgr = SharedMemoryManager::default();
        mgr.register("r", &key, 0, 4096).unwrap();
        let c_key = CString::new(key.as_str()).unwrap();
        // SAFETY: plain libc calls on an object this test owns.
        unsafe {
            let fd = libc::shm_open(c_key.as_ptr(), libc::O_RDWR, 0);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, 16), 0);
            libc::close(fd);
        }
        let r = mgr.get("r").unwrap();
        let mut buf = vec![0u8; 4096];
        let e = r.read_into(0, &mut buf).unwrap_err();
        assert!(e.message.contains("shrunk"), "{e}");
        let e = r.write(100, &[1; 8]).unwrap_err();
        assert!(e.message.contains("shrunk"), "{e}");
        r.write(0, &[1; 8]).unwrap();
        drop(owner);
    }
}
