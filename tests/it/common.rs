//! Helpers shared by the integration tests. Every test binary compiles this module and each uses
//! only part of it, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::process::{Command, Output};

use shared_memory::{Shmem, ShmemConf};

/// Runs the perfbench binary from the crate root, where `scenarios/` lives.
pub fn perfbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs perfbench")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

/// Asserts a failed run: exit `code`, one line on stderr containing `needle`.
pub fn assert_fails(args: &[&str], code: i32, needle: &str) {
    let out = perfbench(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "perfbench {args:?}\nstderr: {err}");
    assert_eq!(err.lines().count(), 1, "perfbench {args:?}: one line expected, got:\n{err}");
    assert!(err.contains(needle), "perfbench {args:?}: expected '{needle}' in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A client-created POSIX shared-memory object, removed on drop.
pub struct Region {
    pub key: String,
    shmem: Shmem,
}

impl Region {
    /// The key names the test binary and the process, so concurrent runs never share an object.
    pub fn new(tag: &str, size: usize) -> Region {
        let key = format!("/pb_{}_{tag}_{}", env!("CARGO_CRATE_NAME"), std::process::id());
        let shmem = ShmemConf::new().os_id(&key).size(size).create().expect("create shm");
        Region { key, shmem }
    }

    pub fn write(&self, offset: usize, data: &[u8]) {
        // SAFETY: the test owns the mapping and stays within its size.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.shmem.as_ptr().add(offset), data.len()) };
    }

    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        // SAFETY: as in `write`.
        unsafe { std::slice::from_raw_parts(self.shmem.as_ptr().add(offset), len).to_vec() }
    }
}
