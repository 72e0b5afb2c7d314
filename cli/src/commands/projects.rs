//! `gpuctl project list|create|add-member`.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::Page;
use gpuplane_api::project::{Membership, NewProject, Project, Role};
use std::fmt::Write;

#[derive(Debug, clap::Subcommand)]
pub enum ProjectCommand {
    /// The projects you can see, with your role.
    List,
    /// Create a project (server admins).
    Create { name: String },
    /// Add a member or change their role (project admins).
    AddMember {
        project: String,
        #[arg(long)]
        user: String,
        /// viewer, editor or admin.
        #[arg(long)]
        role: Role,
    },
}

pub async fn run(client: &Client, command: ProjectCommand, out: &Output) -> Result<(), CliError> {
    match command {
        ProjectCommand::List => {
            let page: Page<Project> = client.get("projects").await?;
            out.emit(&page, |page| {
                let mut text = String::new();
                for project in &page.items {
                    let _ = writeln!(text, "{:<24} {}", project.name, project.role.as_str());
                }
                text
            });
        }
        ProjectCommand::Create { name } => {
            let project: Project = client.post("projects", &NewProject { name }).await?;
            out.emit(&project, |p| {
                format!("Created project {}; you are its admin.", p.name)
            });
        }
        ProjectCommand::AddMember { project, user, role } => {
            let membership: Membership = client
                .post(&format!("projects/{project}/members"), &Membership { user, role })
                .await?;
            out.emit(&membership, |m| {
                format!("{} is now {} of {project}.", m.user, m.role.as_str())
            });
        }
    }
    Ok(())
}
