fn main() -> std::process::ExitCode {
    perfbench::cli::main()
}
