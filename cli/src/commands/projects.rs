//! `gpuctl project list|create|set-primary|usage|share-links|idle-action|max-priority|member`.

use crate::Output;
use crate::client::{CliError, Client};
use gpuplane_api::Page;
use gpuplane_api::experiment::{ProjectUsage, format_bytes};
use gpuplane_api::metric::{Goal, SetPrimaryMetric};
use gpuplane_api::project::{IdleAction, Membership, NewProject, Project, Role};
use gpuplane_api::share::ProjectChanges;
use std::fmt::Write;

#[derive(Debug, clap::Subcommand)]
pub enum ProjectCommand {
    /// The projects you can see, with your role.
    List,
    /// Create a project (server admins).
    Create { name: String },
    /// Set the primary metric of the project's runs that set none (project admins).
    SetPrimary {
        project: String,
        key: String,
        /// max (larger is better) or min.
        #[arg(long, value_parser = crate::commands::parse_goal)]
        goal: Goal,
    },
    /// What each project keeps on the server: runs, metrics, output, texts.
    Usage,
    /// Allow or forbid share links of the project's runs (project admins);
    /// forbidding closes the existing ones too.
    ShareLinks {
        project: String,
        /// on or off.
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// What happens to the project's jobs whose GPUs sit idle (project
    /// admins): `warn` raises GPU_IDLE; `stop` also stops them (reason IDLE)
    /// to free the GPUs.
    IdleAction {
        project: String,
        /// warn or stop.
        action: IdleAction,
    },
    /// Cap the priority the project's members may give a job (server
    /// admins), so one team cannot put itself ahead of everyone for good.
    MaxPriority {
        project: String,
        /// The highest priority allowed, or `none` to remove the ceiling.
        #[arg(value_parser = parse_ceiling, allow_hyphen_values = true)]
        max: MaxPriority,
    },
    /// A project's members: list, add (or change a role), remove.
    #[command(subcommand)]
    Member(MemberCommand),
    /// Add a member or change their role (project admins); the same as
    /// `member add`.
    #[command(hide = true)]
    AddMember {
        project: String,
        #[arg(long)]
        user: String,
        /// viewer, editor or admin.
        #[arg(long)]
        role: Role,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum MemberCommand {
    /// The project's members and their roles.
    List { project: String },
    /// Add a member or change their role (project admins).
    Add {
        project: String,
        #[arg(long)]
        user: String,
        /// viewer, editor or admin.
        #[arg(long)]
        role: Role,
    },
    /// Remove a member (project admins): their tokens limited to the
    /// project and their share links of its runs are revoked, and the alert
    /// subscriptions they made for it deleted. The last admin stays.
    Remove { project: String, user: String },
}

/// `max-priority`'s value: a whole number, or `none` (no ceiling).
#[derive(Debug, Clone, Copy)]
pub struct MaxPriority(Option<i64>);

fn parse_ceiling(text: &str) -> Result<MaxPriority, String> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(MaxPriority(None));
    }
    text.parse()
        .map(|max| MaxPriority(Some(max)))
        .map_err(|_| format!("`{text}` is neither a whole number nor `none`"))
}

pub async fn run(client: &Client, command: ProjectCommand, out: &Output) -> Result<(), CliError> {
    match command {
        ProjectCommand::Usage => {
            let page: Page<ProjectUsage> = client.get("projects/usage").await?;
            out.emit(&page, |page| {
                let mut text = format!(
                    "{:<20} {:>6} {:>9} {:>12} {:>10} {:>10}\n",
                    "PROJECT", "RUNS", "ARCHIVED", "POINTS", "LOG LINES", "STORED"
                );
                for usage in &page.items {
                    let _ = writeln!(
                        text,
                        "{:<20} {:>6} {:>9} {:>12} {:>10} {:>10}",
                        usage.project,
                        usage.runs,
                        usage.archived_runs,
                        usage.metric_points,
                        usage.log_lines,
                        format_bytes(usage.total_bytes())
                    );
                }
                text
            });
        }
        ProjectCommand::MaxPriority { project, max } => {
            let changes = ProjectChanges {
                max_priority: Some(max.0),
                ..ProjectChanges::default()
            };
            let changed: Project = client.patch(&format!("projects/{project}"), &changes).await?;
            out.emit(&changed, |project| match project.max_priority {
                Some(max) => format!(
                    "Jobs of project {} may have priorities up to {max}.",
                    project.name
                ),
                None => format!("Project {} has no priority ceiling.", project.name),
            });
        }
        ProjectCommand::IdleAction { project, action } => {
            let changes = ProjectChanges {
                idle_action: Some(action),
                ..ProjectChanges::default()
            };
            let changed: Project = client.patch(&format!("projects/{project}"), &changes).await?;
            out.emit(&changed, |project| match project.idle_action {
                IdleAction::Warn => format!(
                    "Jobs of project {} whose GPUs sit idle raise GPU_IDLE and keep running.",
                    project.name
                ),
                IdleAction::Stop => format!(
                    "Jobs of project {} whose GPUs sit idle raise GPU_IDLE and are stopped (reason IDLE).",
                    project.name
                ),
            });
        }
        ProjectCommand::ShareLinks { project, state } => {
            let changes = ProjectChanges {
                share_links: Some(state == "on"),
                ..ProjectChanges::default()
            };
            let changed: Project = client.patch(&format!("projects/{project}"), &changes).await?;
            out.emit(&changed, |project| {
                if project.share_links {
                    format!("Share links of project {} are allowed.", project.name)
                } else {
                    format!(
                        "Share links of project {} are forbidden; existing ones are closed.",
                        project.name
                    )
                }
            });
        }
        ProjectCommand::List => {
            let page: Page<Project> = client.get("projects").await?;
            out.emit(&page, |page| {
                let mut text = String::new();
                for project in &page.items {
                    let primary = project
                        .primary_metric
                        .as_ref()
                        .map(|p| format!("  primary {} ({})", p.key, p.goal.as_str()))
                        .unwrap_or_default();
                    let ceiling = project
                        .max_priority
                        .map(|max| format!("  max priority {max}"))
                        .unwrap_or_default();
                    let _ = writeln!(
                        text,
                        "{:<24} {}{primary}{ceiling}",
                        project.name,
                        project.role.as_str()
                    );
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
        ProjectCommand::SetPrimary { project, key, goal } => {
            let updated: Project = client
                .post(
                    &format!("projects/{project}/primary-metric"),
                    &SetPrimaryMetric { key, goal },
                )
                .await?;
            out.emit(&updated, |p| match &p.primary_metric {
                Some(primary) => format!(
                    "Runs of {} without their own primary metric now rank by {} ({}).",
                    p.name,
                    primary.key,
                    primary.goal.as_str()
                ),
                None => format!("{} has no primary metric.", p.name),
            });
        }
        ProjectCommand::AddMember { project, user, role }
        | ProjectCommand::Member(MemberCommand::Add { project, user, role }) => {
            let membership: Membership = client
                .post(&format!("projects/{project}/members"), &Membership { user, role })
                .await?;
            out.emit(&membership, |m| {
                format!("{} is now {} of {project}.", m.user, m.role.as_str())
            });
        }
        ProjectCommand::Member(MemberCommand::List { project }) => {
            let page: Page<Membership> = client.get(&format!("projects/{project}/members")).await?;
            out.emit(&page, |page| {
                let mut text = String::new();
                for member in &page.items {
                    let _ = writeln!(text, "{:<24} {}", member.user, member.role.as_str());
                }
                text
            });
        }
        ProjectCommand::Member(MemberCommand::Remove { project, user }) => {
            let _: serde_json::Value = client
                .delete(&format!("projects/{project}/members/{user}"))
                .await?;
            let removed = serde_json::json!({"project": project, "removed": user});
            out.emit(&removed, |_| {
                format!(
                    "{user} is no longer a member of {project}; their tokens limited to it and share links of its runs \
                     are revoked, and the alert subscriptions they made for it are gone."
                )
            });
        }
    }
    Ok(())
}
