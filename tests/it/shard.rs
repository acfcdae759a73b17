//! Load from many processes (`--shard K/N`) merged by `perfbench merge`: the merged folder is
//! what one process writes, its numbers agree with one process's, the server counts what the
//! shards count, and shards that do not belong together are refused with one line.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::common::{assert_fails, perfbench, stderr, ServeProcess};

/// `perfbench serve` on free loopback ports, serving the delay model; killed when dropped.
fn serve() -> ServeProcess {
    serve_on("0")
}

/// `perfbench serve` with its HTTP front end on `http_port` (0: a free one).
fn serve_on(http_port: &str) -> ServeProcess {
    ServeProcess::start_on(http_port, &["--models", "delay"])
}

/// The delay model's successful request count, from the statistics extension.
fn server_successes(http: &str) -> u64 {
    model_successes(http, "delay")
}

/// A model's successful request count, from the statistics extension.
fn model_successes(http: &str, model: &str) -> u64 {
    let mut socket = std::net::TcpStream::connect(http).expect("connects");
    write!(socket, "GET /v2/models/{model}/stats HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n").unwrap();
    let mut reply = String::new();
    socket.read_to_string(&mut reply).unwrap();
    let body = reply.split_once("\r\n\r\n").expect("a body").1;
    let stats: serde_json::Value = serde_json::from_str(body).expect(body);
    stats["model_stats"][0]["inference_stats"]["success"]["count"].as_u64().expect(body)
}

/// Runs `args` as shard 0/2 and 1/2 at once, into `dir/s0` and `dir/s1`.
fn run_two_shards(args: &[&str], dir: &Path) -> [PathBuf; 2] {
    let outs = [dir.join("s0"), dir.join("s1")];
    let children: Vec<Child> = (0..2)
        .map(|k| {
            Command::new(env!("CARGO_BIN_EXE_perfbench"))
                .args(args)
                .args(["--shard", &format!("{k}/2"), "--out", outs[k].to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("starts a shard")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "shard failed: {}", stderr(&out));
    }
    outs
}

fn merge(shards: &[&Path], out: &Path) -> std::process::Output {
    let mut args = vec!["merge"];
    args.extend(shards.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--out", out.to_str().unwrap()]);
    perfbench(&args)
}

/// The one row of a report.csv, by column name.
fn row(report: &Path) -> HashMap<String, f64> {
    let text = std::fs::read_to_string(report).unwrap_or_else(|e| panic!("{}: {e}", report.display()));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let values: Vec<&str> = lines.next().expect("one row").split(',').collect();
    header.iter().zip(values).filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v))).collect()
}

/// File names of a results folder, its plots included, without a shard's own files.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().to_string();
            if e.path().is_dir() {
                std::fs::read_dir(e.path())
                    .unwrap()
                    .map(|f| format!("{name}/{}", f.unwrap().file_name().to_string_lossy()))
                    .collect::<Vec<_>>()
            } else {
                vec![name]
            }
        })
        .filter(|n| n != "shard.json" && !n.starts_with("histograms"))
        .collect();
    names.sort();
    names
}

fn within(a: f64, b: f64, share: f64) -> bool {
    (a - b).abs() <= share * a.max(b)
}

