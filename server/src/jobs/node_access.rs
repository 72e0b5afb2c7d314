//! Which nodes a project's jobs may run on: its node policy, as the
//! scheduling pass (`plan`) and submit ask it. Pure; `node_policies` keeps
//! the policies.
//!
//! - A node offers the runners its agent says it runs (`process`, `docker`
//!   when started with `--docker`; a Slurm login host `slurm`, through which
//!   it runs every job but docker ones). A node whose agent does not say
//!   serves nobody.
//! - Docker and Slurm are privileged (a docker job is root on its host; a
//!   Slurm job spends an account): a node offering one serves only projects
//!   granted it.
//! - A node carrying every label of some policy is reserved: it serves only
//!   projects whose policy names labels it carries. A project whose policy
//!   names labels runs only on nodes carrying them.
//! - A project without a policy: nodes nobody reserves, the process runner.
//!
//! A job's `node_selector` chooses among the nodes its policy allows; it is
//! a placement hint, never a boundary.

use gpuplane_api::error::FieldError;
use gpuplane_api::job::Runner;
use gpuplane_api::project::NodePolicy;
use std::collections::{BTreeMap, HashMap};

/// The node policies of one scheduling pass (or one submit).
#[derive(Debug, Clone, Default)]
pub struct NodeAccess {
    policies: HashMap<String, NodePolicy>,
    /// The policy of projects that have none.
    default: NodePolicy,
}

/// Runners a node offers only to projects granted them.
fn privileged(runner: Runner) -> bool {
    matches!(runner, Runner::Docker | Runner::Slurm)
}

/// `team=vision, tier=a`.
pub fn describe_labels(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `process, docker`.
pub fn describe_runners(runners: &[Runner]) -> String {
    runners.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")
}

impl NodeAccess {
    /// Access under these policies, by project name.
    pub fn new(policies: HashMap<String, NodePolicy>) -> NodeAccess {
        NodeAccess {
            policies,
            default: NodePolicy::default(),
        }
    }

    /// The policy `project`'s jobs run under.
    pub fn policy(&self, project: &str) -> &NodePolicy {
        self.policies.get(project).unwrap_or(&self.default)
    }

    /// The project whose policy decides for `project` (`None`: the default
    /// policy, shared by every project without one). Jobs with the same key
    /// and runner may use the same nodes.
    pub fn key<'a>(&self, project: &'a str) -> Option<&'a str> {
        self.policies.contains_key(project).then_some(project)
    }

    /// Whether some policy reserves a node with `labels`.
    pub fn reserved(&self, labels: &BTreeMap<String, String>) -> bool {
        self.policies
            .values()
            .any(|policy| !policy.labels.is_empty() && carries(labels, &policy.labels))
    }

    /// Whether a `runner` job of `project` may run on a node with `labels`
    /// and `offered` runners; `reserved`: what [`NodeAccess::reserved`] says
    /// of the node.
    pub fn admits(
        &self,
        project: &str,
        runner: Runner,
        labels: &BTreeMap<String, String>,
        offered: Option<&[Runner]>,
        reserved: bool,
    ) -> bool {
        let Some(offered) = offered else {
            return false;
        };
        let policy = self.policy(project);
        if offered
            .iter()
            .any(|r| privileged(*r) && !policy.runners.contains(r))
        {
            return false;
        }
        // A Slurm login host sends every job but docker ones through Slurm.
        let runs_as = if offered.contains(&Runner::Slurm) && runner != Runner::Docker {
            Runner::Slurm
        } else {
            runner
        };
        if !offered.contains(&runs_as) || !policy.runners.contains(&runs_as) {
            return false;
        }
        if policy.labels.is_empty() {
            !reserved
        } else {
            carries(labels, &policy.labels)
        }
    }

    /// Why a job of `project` with `runner` and `node_selector` could never
    /// run under the policies, whatever nodes come online (submit and retry
    /// answer 422 with it).
    pub fn check(
        &self,
        project: &str,
        runner: Runner,
        node_selector: &BTreeMap<String, String>,
    ) -> Result<(), FieldError> {
        let policy = self.policy(project);
        let granted = policy.runners.contains(&runner)
            || (runner == Runner::Process && policy.runners.contains(&Runner::Slurm));
        if !granted {
            return Err(FieldError {
                field: "runner".into(),
                message: format!(
                    "project {project} may not use the {runner} runner: its node policy grants {} (a server admin \
                     grants runners with `gpuctl admin project-nodes set`)",
                    describe_runners(&policy.runners)
                ),
            });
        }
        if !policy.labels.is_empty() {
            if let Some((key, value)) = node_selector
                .iter()
                .find(|(key, value)| policy.labels.get(*key).is_some_and(|own| own != *value))
            {
                return Err(FieldError {
                    field: "node_selector".into(),
                    message: format!(
                        "{key}={value} contradicts the node policy of project {project}: its jobs run only on nodes \
                         labelled {}",
                        describe_labels(&policy.labels)
                    ),
                });
            }
            return Ok(());
        }
        if let Some((owner, reserving)) = self
            .policies
            .iter()
            .filter(|(_, other)| !other.labels.is_empty() && carries(node_selector, &other.labels))
            .min_by_key(|(owner, _)| owner.as_str())
        {
            return Err(FieldError {
                field: "node_selector".into(),
                message: format!(
                    "nodes labelled {} are reserved by node policy (project {owner}); project {project} may not use \
                     them",
                    describe_labels(&reserving.labels)
                ),
            });
        }
        Ok(())
    }

    /// Why a job waits when online nodes carry its selector (`selected`:
    /// whether it has one) but none is open to it. `nodes`: those nodes'
    /// names, the runners they offer and whether a policy reserves them.
    pub fn waiting_reason(
        &self,
        project: &str,
        runner: Runner,
        selected: bool,
        nodes: &[(&str, Option<&[Runner]>, bool)],
    ) -> String {
        let policy = self.policy(project);
        let allowed = if policy.labels.is_empty() {
            "nodes no policy reserves".to_string()
        } else {
            format!("nodes labelled {}", describe_labels(&policy.labels))
        };
        let which = match (selected, nodes.len()) {
            (false, 1) => "the one online node is not".to_string(),
            (false, n) => format!("none of the {n} online nodes is"),
            (true, 1) => "the one online node its node_selector matches is not".to_string(),
            (true, n) => format!("none of the {n} online nodes its node_selector matches is"),
        };
        const SHOWN: usize = 5;
        let mut offers: Vec<String> = nodes
            .iter()
            .take(SHOWN)
            .map(|(name, offered, reserved)| {
                let offers = match offered {
                    Some(runners) => describe_runners(runners),
                    None => "its agent does not say: upgrade it".to_string(),
                };
                let reserved = if *reserved { ", reserved" } else { "" };
                format!("{name} ({offers}{reserved})")
            })
            .collect();
        if nodes.len() > SHOWN {
            offers.push(format!("{} more", nodes.len() - SHOWN));
        }
        format!(
            "node policy: {which} open to a {runner} job of project {project} (it may use {allowed}; runners: {}; \
             the nodes offer: {})",
            describe_runners(&policy.runners),
            offers.join(", ")
        )
    }
}

