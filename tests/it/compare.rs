//! `perfbench compare` and `report.html`: a delay model slowed from 2 ms to 3 ms is marked as a
//! failing regression (exit 1), two identical runs pass (exit 0), seed tables compare too, and
//! every page is self-contained with its plots inline.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::perfbench;

/// An online sweep at concurrency 1 over a delay model taking `delay_us` per execution; three
/// short count windows at most, so a run takes seconds.
fn scenario(delay_us: u64) -> String {
    format!(
        r#"
name = "compare_probe"
[model]
name = "compare_probe"
config = """
backend: "delay"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
parameters {{ key: "delay_us" value {{ string_value: "{delay_us}" }} }}
"""
[online]
batch = 1
concurrency = "1"
measurement_request_count = 40
warmup_request_count = 3
max_trials = 3
stability_percentage = 100.0
"#
    )
}

/// Starts `perfbench run` of the scenario into `dir/name` (the runs go in parallel).
fn start_run(dir: &Path, name: &str, delay_us: u64) -> std::process::Child {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, scenario(delay_us)).unwrap();
    Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(["run", &file.display().to_string(), "--out", &dir.join(name).display().to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs perfbench")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A page perfbench wrote: no address a browser would fetch, every plot inline with hover values.
fn assert_self_contained(html: &str, plots: usize) {
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..200.min(html.len())]);
    assert_eq!(html.matches("<svg").count(), plots, "inline plots");
    assert!(html.matches("<title>").count() > plots, "hover titles expected");
    for fetch in [" src=", " href=", "url(", "@import"] {
        assert!(!html.contains(fetch), "{fetch} in a self-contained page");
    }
    assert!(html.contains("<table id=\"") && html.contains("class=\"sortable\""), "sortable table");
}

#[test]
fn slower_delay_fails_identical_runs_pass() {
    let dir = tempfile::tempdir().unwrap();
    let mut fast = start_run(dir.path(), "fast", 2000);
    let mut slow = start_run(dir.path(), "slow", 3000);
    for (name, child) in [("fast", &mut fast), ("slow", &mut slow)] {
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(status.success(), "{name}: {err}");
    }
    let fast_dir = dir.path().join("fast");
    // Every results folder has its page.
    let report = std::fs::read_to_string(fast_dir.join("online/report.html")).unwrap();
    assert_self_contained(&report, 1);
    assert!(report.contains("<h2>Configuration</h2>") && report.contains("<td>compare_probe</td>"), "{report}");

    // An identical copy of the run: nothing changed, so it passes.
    let copy = dir.path().join("copy/online");
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["report.csv", "report.toml"] {
        std::fs::copy(fast_dir.join("online").join(f), copy.join(f)).unwrap();
    }
    let p = |p: &Path| p.display().to_string();
    let same_out = dir.path().join("same");
    let same = perfbench(&["compare", &p(&fast_dir), &p(&dir.path().join("copy")), "--out", &p(&same_out)]);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same));
    let md = std::fs::read_to_string(same_out.join("compare.md")).unwrap();
    assert!(md.contains("| pass ") && !md.contains("FAIL"), "{md}");

    // 2 ms → 3 ms: throughput −33%, avg latency +50%, far beyond the allowance and the noise.
    // p99 of 120 requests is too few samples to gate on a busy box: only the others have teeth.
    let slow_out = dir.path().join("slower");
    let slower = perfbench(&[
        "compare",
        &p(&fast_dir),
        &p(&dir.path().join("slow")),
        "--out",
        &p(&slow_out),
        "--max-p99-rise",
        "400",
    ]);
    assert_eq!(slower.status.code(), Some(1), "{}", text(&slower));
    let md = std::fs::read_to_string(slow_out.join("compare.md")).unwrap();
    let row = md.lines().find(|l| l.starts_with("| 2: slow ")).unwrap_or_else(|| panic!("{md}"));
    assert!(row.contains("REGRESSION") && row.trim_end().ends_with("| FAIL      |"), "{row}");
    let html = std::fs::read_to_string(slow_out.join("compare.html")).unwrap();
    assert_self_contained(&html, 3);
    assert!(html.contains("<tr class=\"fail\">"), "failing row marked");
    for plot in ["online_throughput", "online_p99_vs_throughput", "online_stages"] {
        assert!(slow_out.join("plots").join(format!("{plot}.png")).is_file(), "{plot}");
        assert!(html.contains(&format!("id=\"plot-{plot}\"")), "{plot}");
    }
}

#[test]
fn seed_tables_compare_and_render_as_pages() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("reference-results/seeds/000-bert");
    let a30 = seeds.join("offline-01-nvidia-a30-onnx-runtime-with-fp16.csv");
    let a100 = seeds.join("offline-09-nvidia-dgx-a100-1x-a100-80gb-onnx-runtime-with-fp16.csv");
    let out = dir.path().join("cmp");
    let p = |p: &Path| p.display().to_string();
    let cmp = perfbench(&["compare", &p(&a30), &p(&a100), "--out", &p(&out)]);
    // The A100 is faster at batch 8 and 16 (+64%, +89%) but slower at batch 1 (679 vs 830
    // infer/s, -18%). A seed records no spread or interval, so the gate's rule cannot tell that
    // drop from noise: within noise, and the comparison passes.
    assert_eq!(cmp.status.code(), Some(0), "{}", text(&cmp));
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap();
    let row = |batch: &str| {
        md.lines().find(|l| l.contains(&format!("| batch {batch}, concurrency 1 "))).unwrap_or_else(|| panic!("{md}"))
    };
    assert!(row("1").contains("830.0 → 679.0 (-18.2%, within noise)"), "{md}");
    assert!(row("16").contains("improved") && row("16").contains("| pass "), "{md}");
    assert_self_contained(&std::fs::read_to_string(out.join("compare.html")).unwrap(), 3);

    let page = dir.path().join("page");
    let html = perfbench(&["report", &p(&a30), "--html", "--out", &p(&page)]);
    assert!(html.status.success(), "{}", text(&html));
    let report = std::fs::read_to_string(page.join("report.html")).unwrap();
    assert_self_contained(&report, 3);
    assert!(report.contains("Seed table: 000_"), "the seed's source line");
    assert!(report.contains("<th data-type=\"num\">Inferences&#x2f;Second</th>"), "{report}");

    let missing = perfbench(&["compare", &p(&a30), &p(&dir.path().join("nope"))]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
}
