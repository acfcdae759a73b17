//! The seeds' results tables as reference data: each CSV under `reference-results/seeds/`,
//! rendered back through `report.md`'s table renderer, is the table the seed printed — checked
//! against the committed original (`.md` beside each CSV) and, where the seed reports are
//! present (`../shared/seeds`), against the seed files themselves.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use perfbench::report::{read_table, seeds, table, TableKind};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn reference_csvs() -> Vec<PathBuf> {
    let root = repo().join("reference-results/seeds");
    let mut csvs = Vec::new();
    for seed_dir in std::fs::read_dir(&root).expect("reference-results/seeds exists") {
        let seed_dir = seed_dir.unwrap().path();
        if !seed_dir.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(&seed_dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "csv") {
                csvs.push(path);
            }
        }
    }
    csvs.sort();
    csvs
}

/// The seed reports, when this checkout sits beside them (main checkout or a worktree).
fn shared_seeds() -> Option<PathBuf> {
    let candidates = [repo().join("../shared/seeds"), repo().join("../../shared/seeds")];
    candidates.into_iter().find(|p| p.is_dir())
}

#[test]
fn there_are_52_offline_and_24_online_tables() {
    let mut offline = 0;
    let mut online = 0;
    for csv in reference_csvs() {
        let (rows, meta) = read_table(&csv).unwrap_or_else(|e| panic!("{}: {e}", csv.display()));
        assert!(!rows.is_empty(), "{}", csv.display());
        match meta.kind {
            TableKind::Offline => offline += 1,
            TableKind::Online => online += 1,
        }
    }
    assert_eq!((offline, online), (52, 24));
}

/// Renders every reference CSV and compares with `expected(csv)`; reports all mismatches.
fn check_all(expected: impl Fn(&Path) -> Option<String>) -> usize {
    let mut failures = Vec::new();
    let mut checked = 0;
    for csv in reference_csvs() {
        let Some(want) = expected(&csv) else { continue };
        let (rows, meta) = read_table(&csv).unwrap();
        let got = table::render_results(&rows, &meta.layout);
        checked += 1;
        if got != want {
            let line = got.lines().zip(want.lines()).position(|(g, w)| g != w).unwrap_or(0);
            failures.push(format!(
                "{}: line {}\n  got:  {:?}\n  want: {:?}",
                csv.display(),
                line + 1,
                got.lines().nth(line).unwrap_or(""),
                want.lines().nth(line).unwrap_or("")
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {checked} tables differ:\n{}", failures.len(), failures.join("\n"));
    checked
}

#[test]
fn every_table_renders_back_to_the_committed_original() {
    let checked = check_all(|csv| {
        Some(std::fs::read_to_string(csv.with_extension("md")).expect("original table beside the CSV"))
    });
    assert_eq!(checked, 76);
}

#[test]
fn every_table_renders_back_to_the_seed_report_itself() {
    let Some(seeds_dir) = shared_seeds() else {
        eprintln!("seed reports not found beside the checkout; the committed originals are checked instead");
        return;
    };
    // (seed file, header line) → the table as the seed prints it, found afresh by the parser.
    let mut printed: HashMap<(String, usize), seeds::SeedTable> = HashMap::new();
    for entry in std::fs::read_dir(&seeds_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txt") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            for t in seeds::parse_seed(&name, &std::fs::read_to_string(&path).unwrap()).unwrap() {
                printed.insert((t.seed_file.clone(), t.line), t);
            }
        }
    }
    assert_eq!(printed.len(), 76, "the seeds hold 76 results tables");
    let checked = check_all(|csv| {
        let (_, meta) = read_table(csv).unwrap();
        let source = meta.source.expect("seed CSVs name their source");
        let table = printed
            .get(&(source.file.clone(), source.line))
            .unwrap_or_else(|| panic!("{}: no results table at {}:{}", csv.display(), source.file, source.line));
        // The committed values are the seed's values, exactly as printed.
        assert_eq!(std::fs::read_to_string(csv).unwrap(), table.csv(), "{}", csv.display());
        Some(table.markdown.clone())
    });
    assert_eq!(checked, 76);
}

#[test]
fn perfbench_report_rerenders_a_seed_table_in_its_own_layout() {
    let csv = reference_csvs().into_iter().find(|p| p.to_string_lossy().contains("003-")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(["report", csv.to_str().unwrap(), "--out", out.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    let original = std::fs::read_to_string(csv.with_extension("md")).unwrap();
    assert!(md.contains(&original), "report.md lacks the seed's table:\n{md}");
    assert!(md.contains("| GPU "), "{md}");
    assert!(out.path().join("plots/latency_vs_batch.png").is_file());
    // The re-written report.csv is µs and renders the same table again.
    let (rows, meta) = read_table(&out.path().join("report.csv")).unwrap();
    assert_eq!(table::render_results(&rows, &meta.layout), original);
}

#[test]
fn perfbench_report_on_a_bad_file_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "Concurrency,Inferences/Second\n1,fast\n").unwrap();
    for file in [bad.to_str().unwrap(), "/nonexistent/perf.csv"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_perfbench")).args(["report", file]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{file}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
}
