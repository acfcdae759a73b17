//! A very large run (issue 21): 1,500 concurrent sequences over gRPC streaming against the bundled
//! `accumulate` model, fed by 300 `--input-data` files (one stream each), every answer validated.
//! It must end, fail nothing and keep the client's memory bounded. About 5 s on a busy 2-core box.

use std::path::Path;
use std::process::Command;

/// Concurrent sequences.
const SEQUENCES: usize = 1500;
/// `--input-data` files, one stream of [`STEPS`] steps each.
const FILES: usize = 300;
const STEPS: usize = 4;
/// Peak resident memory allowed to the perfbench process (client and bundled server): about 4×
/// what it takes (110-140 MB), so only unbounded growth fails it.
const MAX_RSS_KB: i64 = 512 * 1024;

/// One stream per file: INPUT0 = file index + step, with the running sums expected back.
fn write_streams(dir: &Path) -> Vec<String> {
    (0..FILES)
        .map(|f| {
            let values: Vec<i64> = (0..STEPS).map(|s| (f + s) as i64).collect();
            let mut sum = 0;
            let sums: Vec<i64> = values
                .iter()
                .map(|v| {
                    sum += v;
                    sum
                })
                .collect();
            let steps = |key: &str, xs: &[i64]| -> String {
                let items: Vec<String> = xs.iter().map(|x| format!("{{\"{key}\": [{x}]}}")).collect();
                format!("[{}]", items.join(", "))
            };
            let text = format!(
                "{{\"data\": [{}], \"validation_data\": [{}]}}",
                steps("INPUT0", &values),
                steps("OUTPUT0", &sums)
            );
            let path = dir.join(format!("stream{f:03}.json"));
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        })
        .collect()
}

/// The child's exit status, its peak resident set (KiB) and its stderr.
///
/// The peak is the child's own `VmHWM`, polled from `/proc` until it exits. `wait4`'s
/// `ru_maxrss` cannot be used: Linux carries the high-water mark across `execve`, so a child
/// spawned by a test binary that has grown to 500 MB reports 500 MB even for `/bin/true`.
fn run_measured(cmd: &mut Command) -> (i32, i64, String) {
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    // Drain stderr on its own thread so the child never blocks on a full pipe.
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut err).unwrap();
        err
    });
    let mut peak_kb = 0;
    let status = loop {
        if let Some(kb) = std::fs::read_to_string(&status_file).ok().as_deref().and_then(high_water_kb) {
            peak_kb = peak_kb.max(kb);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    (status.code().unwrap_or(-1), peak_kb, reader.join().unwrap())
}

/// `VmHWM` in KiB from a `/proc/PID/status` text (absent once the process is a zombie).
fn high_water_kb(status: &str) -> Option<i64> {
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn fifteen_hundred_streamed_sequences_from_300_files_fail_nothing_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_streams(dir.path());
    let csv = dir.path().join("pa.csv");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_perfbench"));
    cmd.args(["profile", "-m", "accumulate", "-i", "grpc", "--streaming", "--validate-outputs"]);
    cmd.args(["--concurrency-range", &SEQUENCES.to_string()]);
    cmd.args(["--measurement-mode", "count_windows", "--measurement-request-count", "3000", "-s", "100"]);
    cmd.args(["-f", csv.to_str().unwrap()]);
    for file in &files {
        cmd.args(["--input-data", file]);
    }
    let (code, max_rss_kb, err) = run_measured(&mut cmd);
    eprintln!("{SEQUENCES} sequences from {FILES} files: peak RSS {max_rss_kb} KiB");
    assert_eq!(code, 0, "{err}");
    assert!(max_rss_kb > 0 && max_rss_kb < MAX_RSS_KB, "peak RSS {max_rss_kb} KiB");
    let text = std::fs::read_to_string(&csv).unwrap();
    let row: Vec<&str> = text.lines().nth(1).expect("one row").split(',').collect();
    assert_eq!(row[0], SEQUENCES.to_string(), "{text}");
    assert!(row[1].parse::<f64>().unwrap() > 0.0, "{text}");
}
