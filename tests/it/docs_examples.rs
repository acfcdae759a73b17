//! The commands the README and the user guide (`docs/*.md`) show, run as written.
//!
//! Every fenced ```` ```console ```` block is a script: a line `$ CMD` (a trailing `\` joins the
//! next line) runs `CMD` in bash, `perfbench` being this build's binary; a line `? N` right
//! after it is the exit status it must end with (else 0); the lines up to the next `$` are its
//! output (stdout and stderr together), matched as trycmd matches: `...` on a line of its own
//! stands for any number of lines, `[..]` for any text within a line, and a block with no
//! output lines checks only the status. `$ CMD &` starts `perfbench serve` in the background
//! for the rest of the page; the ports the page names as the defaults (8000, 8001, 8002) are
//! mapped to the free ones it got. A page's commands run in order in one scratch folder that
//! links the repository's top-level entries (so `scenarios/` and `tests/interop/data/` are
//! there), and anything they write stays in it.
//!
//! Why not trycmd itself: its Markdown cases cannot start a server in the background for a
//! page's later commands, nor point them at the ports it got, and its wildcards are the only
//! part we need; these 300 lines, with no new dependency, do both, in trycmd's notation, so a
//! page reads as trycmd's would.
//!
//! `every_example_runs` is ignored in `cargo test`: it starts a server or a sweep per example
//! (about a minute in all), and `.ci/run` gives it a stage and a budget of its own. The checks
//! that need no run (every command in a console block, every page linked) are not ignored.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one example may take; the docs ask each for a few seconds.
const EXAMPLE_TIMEOUT: Duration = Duration::from_secs(90);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of the guide, in a stable order.
fn pages() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    let mut all = vec![repo().join("README.md")];
    all.extend(docs);
    all
}

/// One `$ CMD` of a console block.
#[derive(Debug)]
struct Example {
    /// Line of the `$` in its page, for messages.
    line: usize,
    command: String,
    status: i32,
    /// Expected output lines; `None`: only the status is checked.
    output: Option<Vec<String>>,
}

/// Fenced blocks of a page: (info string, first line number, lines without the fence's indent,
/// as a block inside a list item has).
fn fenced_blocks(text: &str) -> Vec<(String, usize, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, usize, Vec<String>)> = None;
    let mut indent = 0;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence = trimmed.starts_with("```");
        if let Some((_, _, lines)) = current.as_mut().filter(|_| !fence) {
            let cut = line.len() - trimmed.len();
            lines.push(line[cut.min(indent)..].to_string());
        } else if let Some(block) = current.take() {
            blocks.push(block);
        } else if fence {
            indent = line.len() - trimmed.len();
            current = Some((trimmed.trim_start_matches('`').trim().to_string(), index + 2, Vec::new()));
        }
    }
    blocks
}

fn examples(text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    for (info, first, lines) in fenced_blocks(text) {
        if info != "console" {
            continue;
        }
        let mut index = 0;
        while index < lines.len() {
            let Some(start) = lines[index].strip_prefix("$ ") else {
                index += 1;
                continue;
            };
            let line = first + index;
            let mut command = start.to_string();
            while command.ends_with('\\') && index + 1 < lines.len() {
                command.pop();
                index += 1;
                command = format!("{} {}", command.trim_end(), lines[index].trim());
            }
            index += 1;
            let mut status = 0;
            if let Some(code) = lines.get(index).and_then(|l| l.strip_prefix("? ")) {
                status = code
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("line {}: `? {code}` is not a status", first + index));
                index += 1;
            }
            let mut output = Vec::new();
            while index < lines.len() && !lines[index].starts_with("$ ") {
                output.push(lines[index].trim_end().to_string());
                index += 1;
            }
            while output.last().is_some_and(|l| l.is_empty()) {
                output.pop();
            }
            let output = (!output.is_empty()).then_some(output);
            out.push(Example { line, command, status, output });
        }
    }
    out
}

/// One line against a pattern whose `[..]` matches any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if line.len() < first.len() + last.len() || !line.starts_with(first) || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// All of `actual` against `expected`, where a `...` line matches any number of lines.
fn lines_match(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((head, rest)) if head == "..." => (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..])),
        Some((head, rest)) => {
            actual.first().is_some_and(|line| line_matches(head, line)) && lines_match(rest, &actual[1..])
        }
    }
}

/// A page's scratch folder: the repository's top-level entries linked in, nothing written back.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if [".git", "target", "results", "artifacts"].iter().any(|skip| name == *skip) {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), dir.path().join(&name)).unwrap();
    }
    dir
}

