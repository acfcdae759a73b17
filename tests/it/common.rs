//! Helpers shared by the integration tests. Every test binary compiles this module and each uses
//! only part of it, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Output, Stdio};

use shared_memory::{Shmem, ShmemConf};

/// Runs the perfbench binary from the crate root, where `scenarios/` lives.
pub fn perfbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs perfbench")
}

/// `perfbench serve ARGS` in its own process on free loopback ports; killed when dropped.
pub struct ServeProcess {
    child: Child,
    /// host:port of its HTTP endpoint.
    pub http: String,
    _stderr: BufReader<ChildStderr>,
}

impl ServeProcess {
    pub fn start(args: &[&str]) -> ServeProcess {
        ServeProcess::start_on("0", args)
    }

    /// The same with its HTTP front end on `http_port` ("0": a free one), e.g. to restart a
    /// server where its clients expect it.
    pub fn start_on(http_port: &str, args: &[&str]) -> ServeProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_perfbench"))
            .args(["serve", "--http-port", http_port, "--grpc-port", "0", "--metrics-port", "0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts perfbench serve");
        let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
        let mut line = String::new();
        stderr.read_line(&mut line).expect("serve says where it listens");
        // "perfbench serve: http on 127.0.0.1:PORT, grpc on ..."
        let http =
            line.split("http on ").nth(1).and_then(|rest| rest.split(',').next()).unwrap_or_default().to_string();
        assert!(!http.is_empty(), "perfbench serve {args:?}: {line}");
        ServeProcess { child, http, _stderr: stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
