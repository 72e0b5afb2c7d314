//! `gpuctl admin …`: what server admins do from a terminal: maintenance
//! mode, nodes, node policies, quotas, users, agent tokens and the audit log.

use crate::Output;
use crate::client::{CliError, Client};
use clap::Subcommand;
use gpuplane_api::Page;
use gpuplane_api::audit::AuditEntry;
use gpuplane_api::job::Runner;
use gpuplane_api::node::{LabelChanges, Maintenance, Node, NodeStatus, StartMaintenance};
use gpuplane_api::project::{NodePolicy, ProjectNodePolicy};
use gpuplane_api::quota::{Quota, QuotaKind, SetQuota};
use gpuplane_api::user::{AgentToken, CreatedAgentToken, NewAgentToken, NewUser, User, UserChanges};
use std::collections::BTreeMap;

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Maintenance mode: pause all dispatch (running jobs continue).
    #[command(subcommand)]
    Maintenance(MaintenanceCommand),
    /// Drain a node before taking it down, or let it take jobs again.
    #[command(subcommand)]
    Node(NodeCommand),
    /// GPUs and running jobs a project or a user may have at once; jobs
    /// over quota wait in the queue.
    #[command(subcommand)]
    Quota(QuotaCommand),
    /// User accounts: list, create, make admin, disable.
    #[command(subcommand)]
    User(UserCommand),
    /// The tokens agents speak for their nodes with.
    #[command(subcommand)]
    AgentToken(AgentTokenCommand),
    /// Node policies: which nodes a project's jobs run on and through
    /// which runners (`node_selector` only chooses among those).
    #[command(subcommand)]
    ProjectNodes(ProjectNodesCommand),
    /// Who did what, when and from where: admin actions and every job
    /// cancel, retry, priority change, hold and release (newest first).
    Audit {
        /// Only what this user did.
        #[arg(long)]
        actor: Option<String>,
        /// Only this action: job.cancel, job.retry, job.priority, quota.set, maintenance.on, …
        #[arg(long)]
        action: Option<String>,
        /// Only what was done to this job, node, project or user.
        #[arg(long)]
        target: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Every account, with its role and whether it is disabled.
    List,
    /// A local account; the password is read from stdin (one line), never from argv.
    Create {
        name: String,
        /// A server admin.
        #[arg(long)]
        admin: bool,
        /// Read the password from stdin (required: nothing is prompted).
        #[arg(long, required = true)]
        password_stdin: bool,
    },
    /// Change an account: `--admin true|false`, `--disable`, `--enable`.
    Set {
        name: String,
        #[arg(long)]
        admin: Option<bool>,
        /// Its sessions and tokens stop working at once.
        #[arg(long, conflicts_with = "enable")]
        disable: bool,
        #[arg(long)]
        enable: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProjectNodesCommand {
    /// Every project's node policy (projects without one use nodes no
    /// policy reserves, with the process runner).
    List,
    /// Bind PROJECT to nodes: its jobs run only on nodes carrying LABELS,
    /// which then serve only projects naming them, through RUNNERS.
    Set {
        project: String,
        /// K=V[,K=V]: the labels its nodes carry (left out: any node no
        /// policy reserves).
        #[arg(long, value_parser = parse_policy_labels, default_value = "")]
        labels: PolicyLabels,
        /// process,docker,slurm: the runners it may use. Docker and Slurm
        /// nodes serve only projects granted them.
        #[arg(long, value_parser = parse_runners, default_value = "process")]
        runners: Runners,
    },
    /// Remove PROJECT's policy: back to unreserved nodes and the process runner.
    Clear { project: String },
}

/// `--labels` of `project-nodes set`.
#[derive(Debug, Clone)]
pub struct PolicyLabels(BTreeMap<String, String>);

fn parse_policy_labels(text: &str) -> Result<PolicyLabels, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}` is not KEY=VALUE"))?;
        labels.insert(key.to_string(), value.to_string());
    }
    Ok(PolicyLabels(labels))
}

/// `--runners` of `project-nodes set`.
#[derive(Debug, Clone)]
pub struct Runners(Vec<Runner>);

fn parse_runners(text: &str) -> Result<Runners, String> {
    text.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            Runner::parse(name)
                .ok_or_else(|| format!("`{name}` is not a runner: use process, docker or slurm"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Runners)
}

#[derive(Debug, Subcommand)]
pub enum AgentTokenCommand {
    /// Every agent token, oldest first.
    List,
    /// A new agent token: only its secret goes to stdout (shown once).
    Create {
        /// A name for people (default `agent`).
        #[arg(long)]
        name: Option<String>,
        /// Bind it to this node now (else its first hello binds it).
        #[arg(long)]
        node: Option<String>,
    },
    /// Revoke a token: its agent is refused from its next request on.
    Revoke { token_id: String },
}

#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Every quota you may see, with what is in use now.
    List,
    /// Set a quota (replacing its limits): `--project vision --gpus 8 --jobs 4`.
    Set {
        #[command(flatten)]
        whose: Whose,
        /// GPUs its running jobs may hold together.
        #[arg(long)]
        gpus: Option<i64>,
        /// Jobs it may run at once.
        #[arg(long)]
        jobs: Option<i64>,
    },
    /// Remove a quota: jobs it held back start.
    Clear {
        #[command(flatten)]
        whose: Whose,
    },
}

/// The project or the user a quota is for.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Whose {
    #[arg(long)]
    project: Option<String>,
    #[arg(long)]
    user: Option<String>,
}

impl Whose {
    /// `quotas/project/vision`.
    fn path(&self) -> String {
        match (&self.project, &self.user) {
            (Some(project), _) => format!("quotas/{}/{project}", QuotaKind::Project),
            (None, Some(user)) => format!("quotas/{}/{user}", QuotaKind::User),
            (None, None) => unreachable!("clap requires --project or --user"),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// No new jobs on NODE; its running jobs finish (DRAINING), then it is DRAINED.
    Drain { node: String },
    /// NODE takes jobs again.
    Undrain { node: String },
    /// Change NODE's labels without restarting its agent: `pool=night` sets
    /// one, `tier-` removes one (the agent's too); kept across agent restarts.
    Label {
        node: String,
        /// KEY=VALUE to set, KEY- to remove.
        #[arg(value_parser = parse_label_change)]
        changes: Vec<LabelChange>,
        /// Forget earlier changes first: back to the agent's own labels.
        #[arg(long)]
        reset: bool,
    },
}

/// One `gpuctl admin node label` argument.
#[derive(Debug, Clone)]
pub enum LabelChange {
    Set(String, String),
    Remove(String),
}

fn parse_label_change(text: &str) -> Result<LabelChange, String> {
    match (text.split_once('='), text.strip_suffix('-')) {
        (Some((key, value)), _) => Ok(LabelChange::Set(key.to_string(), value.to_string())),
        (None, Some(key)) => Ok(LabelChange::Remove(key.to_string())),
        (None, None) => Err(format!("`{text}` is neither KEY=VALUE (set) nor KEY- (remove)")),
    }
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
        AdminCommand::User(command) => users(client, command, out).await,
        AdminCommand::AgentToken(command) => agent_tokens(client, command, out).await,
        AdminCommand::ProjectNodes(command) => project_nodes(client, command, out).await,
        AdminCommand::Node(NodeCommand::Label { node, changes, reset }) => {
            let mut request = LabelChanges {
                reset,
                ..LabelChanges::default()
            };
            for change in changes {
                match change {
                    LabelChange::Set(key, value) => {
                        request.set.insert(key, value);
                    }
                    LabelChange::Remove(key) => request.remove.push(key),
                }
            }
            let node: Node = client.post(&format!("nodes/{node}/labels"), &request).await?;
            out.emit(&node, |node| {
                let labels: Vec<String> = node.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{}  labels: {}", node.name, labels.join(", "))
            });
            Ok(())
        }
        AdminCommand::Node(NodeCommand::Drain { node }) => {
            let node: Node = client.post(&format!("nodes/{node}/drain"), &()).await?;
            out.emit(&node, render_node);
            Ok(())
        }
        AdminCommand::Node(NodeCommand::Undrain { node }) => {
            let node: Node = client.post(&format!("nodes/{node}/undrain"), &()).await?;
            out.emit(&node, render_node);
            Ok(())
        }
        AdminCommand::Quota(QuotaCommand::List) => {
            let quotas: Page<Quota> = client.get("quotas").await?;
            out.emit(&quotas, |quotas| render_quotas(&quotas.items));
            Ok(())
        }
        AdminCommand::Quota(QuotaCommand::Set { whose, gpus, jobs }) => {
            let limits = SetQuota {
                max_gpus: gpus,
                max_running_jobs: jobs,
            };
            let quota: Quota = client.put(&whose.path(), &limits).await?;
            out.emit(&quota, |quota| render_quotas(std::slice::from_ref(quota)));
            Ok(())
        }
        AdminCommand::Quota(QuotaCommand::Clear { whose }) => {
            let () = client.delete(&whose.path()).await?;
            out.emit(&serde_json::json!({"removed": whose.path()}), |_| {
                "Quota removed: jobs it held back start now.".to_string()
            });
            Ok(())
        }
        AdminCommand::Audit {
            actor,
            action,
            target,
            limit,
        } => {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("limit", &limit.to_string());
            for (key, value) in [("actor", actor), ("action", action), ("target", target)] {
                if let Some(value) = value {
                    query.append_pair(key, &value);
                }
            }
            let page: Page<AuditEntry> = client.get(&format!("audit?{}", query.finish())).await?;
            out.emit(&page, |page| render_audit(&page.items));
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

async fn users(client: &Client, command: UserCommand, out: &Output) -> Result<(), CliError> {
    let user: User = match command {
        UserCommand::List => {
            let users: Page<User> = client.get("users").await?;
            out.emit(&users, |users| {
                users.items.iter().map(render_user).collect::<Vec<_>>().join("\n")
            });
            return Ok(());
        }
        UserCommand::Create { name, admin, .. } => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map_err(|error| {
                CliError::from(anyhow::anyhow!("cannot read the password from stdin: {error}"))
            })?;
            let password = line.trim_end_matches(['\n', '\r']).to_string();
            client
                .post(
                    "users",
                    &NewUser {
                        name,
                        password,
                        admin,
                    },
                )
                .await?
        }
        UserCommand::Set {
            name,
            admin,
            disable,
            enable,
        } => {
            let disabled = match (disable, enable) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            client
                .patch(&format!("users/{name}"), &UserChanges { admin, disabled })
                .await?
        }
    };
    out.emit(&user, render_user);
    Ok(())
}

async fn project_nodes(client: &Client, command: ProjectNodesCommand, out: &Output) -> Result<(), CliError> {
    match command {
        ProjectNodesCommand::List => {
            let policies: Page<ProjectNodePolicy> = client.get("node-policies").await?;
            out.emit(&policies, |policies| {
                if policies.items.is_empty() {
                    return "No node policies: every project uses the nodes no policy reserves, with the process \
                            runner."
                        .to_string();
                }
                policies
                    .items
                    .iter()
                    .map(render_node_policy)
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        ProjectNodesCommand::Set {
            project,
            labels,
            runners,
        } => {
            let policy = NodePolicy {
                labels: labels.0,
                runners: runners.0,
            };
            let set: ProjectNodePolicy = client
                .put(&format!("projects/{project}/node-policy"), &policy)
                .await?;
            out.emit(&set, render_node_policy);
        }
        ProjectNodesCommand::Clear { project } => {
            let () = client.delete(&format!("projects/{project}/node-policy")).await?;
            out.emit(&serde_json::json!({"cleared": project}), |_| {
                format!(
                    "Project {project} has no node policy now: nodes no policy reserves, the process runner."
                )
            });
        }
    }
    Ok(())
}

/// `vision  nodes labelled team=vision  runners process, docker  (set by root at …)`.
fn render_node_policy(set: &ProjectNodePolicy) -> String {
    let nodes = if set.policy.labels.is_empty() {
        "nodes no policy reserves".to_string()
    } else {
        let labels: Vec<String> = set
            .policy
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("nodes labelled {}", labels.join(","))
    };
    let runners: Vec<&str> = set.policy.runners.iter().map(|r| r.as_str()).collect();
    format!(
        "{}  {nodes}  runners {}  (set {}{})",
        set.project,
        runners.join(","),
        set.updated_at,
        set.updated_by
            .as_deref()
            .map(|by| format!(" by {by}"))
            .unwrap_or_default()
    )
}

/// `ada  server admin  active (password)  created …`.
fn render_user(user: &User) -> String {
    let role = if user.is_admin { "server admin" } else { "user" };
    let state = match (&user.disabled_at, user.local) {
        (Some(at), _) => format!("disabled since {at}"),
        (None, true) => "active (password)".to_string(),
        (None, false) => "active (SSO)".to_string(),
    };
    format!(
        "{:<20} {role:<13} {state}  created {}",
        user.name, user.created_at
    )
}

async fn agent_tokens(client: &Client, command: AgentTokenCommand, out: &Output) -> Result<(), CliError> {
    match command {
        AgentTokenCommand::List => {
            let tokens: Page<AgentToken> = client.get("agent-tokens").await?;
            out.emit(&tokens, |tokens| {
                if tokens.items.is_empty() {
                    return "No agent tokens: create one with `gpuctl admin agent-token create`.".to_string();
                }
                tokens
                    .items
                    .iter()
                    .map(render_agent_token)
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        AgentTokenCommand::Create { name, node } => {
            let created: CreatedAgentToken =
                client.post("agent-tokens", &NewAgentToken { name, node }).await?;
            // The secret alone on stdout, so it can go straight to a file.
            out.emit(&created, |created| created.secret.clone());
        }
        AgentTokenCommand::Revoke { token_id } => {
            let token: AgentToken = client
                .post(&format!("agent-tokens/{token_id}/revoke"), &())
                .await?;
            out.emit(&token, render_agent_token);
        }
    }
    Ok(())
}

/// `tok_…  gpu-01  node gpu-01  last used …  revoked …`.
fn render_agent_token(token: &AgentToken) -> String {
    format!(
        "{}  {}  node {}  last used {}{}",
        token.id,
        token.name,
        token.node.as_deref().unwrap_or("(bound at its first hello)"),
        token.last_used_at.as_deref().unwrap_or("never"),
        token
            .revoked_at
            .as_deref()
            .map(|at| format!("  revoked {at}"))
            .unwrap_or_default()
    )
}

/// One line per quota: `project vision  6/8 GPUs, 2/4 jobs  (set by root at …)`.
pub fn render_quotas(quotas: &[Quota]) -> String {
    if quotas.is_empty() {
        return "No quotas: every project and user may use any free GPU.".to_string();
    }
    quotas
        .iter()
        .map(|quota| {
            format!(
                "{} {}  {}  (set {}{})",
                quota.kind,
                quota.name,
                quota.usage_text(),
                quota.updated_at,
                quota
                    .updated_by
                    .as_deref()
                    .map(|by| format!(" by {by}"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line per entry: `2026-12-01T05:40:00Z  alice (127.0.0.1)  job.cancel job_01…  was RUNNING`.
fn render_audit(entries: &[AuditEntry]) -> String {
    if entries.is_empty() {
        return "Nothing in the audit log matches.".to_string();
    }
    entries
        .iter()
        .map(|entry| {
            let from = entry
                .address
                .as_deref()
                .map(|a| format!(" ({a})"))
                .unwrap_or_default();
            let detail = if entry.detail.is_empty() {
                String::new()
            } else {
                format!("  {}", entry.detail)
            };
            format!(
                "{}  {}{from}  {} {}{detail}",
                entry.time, entry.actor, entry.action, entry.target
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
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