/// Whether `labels` include every one of `wanted`.
fn carries(labels: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn access() -> NodeAccess {
        NodeAccess::new(HashMap::from([
            (
                "vision".to_string(),
                NodePolicy {
                    labels: labels(&[("team", "vision")]),
                    runners: vec![Runner::Process, Runner::Docker],
                },
            ),
            (
                "hpc".to_string(),
                NodePolicy {
                    labels: BTreeMap::new(),
                    runners: vec![Runner::Slurm],
                },
            ),
        ]))
    }

    #[test]
    fn reserved_nodes_serve_only_their_projects() {
        let access = access();
        let team = labels(&[("team", "vision")]);
        let process = Some(&[Runner::Process][..]);
        assert!(access.reserved(&team));
        assert!(access.admits("vision", Runner::Process, &team, process, true));
        assert!(!access.admits("default", Runner::Process, &team, process, true));
        // The project bound to labels stays on them.
        assert!(!access.admits("vision", Runner::Process, &BTreeMap::new(), process, false));
        assert!(access.admits("default", Runner::Process, &BTreeMap::new(), process, false));
    }

    #[test]
    fn privileged_runners_need_a_grant() {
        let access = access();
        let none = BTreeMap::new();
        let docker_host = Some(&[Runner::Process, Runner::Docker][..]);
        let slurm_host = Some(&[Runner::Slurm][..]);
        // A docker host serves only projects granted docker, process jobs included.
        assert!(!access.admits("default", Runner::Process, &none, docker_host, false));
        let team = labels(&[("team", "vision")]);
        assert!(access.admits("vision", Runner::Docker, &team, docker_host, true));
        // A Slurm host runs process jobs through Slurm, for projects granted it.
        assert!(access.admits("hpc", Runner::Process, &none, slurm_host, false));
        assert!(access.admits("hpc", Runner::Slurm, &none, slurm_host, false));
        assert!(!access.admits("default", Runner::Process, &none, slurm_host, false));
        assert!(!access.admits("hpc", Runner::Docker, &none, slurm_host, false));
        // An agent that does not say what it runs gets nothing.
        assert!(!access.admits("default", Runner::Process, &none, None, false));
    }

    #[test]
    fn submit_refuses_what_could_never_run() {
        let access = access();
        let none = BTreeMap::new();
        assert_eq!(
            access.check("default", Runner::Docker, &none).unwrap_err().field,
            "runner"
        );
        assert!(access.check("hpc", Runner::Process, &none).is_ok());
        let other_team = labels(&[("team", "nlp")]);
        assert_eq!(
            access
                .check("vision", Runner::Process, &other_team)
                .unwrap_err()
                .field,
            "node_selector"
        );
        let reserved = labels(&[("team", "vision"), ("gpu", "a100")]);
        let refused = access.check("default", Runner::Process, &reserved).unwrap_err();
        assert!(refused.message.contains("reserved"), "{}", refused.message);
        assert!(access.check("vision", Runner::Process, &reserved).is_ok());
    }
}
