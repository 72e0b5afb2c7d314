//! `gpuctl`, the GPUPlane command line. Every command takes `--json` (anywhere
//! on the line) and exits with a code from [`exit::Failure`].

mod client;
mod commands;
mod credentials;
mod exit;
mod git;

use clap::{Parser, Subcommand};
use client::{CliError, Client};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "gpuctl", version, about = "Submit and watch GPU jobs on a GPUPlane cluster.", after_help = exit::HELP)]
struct Cli {
    /// Server URL (default: stored credentials, else http://127.0.0.1:8600).
    #[arg(long, env = "GPUCTL_SERVER", global = true)]
    server: Option<String>,

    /// API token (default: stored credentials from `gpuctl login`).
    #[arg(long, env = "GPUCTL_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,

    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sign in: with `--token T` (CI), else with a code approved in a browser
    /// (opened here when possible; `--device-flow` for SSH sessions).
    /// Credentials go to ~/.gpuctl/credentials.json (mode 0600).
    Login(commands::auth::LoginArgs),
    /// Forget the stored credentials.
    Logout,
    /// Show who the token belongs to and what it may do.
    Whoami,
    /// Your API tokens: list, create, revoke.
    #[command(subcommand)]
    Token(commands::auth::TokenCommand),
    /// Projects and their members.
    #[command(subcommand)]
    Project(commands::projects::ProjectCommand),
    /// Cluster overview: server, nodes, GPUs.
    Status,
    /// Nodes and their GPUs.
    #[command(subcommand)]
    Node(NodeCommand),
    /// GPU-hours allocated to jobs and GPU-hours their GPUs worked (from
    /// telemetry), by project, user, node or GPU model.
    Usage(commands::usage::UsageArgs),
    /// Submit, list, show, cancel and retry jobs.
    #[command(subcommand)]
    Job(commands::jobs::JobCommand),
    /// Sweeps: search a space of parameters with trials that are jobs,
    /// stopping poor ones early (ASHA, Hyperband); W&B's sweep files.
    #[command(subcommand)]
    Sweep(commands::sweeps::SweepCommand),
    /// Check a job spec file or an experiment folder without submitting it
    /// (exit 7 naming each bad field); --remote also asks the server.
    Validate(commands::validate::ValidateArgs),
    /// Recipes: versioned job templates with a config schema; an
    /// experiment folder's lock (status, upgrade).
    #[command(subcommand)]
    Recipe(commands::recipes::RecipeCommand),
    /// Experiments: folders started from a recipe (`exp init`), submitted
    /// with `gpuctl job submit --exp DIR`.
    #[command(subcommand)]
    Exp(commands::recipes::ExpCommand),
    /// Your Hugging Face Hub token: checks gated models and datasets before
    /// an experiment's job queues, and reaches jobs of recipes that ask.
    #[command(subcommand)]
    Hf(commands::hub::HubCommand),
    /// A job's output; -f follows it live.
    Logs(commands::logs::LogsArgs),
    /// Runs: what jobs (and SDK scripts) recorded.
    #[command(subcommand)]
    Run(commands::runs::RunCommand),
    /// Evaluate checkpoints; results become eval/ metrics of the run.
    #[command(subcommand)]
    Eval(commands::evals::EvalCommand),
    /// What happened: OOMs, lost jobs, disconnected nodes, full disks.
    #[command(subcommand)]
    Event(EventCommand),
    /// Alerts: channels (webhook, Slack, email), subscriptions to event kinds
    /// and severities, and the deliveries made.
    #[command(subcommand)]
    Alert(commands::alerts::AlertCommand),
    /// Server admins: maintenance mode, draining nodes, quotas.
    #[command(subcommand)]
    Admin(commands::admin::AdminCommand),
    /// Send what the Python SDK spooled while the server was unreachable
    /// (`$GPUCTL_SPOOL_DIR`, else ~/.gpuctl/spool), like `gpuplane.sync()`;
    /// `--list` shows it and what the server refused (the quarantine).
    Sync(commands::sync::SyncArgs),
    /// Bring runs from elsewhere: a tree of TensorBoard event files, or the
    /// experiments of an MLflow tracking server.
    #[command(subcommand)]
    Import(commands::import::ImportCommand),
    /// Serve MCP over stdio for an AI assistant that starts a local process:
    /// its tools are the server's (/mcp), used with this CLI's token.
    Mcp,
}