/// bash with this build's `perfbench` first on PATH, in its own process group.
fn shell(command: &str, cwd: &Path) -> Command {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_perfbench")).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut shell = Command::new("bash");
    shell.arg("-c").arg(command).current_dir(cwd).env("PATH", path).stdin(Stdio::null()).process_group(0);
    shell
}

fn kill_group(child: &mut Child) {
    // SAFETY: signals the process group this harness made for the child.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
}

/// A page's background `perfbench serve`, and the ports the page's defaults map to.
struct Background {
    child: Child,
    ports: HashMap<&'static str, String>,
}

impl Drop for Background {
    fn drop(&mut self) {
        kill_group(&mut self.child);
    }
}

fn start_background(command: &str, cwd: &Path) -> Result<Background, String> {
    let command = command.trim_end_matches('&').trim();
    if !command.starts_with("perfbench serve") {
        return Err(format!("only `perfbench serve` may run in the background: {command}"));
    }
    let mut child = shell(&format!("exec {command} --http-port 0 --grpc-port 0 --metrics-port 0"), cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).map_err(|e| e.to_string())?;
    // Drain the rest, so the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    // "perfbench serve: http on 127.0.0.1:P, grpc on 127.0.0.1:Q, metrics on 127.0.0.1:R"
    let port_after = |word: &str| {
        line.split(&format!("{word} on "))
            .nth(1)
            .and_then(|rest| rest.split([',', '\n']).next())
            .and_then(|addr| addr.rsplit(':').next().map(str::to_string))
    };
    let (Some(http), Some(grpc), Some(metrics)) = (port_after("http"), port_after("grpc"), port_after("metrics"))
    else {
        kill_group(&mut child);
        return Err(format!("`{command}` did not say where it listens: {line}"));
    };
    Ok(Background { child, ports: HashMap::from([("8000", http), ("8001", grpc), ("8002", metrics)]) })
}

/// `localhost:8000` and friends to the background server's ports.
fn map_ports(command: &str, background: Option<&Background>) -> String {
    let mut command = command.to_string();
    if let Some(background) = background {
        for (default, port) in &background.ports {
            command = command.replace(&format!("localhost:{default}"), &format!("localhost:{port}"));
        }
    }
    command
}