#[test]
fn two_shards_merged_agree_with_one_process_and_write_its_folder() {
    let server = serve();
    let dir = tempfile::tempdir().unwrap();
    let online =
        ["online", "-u", server.http.as_str(), "-m", "delay", "--concurrency", "8", "--stop-when", "ci=10%,max=3s"];
    let single = dir.path().join("single");
    let mut args = online.to_vec();
    args.extend(["--out", single.to_str().unwrap()]);
    let out = perfbench(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    // The shards start their point together on the --start-at clock (as on Kubernetes), so a
    // busy machine that starts one process seconds after the other does not part them.
    let start_at = (now_ms() + 3000).to_string();
    let sharded: Vec<&str> = online.iter().copied().chain(["--start-at", start_at.as_str()]).collect();
    let [s0, s1] = run_two_shards(&sharded, dir.path());
    let merged = dir.path().join("merged");
    let out = merge(&[&s1, &s0], &merged);
    assert!(out.status.success(), "{}", stderr(&out));
    let merge_said = stderr(&out);

    assert_eq!(files(&merged), files(&single), "the merged folder is a single run's");
    let header = |d: &Path| std::fs::read_to_string(d.join("report.csv")).unwrap().lines().next().unwrap().to_string();
    assert_eq!(header(&merged), header(&single));
    let (one, all) = (row(&single.join("report.csv")), row(&merged.join("report.csv")));
    let (k0, k1) = (row(&s0.join("report.csv")), row(&s1.join("report.csv")));
    assert_eq!(all["Concurrency"], 8.0, "the merged row is at the level asked of both shards");
    // Each shard's client is judged against the 4 in flight it held, not the row's 8.
    assert_eq!((k0["Held Load"], k1["Held Load"], one["Held Load"]), (4.0, 4.0, 0.0));
    // Every shard's request counts once, over the time both measured: a window one shard
    // measured while the other had stopped its load (they end points by their own rule) is
    // left out, and the merge says so.
    let both = k0["Requests"] + k1["Requests"];
    if merge_said.contains("window(s) outside the time every shard measured left out") {
        assert!(all["Requests"] < both, "{} of {both}", all["Requests"]);
    } else {
        assert_eq!(all["Requests"], both, "{merge_said}");
    }
    // Throughput, p50 and p99 within the noise of one process's runs on a loaded machine (other
    // tests run beside these): wide, yet a merge that double-counts or halves a shard fails.
    let agree = |name: &str, share: f64| {
        assert!(within(one[name], all[name], share), "{name}: one process {} vs merged {}", one[name], all[name])
    };
    agree("Inferences/Second", 0.45);
    agree("p50 latency", 0.45);
    agree("p99 latency", 0.75);
    // A shard alone sends half the load: the merge sums the shards, it does not average them.
    assert!(all["Inferences/Second"] > 1.4 * k0["Inferences/Second"].max(k1["Inferences/Second"]));
}

#[test]
fn the_server_counts_what_the_merged_shards_count_and_odd_shards_are_refused() {
    let server = serve();
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("count.toml");
    std::fs::write(
        &scenario,
        "name = \"count\"\n[model]\nname = \"delay\"\n[online]\nconcurrency = \"8\"\nrequest_count = 400\n\
         warmup_request_count = 0\nstop_when = \"stable\"\n",
    )
    .unwrap();
    let before = server_successes(&server.http);
    let [s0, s1] = run_two_shards(&["run", scenario.to_str().unwrap(), "-u", server.http.as_str()], dir.path());
    let served = server_successes(&server.http) - before;
    let merged = dir.path().join("merged");
    let out = merge(&[&s0, &s1], &merged);
    assert!(out.status.success(), "{}", stderr(&out));
    let all = row(&merged.join("online/report.csv"));
    assert_eq!(all["Requests"], 400.0, "--request-count split 200 + 200");
    // Each shard's session sends one checked probe request before its load.
    assert_eq!(served as f64, all["Requests"] + 2.0, "the server saw what the shards counted");

    // A shard alone, a shard twice, or shards of different plans do not merge.
    let bad = dir.path().join("bad");
    let out = merge(&[&s0], &bad);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing shard(s) 1 of 2"), "{}", stderr(&out));
    let out = merge(&[&s0, &s0], &bad);
    assert!(stderr(&out).contains("shard 0 given twice"), "{}", stderr(&out));
    let other = dir.path().join("other.toml");
    std::fs::write(&other, std::fs::read_to_string(&scenario).unwrap().replace("400", "200")).unwrap();
    let other_shards = dir.path().join("other");
    std::fs::create_dir_all(&other_shards).unwrap();
    let [_, o1] = run_two_shards(&["run", other.to_str().unwrap(), "-u", server.http.as_str()], &other_shards);
    let out = merge(&[&s0, &o1], &bad);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("mixed plans") && err.lines().count() == 1, "{err}");

    // A shard whose target died after no point: the merge names the shard and the point.
    let sidecar = s1.join("online/shard.json");
    let text = std::fs::read_to_string(&sidecar).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["points"] = serde_json::json!([]);
    std::fs::write(&sidecar, json.to_string()).unwrap();
    let out = merge(&[&s0, &s1], &bad);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("shard 1") && err.contains("has no point batch 1 concurrency 8"), "{err}");
}