#[derive(Debug, Subcommand)]
enum EventCommand {
    /// Events, newest first.
    List(commands::events::ListArgs),
}

#[derive(Debug, Subcommand)]
enum NodeCommand {
    /// Every node with its GPUs and their latest readings.
    Status,
}

/// Where a command writes: text for people or JSON for programs.
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `value` as JSON, or the text `human` renders.
    pub fn emit<T: serde::Serialize>(&self, value: &T, human: impl FnOnce(&T) -> String) {
        if self.json {
            println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
        } else {
            let text = human(value);
            if !text.is_empty() {
                // Names, messages and notes come from other people: their
                // control characters are shown, never obeyed.
                println!("{}", gpuplane_api::terminal::visible(text.trim_end()));
            }
        }
    }

    fn fail(&self, error: &CliError) -> ExitCode {
        if self.json {
            let body = gpuplane_api::error::ErrorBody {
                error: error.error.clone(),
            };
            println!("{}", serde_json::to_string_pretty(&body).unwrap_or_default());
        }
        eprintln!("error: {}", gpuplane_api::terminal::visible(&error.error.message));
        // With one field the message already names it.
        if error.error.details.len() > 1 {
            for detail in &error.error.details {
                eprintln!("  {}: {}", detail.field, detail.message);
            }
        }
        error.failure.code()
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let out = Output { json: cli.json };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, &out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => out.fail(&error),
    }
}

async fn run(cli: Cli, out: &Output) -> Result<(), CliError> {
    match cli.command {
        Command::Login(args) => commands::auth::login(cli.server, cli.token, args, out).await,
        Command::Token(command) => {
            commands::auth::token(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Project(command) => {
            commands::projects::run(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Logout => commands::auth::logout(out),
        Command::Whoami => commands::auth::whoami(&Client::new(cli.server, cli.token)?, out).await,
        Command::Status => commands::status::status(&Client::new(cli.server, cli.token)?, out).await,
        Command::Node(NodeCommand::Status) => {
            commands::status::node_status(&Client::new(cli.server, cli.token)?, out).await
        }
        Command::Job(command) => {
            commands::jobs::run(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Sweep(command) => {
            commands::sweeps::run(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Validate(args) => commands::validate::run(cli.server, cli.token, args, out).await,
        Command::Recipe(command) => {
            commands::recipes::run(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Exp(command) => {
            commands::recipes::run_exp(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Hf(command) => commands::hub::run(&Client::new(cli.server, cli.token)?, command, out).await,
        Command::Logs(args) => commands::logs::run(&Client::new(cli.server, cli.token)?, args, out).await,
        Command::Usage(args) => commands::usage::run(&Client::new(cli.server, cli.token)?, args, out).await,
        Command::Run(command) => {
            commands::runs::run(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Eval(command) => {
            commands::evals::run(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Event(EventCommand::List(args)) => {
            commands::events::list(&Client::new(cli.server, cli.token)?, args, out).await
        }
        Command::Alert(command) => {
            commands::alerts::run(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Admin(command) => {
            commands::admin::run(&Client::new(cli.server, cli.token)?, command, out).await
        }
        Command::Sync(args) => commands::sync::run(&Client::new(cli.server, cli.token)?, &args, out).await,
        Command::Import(command) => {
            commands::import::run(&Client::new(cli.server, cli.token)?, &command, out).await
        }
        Command::Mcp => commands::mcp::run(Client::new(cli.server, cli.token)?).await,
    }
}
