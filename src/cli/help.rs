//! `perfbench --help` grouped by job, and one example at the end of each subcommand's help.
//! clap lists subcommands under one heading only, so the top-level listing is written here
//! from the subcommands themselves (their names and first lines of help): a subcommand added
//! without a group, or an example that no longer parses, fails the tests below.

use clap::CommandFactory;

use super::Cli;

/// Each job and its subcommands, in the order `perfbench --help` lists them.
pub const GROUPS: &[(&str, &[&str])] = &[
    ("Tensor profiling (KServe v2 / Triton)", &["profile", "offline", "online", "run"]),
    ("Generative profiling (OpenAI API)", &["llm"]),
    ("Analysis", &["report", "compare", "gate", "merge", "search"]),
    ("Server", &["serve"]),
];

/// One example per subcommand, shown last in its `--help` (and parsed by a test: plain words,
/// no quoting).
pub const EXAMPLES: &[(&str, &str)] = &[
    ("profile", "perfbench profile -m identity --shape INPUT0:16 -u localhost:8001 -i grpc --concurrency-range 1:4"),
    ("offline", "perfbench offline -m identity --shape INPUT0:16 --batch-sizes 1,4,16"),
    ("online", "perfbench online -m delay --concurrency 1..8"),
    ("run", "perfbench run scenarios/fastpitch.toml --profile quick"),
    ("llm", "perfbench llm -m llm --endpoint-type chat --concurrency 4 --request-count 40"),
    ("report", "perfbench report results/run/report.csv -o results/run"),
    ("compare", "perfbench compare results/before results/after --baseline results/before"),
    ("gate", "perfbench gate --baseline results/before/report.csv --current results/after/report.csv"),
    ("merge", "perfbench merge results/shard-0 results/shard-1 --out results/merged"),
    ("search", "perfbench search -m identity --shape INPUT0:16 --latency-budget p99=20ms"),
    ("serve", "perfbench serve --http-port 8000 --grpc-port 8001 --metrics-port 8002"),
];

/// The command line's definition with the grouped listing and the examples.
pub fn command() -> clap::Command {
    let mut command = Cli::command();
    for (name, example) in EXAMPLES {
        command = command.mut_subcommand(*name, |sub| {
            let before = sub.get_after_help().map(|h| format!("{h}\n\n")).unwrap_or_default();
            sub.after_help(format!("{before}Example:\n  {example}"))
        });
    }
    let listing = listing(&command);
    command.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{listing}\nOptions:\n{{options}}{{after-help}}"
    ))
}

/// The subcommands under their jobs' headings, each with the first line of its help.
fn listing(command: &clap::Command) -> String {
    let width = GROUPS.iter().flat_map(|(_, names)| names.iter()).map(|n| n.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (heading, names) in GROUPS {
        out.push_str(&format!("{heading}:\n"));
        for name in *names {
            let about = command
                .find_subcommand(name)
                .and_then(|sub| sub.get_about().map(|a| a.to_string()))
                .unwrap_or_default();
            let first = about.lines().next().unwrap_or("");
            out.push_str(&format!("  {name:<width$}  {first}\n"));
        }
        out.push('\n');
    }
    out.push_str("`perfbench help COMMAND` (or `perfbench COMMAND --help`) gives a command's flags and an example.\n");
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn subcommands() -> Vec<String> {
        Cli::command().get_subcommands().map(|s| s.get_name().to_string()).collect()
    }

    #[test]
    fn every_subcommand_is_in_exactly_one_group() {
        for name in subcommands() {
            let groups: Vec<&str> =
                GROUPS.iter().filter(|(_, names)| names.contains(&name.as_str())).map(|(h, _)| *h).collect();
            assert_eq!(groups.len(), 1, "`{name}` is in {groups:?}: put it in exactly one of GROUPS");
        }
        let all = subcommands();
        for name in GROUPS.iter().flat_map(|(_, names)| names.iter()) {
            assert!(all.iter().any(|n| n == name), "GROUPS names `{name}`, which is no subcommand");
        }
    }

    #[test]
    fn the_top_level_help_lists_each_subcommand_under_its_job() {
        let help = command().render_help().to_string();
        for (heading, names) in GROUPS {
            let at = help.find(&format!("{heading}:")).unwrap_or_else(|| panic!("{heading} missing:\n{help}"));
            for name in *names {
                let line = help[at..].lines().find(|l| l.trim_start().starts_with(&format!("{name} ")));
                assert!(
                    line.is_some_and(|l| l.len() > name.len() + 4),
                    "`{name}` and its help under {heading}:\n{help}"
                );
            }
        }
        assert!(help.contains("--log"), "the global options are still listed:\n{help}");
    }

    #[test]
    fn every_subcommand_help_ends_with_an_example_that_parses() {
        let mut command = command();
        command.build();
        for name in subcommands() {
            let (_, example) =
                EXAMPLES.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no example for `{name}`"));
            let argv: Vec<&str> = example.split_whitespace().collect();
            assert_eq!(argv[..2], ["perfbench", name.as_str()], "{example}");
            assert!(!example.contains(['"', '\'']), "plain words only: {example}");
            if let Err(e) = Cli::try_parse_from(&argv) {
                panic!("the example of `{name}` does not parse: {example}\n{e}");
            }
            let help = command.find_subcommand_mut(&name).unwrap().render_help().to_string();
            assert!(help.trim_end().ends_with(example), "`{name} --help` does not end with its example:\n{help}");
        }
    }
}
