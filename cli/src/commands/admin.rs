//! `gpuctl admin …`: what server admins do from a terminal: maintenance
//! mode and draining nodes.

use crate::Output;
use crate::client::{CliError, Client};
use clap::Subcommand;
use gpuplane_api::node::{Maintenance, Node, NodeStatus, StartMaintenance};

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Maintenance mode: pause all dispatch (running jobs continue).
    #[command(subcommand)]
    Maintenance(MaintenanceCommand),
    /// Drain a node before taking it down, or let it take jobs again.
    #[command(subcommand)]
    Node(NodeCommand),
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// No new jobs on NODE; its running jobs finish (DRAINING), then it is DRAINED.
    Drain { node: String },
    /// NODE takes jobs again.
    Undrain { node: String },
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
        AdminCommand::Node(command) => {
            let (node, action) = match &command {
                NodeCommand::Drain { node } => (node, "drain"),
                NodeCommand::Undrain { node } => (node, "undrain"),
            };
            let node: Node = client.post(&format!("nodes/{node}/{action}"), &()).await?;
            out.emit(&node, render_node);
            Ok(())
        }
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

fn render_node(node: &Node) -> String {
    let what = match node.status {
        NodeStatus::Draining => "takes no new jobs; its running jobs finish, then it is DRAINED",
        NodeStatus::Drained => "takes no new jobs and runs none: safe to take down",
        NodeStatus::Online => "takes jobs",
        NodeStatus::Offline => "is offline",
    };
    format!("{}  {}: {what}", node.name, node.status)
}
