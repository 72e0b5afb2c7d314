//! Who may see and change what: projects, their members and roles.
//!
//! Every job, run, log line and job event belongs to a project. Admins see
//! everything; other users see the projects they are members of; a token may
//! be limited to one project. What a caller may not see answers 404 exactly
//! like what does not exist, so ids of other projects leak nothing.

use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use gpuplane_api::auth::Scope;
use gpuplane_api::project::Role;

/// Who made a request: the token and, for user tokens, its user.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: String,
    pub token_name: String,
    pub scope: Scope,
    pub expires_at: Option<i64>,
    pub user_id: Option<String>,
    pub user_name: Option<String>,
    pub is_admin: bool,
    /// The token is limited to this project.
    pub project: Option<String>,
    /// A job's sdk token is limited to the job's run.
    pub run_id: Option<String>,
    /// An agent token speaks only for this node (by name); `None` until its first hello.
    pub node: Option<String>,
    /// The client's address (for the audit log), when the request had one.
    pub address: Option<std::net::IpAddr>,
}

impl Caller {
    /// Whether the caller holds a server admin's rights: an admin, through
    /// a token not limited to a project (one limited to a project, even an
    /// admin's, has that project's rights only).
    pub fn is_server_admin(&self) -> bool {
        self.is_admin && self.project.is_none()
    }

    /// The caller as access checks see it.
    pub fn principal(&self) -> Principal {
        Principal {
            user_id: self.user_id.clone(),
            user_name: self.user_name.clone(),
            is_admin: self.is_admin,
            project: self.project.clone(),
        }
    }
}

/// The `token_id` of a caller signed in through a console session.
pub const SESSION_TOKEN_ID: &str = "session";

/// Who is asking, through a bearer token or a console session.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user_id: Option<String>,
    pub user_name: Option<String>,
    pub is_admin: bool,
    /// The token is limited to this project.
    pub project: Option<String>,
}

impl Principal {
    /// See [`Caller::is_server_admin`].
    pub fn is_server_admin(&self) -> bool {
        self.is_admin && self.project.is_none()
    }
}

/// The projects a principal can see.
#[derive(Debug, Clone)]
pub enum Visible {
    All,
    Only(Vec<String>),
}

impl Visible {
    pub fn contains(&self, project: &str) -> bool {
        match self {
            Visible::All => true,
            Visible::Only(projects) => projects.iter().any(|p| p == project),
        }
    }

    /// As a JSON array for `IN (SELECT value FROM json_each(?))`, or `None` for all.
    pub fn as_json(&self) -> Option<String> {
        match self {
            Visible::All => None,
            Visible::Only(projects) => Some(serde_json::to_string(projects).unwrap_or_else(|_| "[]".into())),
        }
    }
}

pub async fn visible_projects(db: &Db, principal: &Principal) -> Result<Visible, Error> {
    let visible = if principal.is_admin {
        Visible::All
    } else {
        let projects: Vec<String> = match &principal.user_id {
            Some(user_id) => sql!(db, |pool| {
                sqlx::query_scalar("SELECT project FROM project_members WHERE user_id = $1 ORDER BY project")
                    .bind(user_id)
                    .fetch_all(pool)
                    .await
            })?,
            None => Vec::new(),
        };
        Visible::Only(projects)
    };
    Ok(match (&principal.project, visible) {
        (Some(only), visible) if visible.contains(only) => Visible::Only(vec![only.clone()]),
        (Some(_), _) => Visible::Only(Vec::new()),
        (None, visible) => visible,
    })
}

/// The principal's role in a project (admins are admins everywhere), if any.
pub async fn role_in(db: &Db, principal: &Principal, project: &str) -> Result<Option<Role>, Error> {
    if principal.project.as_deref().is_some_and(|only| only != project) {
        return Ok(None);
    }
    if principal.is_admin {
        return Ok(Some(Role::Admin));
    }
    let Some(user_id) = &principal.user_id else {
        return Ok(None);
    };
    let role: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT role FROM project_members WHERE project = $1 AND user_id = $2")
            .bind(project)
            .bind(user_id)
            .fetch_optional(pool)
            .await
    })?;
    Ok(role.and_then(|r| r.parse().ok()))
}

/// Passes when the principal has at least `needed` in `project`. Not a
/// member at all: `not_found` (no existence leak); a lower role: 403.
pub async fn require(
    db: &Db,
    principal: &Principal,
    project: &str,
    needed: Role,
    not_found: impl FnOnce() -> Error,
) -> Result<(), Error> {
    match role_in(db, principal, project).await? {
        None => Err(not_found()),
        Some(role) if role >= needed => Ok(()),
        Some(role) => Err(Error::Forbidden(format!(
            "you are {} in project {project}; this needs {}",
            role.as_str(),
            needed.as_str()
        ))),
    }
}

/// Server admins only (maintenance mode, draining nodes): anyone else is
/// refused, naming `what`; so is an admin's token limited to a project.
pub fn require_server_admin(caller: &Caller, what: &str) -> Result<(), Error> {
    match &caller.project {
        _ if caller.is_server_admin() => Ok(()),
        Some(project) if caller.is_admin => Err(Error::Forbidden(format!(
            "{what} is for server admins: this token is limited to project {project} and has its rights only"
        ))),
        _ => Err(Error::Forbidden(format!("{what} is for server admins"))),
    }
}