/// Runs one command; returns its status and its output lines.
fn run(command: &str, cwd: &Path) -> Result<(i32, String), String> {
    let mut child = shell(&format!("exec 2>&1\n{command}"), cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stdout.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if start.elapsed() > EXAMPLE_TIMEOUT {
            kill_group(&mut child);
            return Err(format!("still running after {} s", EXAMPLE_TIMEOUT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = reader.join().unwrap();
    Ok((status.code().unwrap_or(-1), output))
}

/// Runs a page's examples in order; returns one message per failed example.
fn run_page(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page.strip_prefix(repo()).unwrap_or(page).display().to_string();
    let dir = scratch();
    let mut background: Option<Background> = None;
    let mut failures = Vec::new();
    for example in examples(&text) {
        let started = Instant::now();
        let at = format!("{name}:{}: `{}`", example.line, example.command);
        if example.command.trim_end().ends_with('&') {
            match start_background(&example.command, dir.path()) {
                Ok(server) => background = Some(server),
                Err(e) => failures.push(format!("{at}: {e}")),
            }
            continue;
        }
        let command = map_ports(&example.command, background.as_ref());
        match run(&command, dir.path()) {
            Err(e) => failures.push(format!("{at}: {e}")),
            Ok((status, output)) => {
                let mut lines: Vec<&str> = output.lines().map(str::trim_end).collect();
                while lines.last().is_some_and(|l| l.is_empty()) {
                    lines.pop();
                }
                let mut wrong = Vec::new();
                if status != example.status {
                    wrong.push(format!("exit status {status}, the page says {}", example.status));
                }
                if let Some(expected) = &example.output {
                    if !lines_match(expected, &lines) {
                        wrong.push(format!("output differs from the page's:\n{}", expected.join("\n")));
                    }
                }
                if wrong.is_empty() {
                    eprintln!("ok {:5.1} s  {at}", started.elapsed().as_secs_f64());
                } else {
                    failures.push(format!("{at}: {}\n--- its output:\n{output}", wrong.join("; ")));
                }
            }
        }
    }
    failures
}

#[test]
#[ignore = "runs every example of the docs (about a minute); .ci/run's docs-examples stage"]
fn every_example_runs() {
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut count = 0;
    // DOCS_PAGE=NAME runs only the pages whose path contains NAME (while writing one).
    let only = std::env::var("DOCS_PAGE").unwrap_or_default();
    for page in pages().into_iter().filter(|page| page.to_string_lossy().contains(&only)) {
        count += examples(&std::fs::read_to_string(&page).unwrap()).len();
        failures.extend(run_page(&page));
    }
    eprintln!("{count} examples in {:.0} s", started.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "{} of {count} examples failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// A command shown outside a console block would never run: every line that starts a
/// `perfbench` command in a fenced block is in a console block.
#[test]
fn every_perfbench_command_is_in_a_console_block() {
    let mut stray = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (info, first, lines) in fenced_blocks(&text) {
            // Shell blocks; a YAML or TOML block shows a file, not a command to type.
            if !["", "sh", "bash", "shell"].contains(&info.as_str()) {
                continue;
            }
            for (index, line) in lines.iter().enumerate() {
                let line = line.trim_start().trim_start_matches("$ ");
                if line.starts_with("perfbench ") {
                    stray.push(format!("{}:{}: {line}", page.display(), first + index));
                }
            }
        }
    }
    assert!(
        stray.is_empty(),
        "perfbench commands outside ```console blocks (they would never run):\n{}",
        stray.join("\n")
    );
}

#[test]
fn every_page_is_linked_and_the_readme_is_short() {
    let index = std::fs::read_to_string(repo().join("docs/README.md")).unwrap();
    for page in pages().iter().skip(1) {
        let file = page.file_name().unwrap().to_str().unwrap();
        assert!(file == "README.md" || index.contains(&format!("]({file})")), "docs/README.md does not link {file}");
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    assert!(lines.len() <= 300, "README.md has {} lines; at most 300", lines.len());
    let head = lines[..40.min(lines.len())].join("\n");
    assert!(head.contains("cargo test --locked"), "README.md's first 40 lines lack the test command");
    assert!(head.contains("-- offline"), "README.md's first 40 lines lack the main job");
}

/// A heading's anchor as GitHub makes it: lower case, spaces to '-', other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Relative links between the pages point at files (and headings) that exist.
#[test]
fn relative_links_resolve() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (at, _) in text.match_indices("](") {
            let link = text[at + 2..].split(')').next().unwrap_or_default();
            let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let target = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !target.exists() {
                broken.push(format!("{}: {link}", page.display()));
            } else if !fragment.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let headings = std::fs::read_to_string(&target).unwrap();
                let found = headings
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .any(|h| anchor(h.trim_start_matches('#')) == fragment);
                if !found {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links to files or headings that do not exist:\n{}", broken.join("\n"));
}

/// Every bench has its block in docs/performance.md, which its `--write-docs` rewrites.
#[test]
fn every_bench_has_its_block_in_the_performance_page() {
    let page = std::fs::read_to_string(repo().join("docs/performance.md")).unwrap();
    let benches = [
        ("scripts/bench-hot-paths.sh", "hot-paths"),
        ("scripts/bench-llm-client.sh", "llm-client"),
        ("benches/client.sh", "client"),
        ("benches/server.sh", "server"),
        ("benches/json-instructions.sh", "json-instructions"),
        ("benches/bert.rs", "bert"),
    ];
    for (file, name) in benches {
        assert!(repo().join(file).exists(), "{file} is gone: drop its block");
        for marker in ["begin", "end"] {
            let marker = format!("<!-- bench:{name}:{marker} -->");
            assert_eq!(page.matches(&marker).count(), 1, "docs/performance.md needs one {marker} for {file}");
        }
        let script = std::fs::read_to_string(repo().join(file)).unwrap();
        assert!(file.ends_with(".rs") || script.contains("--write-docs"), "{file} cannot rewrite its block");
    }
    let listed: Vec<String> = std::fs::read_dir(repo().join("benches"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "common.sh")
        .collect();
    for name in listed {
        assert!(
            benches.iter().any(|(file, _)| file.ends_with(&name)),
            "benches/{name} has no block in docs/performance.md"
        );
    }
}

#[test]
fn the_matcher_reads_trycmds_notation() {
    let page = "```console\n$ perfbench a \\\n  --b\n? 2\nerror: [..] b\n...\n\n$ perfbench c\n```\n";
    let found = examples(page);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].command, "perfbench a --b");
    assert_eq!(found[0].status, 2);
    let expected = found[0].output.clone().unwrap();
    assert!(lines_match(&expected, &["error: unknown flag b", "more", "lines"]));
    assert!(!lines_match(&expected, &["warning: b", "error: x b"]));
    assert!(!lines_match(&expected, &["error: unknown flag c"]));
    assert!(found[1].output.is_none());
    assert!(line_matches("[..]x[..]", "axb") && !line_matches("a[..]b", "ab c"));
    assert_eq!(anchor(" The llm twin's routes"), "the-llm-twins-routes");
    assert_eq!(
        anchor(" CI gates: `perfbench gate` and `perfbench compare`"),
        "ci-gates-perfbench-gate-and-perfbench-compare"
    );
}
