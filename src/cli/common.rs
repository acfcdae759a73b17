//! The flags `profile`, `offline`, `online` and `search` share ([`CommonArgs`]): the sections of
//! [`Settings`] flattened as flag groups, where to connect, and the target they name.

use std::path::PathBuf;

use clap::Args;

use super::tls::TlsArgs;
use crate::plan::settings::{CallSettings, InputSettings, LoadSettings, MeasurementSettings, OutputSettings, Settings};
use crate::plan::validate::check_target_flags;
use crate::plan::{PlanError, Target};

/// The flags `profile`, `offline`, `online` and `search` share: where to connect, the call,
/// input and measurement sections of the settings, and `--print-plan`. The sweeps add the load
/// and output sections ([`SweepSections`]); `search` has its own load.
#[derive(Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// Server address (host:port). Without it, the bundled server runs in-process.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    /// Model repository of the bundled server (default: its model zoo).
    #[arg(long = "model-repository")]
    pub model_repository: Option<PathBuf>,
    /// Print the resolved plan as TOML and exit without running it.
    #[arg(long = "print-plan")]
    pub print_plan: bool,
    #[command(flatten)]
    pub call: CallSettings,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub input: InputSettings,
    #[command(flatten)]
    pub measurement: MeasurementSettings,
}

/// The load and output sections, as the sweeping commands (`profile`, `offline`, `online`) take
/// them.
#[derive(Args, Debug, Clone, Default)]
pub struct SweepSections {
    #[command(flatten)]
    pub load: LoadSettings,
    #[command(flatten)]
    pub output: OutputSettings,
}

impl CommonArgs {
    /// These flags as sweep settings, with a load and an output section.
    pub fn settings(&self, load: &LoadSettings, output: &OutputSettings) -> Settings {
        Settings {
            call: CallSettings { tls: self.tls.options(), ..self.call.clone() },
            load: load.clone(),
            input: self.input.clone(),
            measurement: self.measurement.clone(),
            output: output.clone(),
            generative: Default::default(),
        }
    }
}

/// `-u`, `--service-kind` and `--model-repository` as a target.
pub fn target(url: &Option<String>, service_kind: &str, repository: &Option<PathBuf>) -> Result<Target, PlanError> {
    check_target_flags(service_kind, url.is_some(), repository.is_some())?;
    match (service_kind, url) {
        ("triton", Some(url)) => Ok(Target::Remote { url: url.clone() }),
        ("triton", None) => Ok(Target::Embedded { model_repository: repository.clone() }),
        ("inprocess", None) => Ok(Target::InProcess { model_repository: repository.clone() }),
        (other, _) => Err(PlanError::NotSupported(format!("--service-kind {other}"))),
    }
}
