//! The commit a job's working directory is checked out at, read from the
//! `.git` files (no `git` binary needed): shown on the run page.

use std::path::{Path, PathBuf};

/// The repository directory of `dir` or its nearest ancestor: a `.git`
/// directory, or the one a `.git` file points to (worktrees, submodules).
fn git_dir(dir: &Path) -> Option<PathBuf> {
    for candidate in dir.ancestors().take(32) {
        let dot_git = candidate.join(".git");
        if dot_git.is_dir() {
            return Some(dot_git);
        }
        if let Ok(text) = std::fs::read_to_string(&dot_git) {
            let target = text.trim().strip_prefix("gitdir:")?.trim();
            return Some(candidate.join(target));
        }
    }
    None
}

fn is_hash(text: &str) -> bool {
    (text.len() == 40 || text.len() == 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The full hash of HEAD, when `dir` is inside a git checkout.
pub fn head_commit(dir: &Path) -> Option<String> {
    let git = git_dir(dir)?;
    let head = std::fs::read_to_string(git.join("HEAD")).ok()?;
    let head = head.trim();
    let Some(reference) = head.strip_prefix("ref:").map(str::trim) else {
        return is_hash(head).then(|| head.to_string());
    };
    // Worktrees keep their refs in the common directory.
    let common = std::fs::read_to_string(git.join("commondir"))
        .map(|c| git.join(c.trim()))
        .unwrap_or_else(|_| git.clone());
    for base in [&git, &common] {
        if let Ok(hash) = std::fs::read_to_string(base.join(reference)) {
            let hash = hash.trim();
            return is_hash(hash).then(|| hash.to_string());
        }
    }
    let packed = std::fs::read_to_string(common.join("packed-refs")).ok()?;
    packed.lines().find_map(|line| {
        let (hash, name) = line.split_once(' ')?;
        (name == reference && is_hash(hash)).then(|| hash.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn a_branch_a_packed_ref_and_a_detached_head_are_read() {
        let repo = tempfile::tempdir().unwrap();
        let git = repo.path().join(".git");
        std::fs::create_dir_all(git.join("refs/heads")).unwrap();
        let inside = repo.path().join("src/train");
        std::fs::create_dir_all(&inside).unwrap();

        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(git.join("refs/heads/main"), format!("{HASH}\n")).unwrap();
        assert_eq!(head_commit(&inside).as_deref(), Some(HASH));

        std::fs::remove_file(git.join("refs/heads/main")).unwrap();
        std::fs::write(
            git.join("packed-refs"),
            format!("# pack-refs\n{HASH} refs/heads/main\n"),
        )
        .unwrap();
        assert_eq!(head_commit(repo.path()).as_deref(), Some(HASH));

        let detached = HASH.replace('0', "f");
        std::fs::write(git.join("HEAD"), format!("{detached}\n")).unwrap();
        assert_eq!(head_commit(&inside), Some(detached));
    }

    #[test]
    fn outside_a_checkout_there_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(head_commit(dir.path()), None);
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/HEAD"), "ref: refs/heads/new\n").unwrap();
        assert_eq!(head_commit(dir.path()), None, "a branch without commits");
    }
}