#[test]
fn bad_shards_are_refused_with_one_line() {
    let out = std::env::temp_dir().join("perfbench-shard-never-written");
    let out = out.to_str().unwrap();
    let online = ["online", "-u", "localhost:1", "-m", "delay"];
    let args =
        |more: &[&'static str]| -> Vec<&str> { online.iter().chain(more).copied().chain(["--out", out]).collect() };
    assert_fails(&args(&["--concurrency", "8", "--shard", "3/2"]), 2, "bad --shard '3/2'");
    assert_fails(&args(&["--concurrency", "1", "--shard", "0/2"]), 2, "no request in flight");
    assert_fails(&["online", "-m", "delay", "--shard", "0/2", "--out", out], 2, "give the server's address (-u)");
    assert_fails(&["serve", "--shard", "0/2"], 2, "--shard and --shards apply to");
    assert_fails(&["online", "-m", "delay", "--start-at", "1", "--out", out], 2, "give --shard K/N");
    // A point nothing bounds has no slot of its own on the --start-at grid.
    let unbounded = ["--concurrency", "8", "--measurement-mode", "count_windows", "--stop-when", "stable"];
    let mut line = args(&unbounded);
    line.extend(["--shard", "0/2", "--start-at", "1"]);
    assert_fails(&line, 2, "give each point's slot with --point-slot MS");
    let mut line = args(&unbounded);
    line.extend(["--shard", "0/2", "--point-slot", "5000"]);
    assert_fails(&line, 2, "--point-slot is the slot of --start-at");
}

#[test]
fn engines_name_the_shard_through_their_environment() {
    let plan = |vars: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_perfbench"))
            .args([
                "online",
                "-u",
                "localhost:1",
                "-m",
                "delay",
                "--concurrency",
                "8",
                "--out",
                "/tmp/x",
                "--print-plan",
            ])
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string(), stderr(&out))
    };
    let (code, text, _) = plan(&[("JOB_COMPLETION_INDEX", "1"), ("PERFBENCH_SHARDS", "2")]);
    assert_eq!(code, Some(0));
    assert!(text.contains("[shard]\nindex = 1\ncount = 2\n"), "{text}");
    let (_, text, _) = plan(&[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4")]);
    assert!(text.contains("[shard]\nindex = 2\ncount = 4\n"), "{text}");
    let (code, _, err) = plan(&[("JOB_COMPLETION_INDEX", "1")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--shards N or PERFBENCH_SHARDS"), "{err}");
}

#[test]
#[ignore = "needs mpirun (scripts/setup-mpi.sh installs Open MPI); .ci/run runs it in its own stage"]
fn mpirun_ranks_are_shards_and_rank_0_merges_by_itself() {
    let server = serve();
    let dir = tempfile::tempdir().unwrap();
    let merged = dir.path().join("merged");
    let out = Command::new("mpirun")
        .args(["-np", "2", "--oversubscribe", "--allow-run-as-root", env!("CARGO_BIN_EXE_perfbench")])
        .args(["online", "-u", server.http.as_str(), "-m", "delay", "--concurrency", "8"])
        .args(["--stop-when", "ci=10%,max=3s", "--out", merged.to_str().unwrap()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs mpirun (scripts/setup-mpi.sh installs it)");
    assert!(out.status.success(), "mpirun: {}\n{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    let all = row(&merged.join("report.csv"));
    let (k0, k1) = (row(&merged.join("shard-0/report.csv")), row(&merged.join("shard-1/report.csv")));
    // The ranks start the point together but end it by their own rule: what one measured after
    // the other stopped is left out, and the merge says so.
    let both = k0["Requests"] + k1["Requests"];
    if stderr(&out).contains("window(s) outside the time every shard measured left out") {
        assert!(all["Requests"] < both, "{} of {both}", all["Requests"]);
    } else {
        assert_eq!(all["Requests"], both, "{}", stderr(&out));
    }
    assert_eq!(all["Concurrency"], 8.0);
    assert!(all["Inferences/Second"] > 1.4 * k0["Inferences/Second"].max(k1["Inferences/Second"]));
    let names: Vec<String> = files(&merged).into_iter().filter(|n| !n.starts_with("shard-")).collect();
    for wanted in ["perf_analyzer.csv", "report.csv", "report.md", "plots/latency_vs_concurrency.png"] {
        assert!(names.iter().any(|n| n == wanted), "{wanted} missing from {names:?}");
    }
}

/// The manifests run the image the Containerfile builds, and say how to build it.
#[test]
fn the_kubernetes_recipes_name_the_containerfiles_image() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let recipe = std::fs::read_to_string(root.join("Containerfile")).unwrap();
    let tag = recipe
        .lines()
        .find_map(|l| l.split_once("docker build -f Containerfile -t ").map(|(_, rest)| rest.split_whitespace().next()))
        .flatten()
        .expect("the Containerfile says how to build and tag its image");
    for file in ["shards-job.yaml", "merge-job.yaml"] {
        let text = std::fs::read_to_string(root.join("deploy/k8s").join(file)).unwrap();
        let images: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image:"))
            .map(|i| i.split('#').next().unwrap().trim())
            .collect();
        assert!(!images.is_empty() && images.iter().all(|i| *i == tag), "{file}: {images:?}, not {tag}");
        assert!(text.contains("Containerfile") && text.contains("docker build"), "{file} says how to build the image");
    }
}

/// The manifests' Job kinds, shard counts and commands, from the parsed YAML.
#[test]
fn the_kubernetes_indexed_job_parses_and_its_indexes_are_the_shards() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/k8s");
    let docs = |file: &str| -> Vec<serde_yaml::Value> {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        serde_yaml::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect()
    };
    let shards = docs("shards-job.yaml");
    let job = shards.iter().find(|d| d["kind"] == "Job").expect("an Indexed Job");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let n = spec["completions"].as_u64().unwrap();
    assert_eq!(spec["parallelism"].as_u64(), Some(n), "all shards run at once");
    let container = &spec["template"]["spec"]["containers"][0];
    let env = container["env"].as_sequence().unwrap();
    let count =
        env.iter().find(|e| e["name"] == "PERFBENCH_SHARDS").expect("PERFBENCH_SHARDS")["value"].as_str().unwrap();
    assert_eq!(count.parse::<u64>().unwrap(), n, "PERFBENCH_SHARDS = completions");
    let command = container["args"][0].as_str().unwrap();
    assert!(command.contains("--out /results/shard-$JOB_COMPLETION_INDEX"), "{command}");
    // One start instant for every pod, set at submission, not computed by each pod.
    assert!(command.contains("--start-at $START_AT_MS") && !command.contains("date"), "{command}");
    assert!(env.iter().any(|e| e["name"] == "START_AT_MS"), "{env:?}");
    let mount = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let merge = docs("merge-job.yaml");
    let merge_args = merge[0]["spec"]["template"]["spec"]["containers"][0]["args"][0].as_str().unwrap();
    assert!(merge_args.contains(&format!("perfbench merge {mount}/shard-* --out")), "{merge_args}");
    assert!(shards.iter().any(|d| d["kind"] == "PersistentVolumeClaim"), "a shared volume");
    // Each pod's index is its shard: the same command with JOB_COMPLETION_INDEX set locally.
    for k in 0..n {
        let out = Command::new(env!("CARGO_BIN_EXE_perfbench"))
            .args([
                "online",
                "-u",
                "localhost:1",
                "-m",
                "delay",
                "--concurrency",
                "64",
                "--out",
                "/tmp/x",
                "--print-plan",
            ])
            .env("JOB_COMPLETION_INDEX", k.to_string())
            .env("PERFBENCH_SHARDS", count)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("[shard]\nindex = {k}\ncount = {n}\n")), "{text}{}", stderr(&out));
    }
}

/// Milliseconds since the epoch, now.
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A short sweep against `url` whose every point is exactly three 250 ms time windows (the
/// stable rule at most three windows), so it takes as long on every shard.
fn short_sweep(url: &str, levels: &str) -> Vec<String> {
    let args = ["online", "-u", url, "-m", "delay", "--concurrency", levels, "--measurement-mode", "time_windows"];
    let more = ["-p", "250", "-r", "3", "--stop-when", "stable", "--warmup-request-count", "0"];
    args.iter().chain(&more).map(|a| a.to_string()).collect()
}

/// The slot of [`short_sweep`]'s points under --start-at: its bound (3 × 250 ms) plus the
/// margin (1 s and a tenth of the bound).
const SHORT_SLOT_NS: u64 = 1_825_000_000;

/// Starts `args` as shard `k` of 2 into `out`.
fn spawn_shard(args: &[String], k: u64, out: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(args)
        .args(["--shard", &format!("{k}/2"), "--out", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts a shard")
}

/// The points of a shard folder's shard.json (none before its first point).
fn sidecar_points(dir: &Path) -> Vec<serde_json::Value> {
    let Ok(text) = std::fs::read_to_string(dir.join("shard.json")) else {
        return Vec::new();
    };
    let json: serde_json::Value = serde_json::from_str(&text).expect("shard.json is JSON");
    json["points"].as_array().cloned().unwrap_or_default()
}

/// Waits until each of `dirs` has finished at least `points` points.
fn wait_for_points(dirs: &[&Path], points: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while dirs.iter().any(|d| sidecar_points(d).len() < points) {
        assert!(std::time::Instant::now() < deadline, "no shard finished {points} point(s) in 3 minutes");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn u64_of(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// The rows of a report.csv.
fn row_count(report: &Path) -> usize {
    std::fs::read_to_string(report).map_or(0, |t| t.lines().count().saturating_sub(1))
}

#[test]
fn start_at_starts_every_point_of_every_shard_on_the_same_slot() {
    let server = serve();
    let dir = tempfile::tempdir().unwrap();
    let start_at = now_ms() + 4000;
    let mut args = short_sweep(&server.http, "2,4,6");
    args.extend(["--start-at".to_string(), start_at.to_string()]);
    let outs = [dir.path().join("s0"), dir.path().join("s1")];
    let children: Vec<Child> = (0..2).map(|k| spawn_shard(&args, k, &outs[k as usize])).collect();
    let errs: Vec<String> = children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "shard failed: {}", stderr(&out));
            stderr(&out)
        })
        .collect();
    let points: Vec<Vec<serde_json::Value>> = outs.iter().map(|d| sidecar_points(d)).collect();
    assert_eq!((points[0].len(), points[1].len()), (3, 3));
    let mut any_late = false;
    for (k, (p0, p1)) in points[0].iter().zip(&points[1]).enumerate() {
        let pair = [p0, p1];
        // Point k's slot: k slots after --start-at, the same on both shards.
        for p in pair {
            assert_eq!(u64_of(p, "slot_ns"), start_at * 1_000_000 + k as u64 * SHORT_SLOT_NS, "point {k}: {p}");
            assert_eq!(p["windows"].as_array().unwrap().len(), 3, "-r 3: three windows each");
        }
        for (shard, p) in pair.iter().enumerate() {
            let (slot, started, late_ms) = (u64_of(p, "slot_ns"), u64_of(p, "started_ns"), u64_of(p, "late_ms"));
            assert!(started >= slot, "shard {shard} started point {k} before its slot");
            // On time, or the shard said it was not (a machine too busy to wake it on time).
            let late = late_ms > 100;
            assert!(!late || errs[shard].contains("misaligned"), "shard {shard}, point {k}: {}", errs[shard]);
            any_late |= late;
        }
        // The shards' recorded starts of the point's load agree within the tolerance. (Their
        // first windows begin a little later: after starting the load, and on shard 0 after
        // reading the server's counters, which a busy machine can stretch.)
        let apart_ms = u64_of(pair[0], "late_ms").abs_diff(u64_of(pair[1], "late_ms"));
        assert!(apart_ms <= 100 || any_late, "point {k}: the shards started {apart_ms} ms apart");
    }
    let merged = dir.path().join("merged");
    let out = merge(&[&outs[0], &outs[1]], &merged);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(row_count(&merged.join("report.csv")), 3);
}

#[test]
fn a_shard_whose_target_dies_keeps_its_points_and_the_merge_names_what_it_lacks() {
    let (alive, dying) = (serve(), serve());
    let dir = tempfile::tempdir().unwrap();
    let start_at = (now_ms() + 4000).to_string();
    let outs = [dir.path().join("s0"), dir.path().join("s1")];
    let levels = [2, 4, 6, 8];
    let children: Vec<Child> = [&alive, &dying]
        .iter()
        .enumerate()
        .map(|(k, server)| {
            let mut args = short_sweep(&server.http, "2,4,6,8");
            args.extend(["--start-at".to_string(), start_at.clone()]);
            spawn_shard(&args, k as u64, &outs[k])
        })
        .collect();
    // Shard 1's server dies once shard 1 has finished a point.
    wait_for_points(&[&outs[1]], 1);
    drop(dying);
    let [c0, c1]: [Child; 2] = children.try_into().unwrap();
    let out1 = c1.wait_with_output().unwrap();
    let err1 = stderr(&out1);
    assert_eq!(out1.status.code(), Some(3), "{err1}");
    let errors: Vec<&str> = err1.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one line of reason: {err1}");
    assert_eq!(err1.lines().last(), Some(errors[0]), "{err1}");
    let out0 = c0.wait_with_output().unwrap();
    assert!(out0.status.success(), "{}", stderr(&out0));

    // The dying shard keeps what it finished: its sidecar, interval logs and rows.
    let kept = sidecar_points(&outs[1]);
    assert!((1..levels.len()).contains(&kept.len()), "{kept:?}");
    for p in &kept {
        assert!(outs[1].join(p["log"].as_str().unwrap()).exists(), "{p}");
    }
    assert_eq!(row_count(&outs[1].join("report.csv")), kept.len());
    assert_eq!(sidecar_points(&outs[0]).len(), levels.len());

    // The merge merges the points both shards have and names each one shard 1 lacks.
    let merged = dir.path().join("merged");
    let out = merge(&[&outs[0], &outs[1]], &merged);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for c in &levels[kept.len()..] {
        let line = format!("shard 1 ({}) has no point batch 1 concurrency {c}", outs[1].display());
        assert!(err.contains(&line), "{line} in: {err}");
    }
    for c in &levels[..kept.len()] {
        assert!(!err.contains(&format!("has no point batch 1 concurrency {c}:")), "{err}");
    }
    assert_eq!(row_count(&merged.join("report.csv")), kept.len());
}

#[test]
fn a_resumed_shard_keeps_its_finished_points_and_measures_the_rest() {
    let server = serve();
    let address = server.http.clone();
    let port = address.rsplit(':').next().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut args = short_sweep(&address, "2,4,6");
    args.extend(["--start-at".to_string(), (now_ms() + 4000).to_string()]);
    let outs = [dir.path().join("s0"), dir.path().join("s1")];
    let children: Vec<Child> = (0..2).map(|k| spawn_shard(&args, k, &outs[k as usize])).collect();
    // The server dies after both shards finished their first point (a slot before the next).
    wait_for_points(&[&outs[0], &outs[1]], 1);
    drop(server);
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    }
    let before: Vec<Vec<serde_json::Value>> = outs.iter().map(|d| sidecar_points(d)).collect();
    assert_eq!(before[0].len(), before[1].len(), "both shards died in the same slot");
    let finished = before[0].len();
    assert!(finished < 3);

    // The server is back at the address the folders' plans name: both shards resume.
    let _server = serve_on(&port);
    let start_at = now_ms() + 3000;
    let children: Vec<Child> = outs
        .iter()
        .map(|out| {
            Command::new(env!("CARGO_BIN_EXE_perfbench"))
                .args(["run", "--resume", out.to_str().unwrap(), "--start-at", &start_at.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "resume: {}", stderr(&out));
    }
    for (out, before) in outs.iter().zip(&before) {
        let after = sidecar_points(out);
        assert_eq!(after.len(), 3, "{after:?}");
        // The finished points are kept as they were measured, not measured again.
        assert_eq!(&after[..finished], &before[..], "{}", out.display());
        // The rest keep their slots on the new grid: a kept point still takes its slot.
        for (k, p) in after.iter().enumerate().skip(finished) {
            assert_eq!(u64_of(p, "slot_ns"), start_at * 1_000_000 + k as u64 * SHORT_SLOT_NS, "{p}");
        }
        assert_eq!(row_count(&out.join("report.csv")), 3);
    }
    let merged = dir.path().join("merged");
    let out = merge(&[&outs[0], &outs[1]], &merged);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("has no point"), "{}", stderr(&out));
    assert_eq!(row_count(&merged.join("report.csv")), 3);
}

#[test]
fn a_generative_sweep_splits_each_level_and_merges_every_request() {
    let server = ServeProcess::start(&["--models", "llm"]);
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "online",
        "--endpoint-type",
        "chat",
        "--streaming",
        "-u",
        &server.http,
        "--concurrency",
        "2,5",
        "--request-count",
        "9",
        "--isl",
        "16",
        "--osl",
        "6",
    ];
    let [s0, s1] = run_two_shards(&args, dir.path());
    // Shard 0 holds 3 of 5 sessions and 5 of 9 requests; shard 1 the rest.
    let requests = |dir: &Path| -> Vec<String> {
        let csv = std::fs::read_to_string(dir.join("report.csv")).unwrap();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let at = header.iter().position(|h| *h == "Requests").unwrap();
        csv.lines().skip(1).map(|l| l.split(',').nth(at).unwrap().to_string()).collect()
    };
    assert_eq!(requests(&s0), ["5", "5"]);
    assert_eq!(requests(&s1), ["4", "4"]);
    assert_eq!(model_successes(&server.http, "llm"), 18, "the server served what the shards sent");

    let merged = dir.path().join("merged");
    let out = merge(&[&s1, &s0], &merged);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(requests(&merged), ["9", "9"], "every request of both shards, per level");
    for level in ["concurrency2", "concurrency5"] {
        let lines = std::fs::read_to_string(merged.join(level).join("profile_export.jsonl")).unwrap();
        assert_eq!(lines.lines().count(), 9, "{level}: AIPerf's per-request file holds all of them");
    }
    let rows = std::fs::read_to_string(merged.join("report.csv")).unwrap();
    assert!(rows.lines().nth(2).unwrap().starts_with("5,"), "levels named by the whole load: {rows}");
    let plan = std::fs::read_to_string(merged.join("plan.toml")).unwrap();
    assert!(!plan.contains("[shard]"), "the merged folder is the whole run's: {plan}");

    // A shard given twice, or one missing, is refused with one line.
    let twice = merge(&[&s0, &s0], &dir.path().join("twice"));
    assert_eq!(twice.status.code(), Some(2));
    assert!(stderr(&twice).contains("shard 0 given twice"), "{}", stderr(&twice));
    let alone = merge(&[&s0], &dir.path().join("alone"));
    assert!(stderr(&alone).contains("give all 2 folders"), "{}", stderr(&alone));
}
