//! The git checkout `gpuctl job submit` runs in: repository, branch, commit
//! and what is not committed, read with the `git` program (argv, no shell).
//! No git, or no checkout, means nothing to record.

use gpuplane_api::job::GitSource;
use std::path::Path;
use std::process::{Command, Stdio};

/// A checkout and its uncommitted state.
#[derive(Debug)]
pub struct Checkout {
    pub source: GitSource,
    /// Tracked files with uncommitted changes (`M train.py`).
    pub changed: Vec<String>,
    /// Files git does not track.
    pub untracked: Vec<String>,
}

/// The checkout containing `dir`, if `dir` is in one and git is installed.
pub fn checkout(dir: &Path) -> Option<Checkout> {
    let commit = git(dir, &["rev-parse", "--verify", "HEAD"])?;
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    let branch = git(dir, &["symbolic-ref", "--quiet", "--short", "HEAD"]);
    let repository = git(dir, &["remote", "get-url", "origin"])
        .map(|url| without_credentials(&url))
        .unwrap_or(top);
    // Not trimmed: each line starts with two status columns, often a space.
    let status = git_output(dir, &["status", "--porcelain=v1", "--untracked-files=all"]).unwrap_or_default();
    let mut changed = Vec::new();
    let mut untracked = Vec::new();
    for line in status.lines().filter(|line| line.len() > 3) {
        match line.strip_prefix("?? ") {
            Some(path) => untracked.push(path.to_string()),
            None => changed.push(format!("{} {}", line[..2].trim(), &line[3..])),
        }
    }
    Some(Checkout {
        source: GitSource {
            repository,
            branch,
            commit,
            dirty: !changed.is_empty(),
        },
        changed,
        untracked,
    })
}

/// `git ARGS` in `dir`: its trimmed stdout when it succeeds and says something.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let text = git_output(dir, args)?;
    (!text.trim().is_empty()).then(|| text.trim().to_string())
}

/// `git ARGS` in `dir`: its stdout when it succeeds.
fn git_output(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    output.status.success().then_some(())?;
    String::from_utf8(output.stdout).ok()
}

/// A remote URL without its user and password (`https://token@host/x` →
/// `https://host/x`): the job's page is seen by the whole project.
fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://{host}{path}"),
        None => url.to_string(),
    }
}

/// `a, b, c and 4 more`.
pub fn some_of(paths: &[String], shown: usize) -> String {
    let mut text = paths.iter().take(shown).cloned().collect::<Vec<_>>().join(", ");
    if paths.len() > shown {
        text.push_str(&format!(" and {} more", paths.len() - shown));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_removed_from_remote_urls() {
        for (url, expected) in [
            (
                "https://me:secret@github.com/team/repo.git",
                "https://github.com/team/repo.git",
            ),
            (
                "https://ghp_x@github.com/team/repo",
                "https://github.com/team/repo",
            ),
            (
                "https://github.com/team/repo.git",
                "https://github.com/team/repo.git",
            ),
            ("git@github.com:team/repo.git", "git@github.com:team/repo.git"),
        ] {
            assert_eq!(without_credentials(url), expected);
            assert!(
                !gpuplane_api::spec::has_credentials(&without_credentials(url)),
                "{url}"
            );
        }
    }

    #[test]
    fn long_lists_are_cut() {
        let paths: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        assert_eq!(some_of(&paths, 2), "a, b and 2 more");
        assert_eq!(some_of(&paths, 5), "a, b, c, d");
    }
}
