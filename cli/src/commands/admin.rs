//! `gpuctl admin …`: what server admins do from a terminal.

use crate::Output;
use crate::client::{CliError, Client};
use clap::Subcommand;
use gpuplane_api::node::{Maintenance, StartMaintenance};

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Maintenance mode: pause all dispatch (running jobs continue).
    #[command(subcommand)]
    Maintenance(MaintenanceCommand),
}

#[derive(Debug, Subcommand)]
pub enum MaintenanceCommand {
    /// Pause dispatch: nothing new starts; queued jobs, the dashboard and
    /// `gpuctl status` show MESSAGE.
    On {
        /// What users are told, e.g. "Driver upgrade until 12:00 UTC".
        message: String,
    },
    /// Resume dispatch: queued jobs start at once.
    Off,
    /// Whether maintenance mode is on, since when and by whom.
    Show,
}

pub async fn run(client: &Client, command: AdminCommand, out: &Output) -> Result<(), CliError> {
    match command {
        AdminCommand::Maintenance(command) => {
            let maintenance: Maintenance = match command {
                MaintenanceCommand::On { message } => {
                    client.put("maintenance", &StartMaintenance { message }).await?
                }
                MaintenanceCommand::Off => client.delete("maintenance").await?,
                MaintenanceCommand::Show => client.get("maintenance").await?,
            };
            out.emit(&maintenance, render_maintenance);
            Ok(())
        }
    }
}

fn render_maintenance(maintenance: &Maintenance) -> String {
    if !maintenance.on {
        return "Maintenance mode is off: jobs are dispatched.".to_string();
    }
    format!(
        "Maintenance mode is on since {}{}: nothing new starts, running jobs continue.\nMessage  {}",
        maintenance.since.as_deref().unwrap_or("?"),
        maintenance
            .by
            .as_deref()
            .map(|by| format!(" (by {by})"))
            .unwrap_or_default(),
        maintenance.message.as_deref().unwrap_or_default()
    )
}
