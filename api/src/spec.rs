//! Validation of job specs, the same code wherever it runs: the server (one
//! 422 with every bad field, before anything is written), `gpuctl validate`
//! and `gpuctl job submit` on the user's machine. Also `retry --set` changes.

use crate::error::FieldError;
use crate::job::{JobSpec, Runner};

/// A partition, account or QOS name as `sbatch` takes it: letters,
/// digits, `_ . , -`, not starting with `-` (sbatch would read an option).
pub fn check_slurm_name(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 128 {
        return Err("must be 1 to 128 characters".into());
    }
    if value.starts_with('-') {
        return Err("must not start with `-`".into());
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ',' | '-'))
    {
        return Err("may hold only letters, digits and `_ . , -`".into());
    }
    Ok(())
}

/// The most GPUs one job may ask for on one node.
pub const MAX_GPUS_PER_JOB: i64 = 1024;
pub const MAX_ATTEMPTS: i64 = 100;
/// The most jobs one job may wait for (`after`).
pub const MAX_DEPENDENCIES: usize = 64;
/// The longest time limit a job may have (366 days).
pub const MAX_TIME_LIMIT_S: i64 = 366 * 86_400;
/// The longest name a job (or a sweep) may have, in characters.
pub const MAX_NAME_LEN: usize = 200;
/// Secret variables per job, and the longest secret value.
const MAX_SECRET_ENV: usize = 64;
const MAX_SECRET_BYTES: usize = 16 * 1024;

/// What this server allows beyond a well-formed spec (from its settings).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Registries a docker image may come from; `None`: any.
    pub allowed_image_registries: Option<Vec<String>>,
}

/// `POST /api/v1/jobs/validate`'s answer for a spec a submit would accept.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpecCheck {
    /// The reason it would wait with if it were submitted now (the
    /// scheduler's pass over the nodes and quotas as they are, or
    /// maintenance mode). Empty: it would start (queued jobs ahead aside).
    pub notes: Vec<String>,
}

/// Checks a spec against the server's `policy`; returns one error per bad field.
pub fn validate(spec: &JobSpec, policy: &Policy) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut bad = |field: &str, message: String| {
        errors.push(FieldError {
            field: field.to_string(),
            message,
        })
    };
    if spec.name.trim().is_empty() {
        bad("name", "must not be empty".into());
    } else if spec.name.chars().count() > MAX_NAME_LEN {
        bad("name", format!("must be at most {MAX_NAME_LEN} characters"));
    }
    match spec.command.first() {
        None => bad(
            "command",
            "must not be empty: give the program and its arguments as a list".into(),
        ),
        Some(program) if program.trim().is_empty() => bad("command[0]", "must name a program".into()),
        Some(_) => {}
    }
    if let Some(at) = spec.command.iter().position(|arg| arg.contains('\0')) {
        bad(&format!("command[{at}]"), "must not contain NUL bytes".into());
    }
    if let Some(dir) = &spec.working_dir
        && !dir.starts_with('/')
    {
        bad(
            "working_dir",
            format!("must be an absolute path on the agent host, got `{dir}` (paths are never rewritten)"),
        );
    }
    for key in spec.env.keys() {
        if !valid_env_name(key) {
            bad(
                "env",
                format!("`{key}` is not a valid variable name (letters, digits, '_', not first a digit)"),
            );
        }
    }
    for (key, value) in &spec.env {
        if value.contains('\0') {
            bad("env", format!("the value of `{key}` contains a NUL byte"));
        }
    }
    if spec.secret_env.len() > MAX_SECRET_ENV {
        bad("secret_env", format!("at most {MAX_SECRET_ENV} secret variables"));
    }
    for (name, value) in &spec.secret_env {
        let field = format!("secret_env.{name}");
        let valid_name = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            bad(
                "secret_env",
                format!("`{name}` is not a variable name (letters, digits, `_`)"),
            );
        } else if name.starts_with("GPUCTL_")
            || name.starts_with("GPUPLANE_")
            || name == "CUDA_VISIBLE_DEVICES"
        {
            bad(&field, "is set by GPUPlane itself".into());
        } else if spec.env.contains_key(name) {
            bad(&field, "is also in env: give it in one of the two".into());
        } else if value.contains('\0') {
            bad(&field, "contains a NUL byte".into());
        } else if value.len() > MAX_SECRET_BYTES {
            bad(&field, format!("is longer than {MAX_SECRET_BYTES} bytes"));
        }
    }
    match (spec.runner, &spec.image) {
        (Runner::Docker, None) => bad("image", "is required with runner = docker".into()),
        (Runner::Docker, Some(image)) if image.trim().is_empty() => {
            bad("image", "is required with runner = docker".into())
        }
        // `docker run` would read `-v/:/host` and the like as its own option.
        (Runner::Docker, Some(image)) if image.starts_with('-') => bad(
            "image",
            "must not start with `-` (docker would read it as an option)".into(),
        ),
        (Runner::Docker, Some(image)) if image.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            bad("image", "must not contain spaces or control characters".into())
        }
        (Runner::Process | Runner::Slurm, Some(_)) => {
            bad("image", "is only used with runner = docker".into())
        }
        (Runner::Docker, Some(image)) => {
            if let Some(allowed) = &policy.allowed_image_registries {
                let registry = crate::job::image_registry(image);
                if !allowed.contains(&registry) {
                    let message = if allowed.is_empty() {
                        format!(
                            "comes from {registry}, but this server runs no docker images (allowed_image_registries is empty)"
                        )
                    } else {
                        format!(
                            "comes from {registry}, which this server does not allow (allowed: {}); \
                             pin the image by digest (@sha256:…) for a reproducible run",
                            allowed.join(", ")
                        )
                    };
                    bad("image", message);
                }
            }
        }
        _ => {}
    }
    if spec.resources.gpu < 0 {
        bad("resources.gpu", "must be 0 (the cpu_only lane) or more".into());
    } else if spec.resources.gpu > MAX_GPUS_PER_JOB {
        bad("resources.gpu", format!("must be at most {MAX_GPUS_PER_JOB}"));
    }
    let nodes = spec.resources.nodes;
    if !(1..=crate::job::MAX_NODES_PER_JOB).contains(&nodes) {
        bad(
            "resources.nodes",
            format!("must be between 1 and {}", crate::job::MAX_NODES_PER_JOB),
        );
    } else if nodes > 1 && spec.resources.gpu < 1 {
        bad(
            "resources.nodes",
            "a multi-node job needs resources.gpu of 1 or more on each node".into(),
        );
    }
    if let Some(label) = &spec.resources.colocate {
        if nodes <= 1 {
            bad(
                "resources.colocate",
                "only applies to a multi-node job (resources.nodes of 2 or more)".into(),
            );
        } else if spec.runner == Runner::Slurm {
            bad(
                "resources.colocate",
                "Slurm chooses a Slurm job's nodes; colocate places the members of a job on agents".into(),
            );
        } else if label.is_empty()
            || label.len() > 253
            || label.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            bad(
                "resources.colocate",
                "must name a node label: 1 to 253 characters without spaces or control characters".into(),
            );
        }
    }
    if !crate::valid_priority(spec.priority) {
        bad("priority", "must be between -2^62 and 2^62 (MAX_I64_SAFE)".into());
    }
    if spec.max_attempts < 1 {
        bad("max_attempts", "must be at least 1".into());
    } else if spec.max_attempts > MAX_ATTEMPTS {
        bad("max_attempts", format!("must be at most {MAX_ATTEMPTS}"));
    }
    if !(0..=86_400).contains(&spec.retry_cooldown_s) {
        bad("retry_cooldown_s", "must be between 0 and 86400 seconds".into());
    }
    if spec.on_hang == crate::job::OnHang::Restart && spec.max_attempts < 2 {
        bad(
            "on_hang",
            "restart retries the job, which needs max_attempts of 2 or more".into(),
        );
    }
    if spec.after.len() > MAX_DEPENDENCIES {
        bad(
            "after",
            format!("has {} jobs; at most {MAX_DEPENDENCIES}", spec.after.len()),
        );
    }
    for (at, text) in spec.after.iter().enumerate() {
        match text.parse::<crate::job::Dependency>() {
            Ok(dependency) => {
                let earlier = spec.after[..at]
                    .iter()
                    .filter_map(|other| other.parse::<crate::job::Dependency>().ok())
                    .any(|other| other.job_id == dependency.job_id);
                if earlier {
                    bad(
                        &format!("after[{at}]"),
                        format!("{} is listed twice", dependency.job_id),
                    );
                }
            }
            Err(message) => bad(&format!("after[{at}]"), message),
        }
    }
    if let Some(limit) = spec.time_limit_s
        && !(1..=MAX_TIME_LIMIT_S).contains(&limit)
    {
        bad(
            "time_limit_s",
            format!(
                "must be between 1 second and {MAX_TIME_LIMIT_S} seconds (366 days); leave it out for no limit"
            ),
        );
    }
    if let Some(array) = &spec.array
        && let Err(message) = array.parse::<crate::array::ArraySpec>()
    {
        bad("array", message);
    }
    for error in crate::experiment::check_tags("tags", &spec.tags) {
        bad("tags", error.message);
    }
    if let Some(slurm) = &spec.slurm {
        let fields = [
            ("slurm.partition", &slurm.partition),
            ("slurm.account", &slurm.account),
            ("slurm.qos", &slurm.qos),
        ];
        for (field, value) in fields {
            if let Some(value) = value
                && let Err(why) = check_slurm_name(value)
            {
                bad(field, why);
            }
        }
    }
    for (key, value) in &spec.node_selector {
        if key.is_empty() {
            bad("node_selector", format!("has an empty key (value `{value}`)"));
        }
    }
    if !spec.allow_interactive
        && let Some(why) = interactive(&spec.command)
    {
        bad(
            "command",
            format!(
                "{why}: it would wait for keyboard input, and jobs get none (stdin is /dev/null). \
                 Make it non-interactive, or set allow_interactive to run it anyway"
            ),
        );
    }
    for (at, dir) in spec.watch_dirs.iter().enumerate() {
        if dir.trim().is_empty() {
            bad(&format!("watch_dirs[{at}]"), "must not be empty".into());
        }
    }
    if let Some(git) = &spec.git {
        let plain = |text: &str, max: usize| {
            !text.is_empty() && text.len() <= max && !text.chars().any(char::is_control)
        };
        if !plain(&git.repository, 1000) {
            bad(
                "git.repository",
                "must be 1 to 1000 characters without control characters".into(),
            );
        } else if has_credentials(&git.repository) {
            bad(
                "git.repository",
                "must not contain credentials (user:password@): they would be shown to everyone who can see the job".into(),
            );
        }
        if git.branch.as_deref().is_some_and(|branch| !plain(branch, 255)) {
            bad(
                "git.branch",
                "must be 1 to 255 characters without control characters".into(),
            );
        }
        if !(7..=64).contains(&git.commit.len()) || !git.commit.chars().all(|c| c.is_ascii_hexdigit()) {
            bad(
                "git.commit",
                format!("`{}` is not a commit id (7 to 64 hex digits)", git.commit),
            );
        }
    }
    if let Some(url) = &spec.observability_url {
        let lower = url.to_ascii_lowercase();
        let web = (lower.starts_with("https://") || lower.starts_with("http://")) && url.contains("://");
        if !web || url.len() > 2000 || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            bad(
                "observability_url",
                "must be an http:// or https:// URL of at most 2000 characters, without spaces".into(),
            );
        } else if has_credentials(url) {
            bad(
                "observability_url",
                "must not contain credentials (user:password@): everyone who can see the job sees it".into(),
            );
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// A URL carrying a password or token: `scheme://user:secret@host/…`, or
/// any user in an http(s) URL (`https://ghp_token@github.com/…`). An ssh
/// user (`ssh://git@host/…`, `git@host:team/repo`) is not a secret.
pub fn has_credentials(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    match authority.rsplit_once('@') {
        Some((userinfo, _)) => userinfo.contains(':') || scheme.to_ascii_lowercase().starts_with("http"),
        None => false,
    }
}

/// Applies `retry --set` changes to a spec; one error per bad key.
pub fn apply_changes(
    spec: &mut JobSpec,
    changes: &std::collections::BTreeMap<String, String>,
) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    for (key, value) in changes {
        let mut bad = |message: String| {
            errors.push(FieldError {
                field: format!("set.{key}"),
                message,
            })
        };
        let number = |value: &str| {
            value
                .trim()
                .parse::<i64>()
                .map_err(|_| format!("`{value}` is not a whole number"))
        };
        match key.as_str() {
            "command" => match serde_json::from_str::<Vec<String>>(value) {
                Ok(argv) => spec.command = argv,
                Err(_) if !value.trim_start().starts_with('[') => {
                    spec.command = value.split_whitespace().map(str::to_string).collect()
                }
                Err(error) => bad(format!("not a JSON list of strings: {error}")),
            },
            "working_dir" => spec.working_dir = Some(value.clone()),
            "image" => spec.image = Some(value.clone()),
            "resources.gpu" => match number(value) {
                Ok(gpus) => spec.resources.gpu = gpus,
                Err(message) => bad(message),
            },
            "resources.nodes" => match number(value) {
                Ok(nodes) => spec.resources.nodes = nodes,
                Err(message) => bad(message),
            },
            "priority" => match number(value) {
                Ok(priority) => spec.priority = priority,
                Err(message) => bad(message),
            },
            "max_attempts" => match number(value) {
                Ok(attempts) => spec.max_attempts = attempts,
                Err(message) => bad(message),
            },
            "retry_cooldown_s" => match number(value) {
                Ok(seconds) => spec.retry_cooldown_s = seconds,
                Err(message) => bad(message),
            },
            "time_limit_s" if value.trim().eq_ignore_ascii_case("none") => spec.time_limit_s = None,
            "time_limit_s" => match crate::duration::parse_seconds(value) {
                Ok(seconds) => spec.time_limit_s = Some(seconds),
                Err(message) => bad(format!("{message}; or `none` for no limit")),
            },
            "watch_dirs" => {
                spec.watch_dirs = value
                    .split(',')
                    .map(|d| d.trim().to_string())
                    .filter(|d| !d.is_empty())
                    .collect()
            }
            other => {
                if let Some(name) = other.strip_prefix("env.") {
                    spec.env.insert(name.to_string(), value.clone());
                } else if let Some(label) = other.strip_prefix("node_selector.") {
                    spec.node_selector.insert(label.to_string(), value.clone());
                } else {
                    bad("unknown field; use env.NAME, resources.gpu, resources.nodes, command, working_dir, image, priority, max_attempts, retry_cooldown_s, time_limit_s, node_selector.KEY or watch_dirs".into());
                }
            }
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// Why a command would wait for input, if it would: a bare REPL, a program
/// read from stdin (`python -`), `-i`, or a debugger (`--pdb`, `-m pdb`).
pub fn interactive(command: &[String]) -> Option<String> {
    let program = command.first()?.rsplit('/').next().unwrap_or_default();
    let args = &command[1..];
    let is_python = program.starts_with("python") || program.starts_with("ipython");
    let is_shell = matches!(program, "bash" | "sh" | "zsh" | "dash" | "fish");
    let is_repl = is_python || is_shell || matches!(program, "node" | "R" | "irb" | "julia" | "ghci" | "lua");
    if is_repl && args.is_empty() {
        return Some(format!("`{program}` alone starts an interactive session"));
    }
    if args.iter().any(|a| a == "--pdb" || a == "--ipdb") {
        return Some("`--pdb` stops in a debugger on the first failure".into());
    }
    if is_python {
        if let Some(at) = args.iter().position(|a| a == "-m")
            && args.get(at + 1).is_some_and(|m| m == "pdb" || m == "ipdb")
        {
            return Some("`-m pdb` runs the program under an interactive debugger".into());
        }
        // Options come before the script; `-c` and `-m` end them.
        for arg in args {
            match arg.as_str() {
                "-" => return Some(format!("`{program} -` reads the program from stdin")),
                "-i" => return Some(format!("`{program} -i` opens a prompt when the script ends")),
                "-c" | "-m" => break,
                a if !a.starts_with('-') => break,
                _ => {}
            }
        }
    }
    if is_shell && args.first().is_some_and(|a| a == "-i") {
        return Some(format!("`{program} -i` is an interactive shell"));
    }
    None
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The candidate closest to `unknown`, when it is close enough to be a
/// misspelling of it ("did you mean …?"): at most a third of its
/// characters (and at least one) differ.
pub fn closest<'a>(unknown: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let (distance, best) = candidates
        .into_iter()
        .map(|name| (edit_distance(unknown, name), name))
        .min()?;
    (distance <= (unknown.chars().count() / 3).max(1)).then_some(best)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_I64_SAFE;
    use expect_test::expect;

    /// Fuzz: any bytes, and any JSON object of a spec's fields with any
    /// values, parse and validate without a panic (an `i64::MIN` priority
    /// once did).
    #[test]
    fn fuzz_job_spec() {
        bolero::check!().for_each(|bytes: &[u8]| {
            if let Ok(spec) = serde_json::from_slice::<JobSpec>(bytes) {
                let _ = validate(&spec, &Policy::default());
            }
        });
        // Integers near the edges (where overflows live) half of the time.
        let edgy = |(pick, raw): (u8, i64)| -> i64 {
            let edges = [
                i64::MIN,
                i64::MIN + 1,
                -1,
                0,
                1,
                MAX_I64_SAFE,
                MAX_I64_SAFE + 1,
                i64::MAX,
            ];
            if pick % 2 == 0 {
                edges[(pick as usize / 2) % edges.len()]
            } else {
                raw
            }
        };
        type Number = (u8, i64);
        type Fields = (
            String,
            Number,
            Number,
            Number,
            (Number, Number, Vec<String>, String),
            (String, String, bool),
        );
        let validated = std::sync::atomic::AtomicUsize::new(0);
        bolero::check!().with_type::<Fields>().for_each(
            |(
                name,
                priority,
                max_attempts,
                gpus,
                (time_limit, cooldown, command, working_dir),
                (image, env, interactive),
            )| {
                let spec = serde_json::json!({
                    "name": name, "priority": edgy(*priority), "max_attempts": edgy(*max_attempts),
                    "resources": {"gpu": edgy(*gpus)}, "time_limit_s": edgy(*time_limit),
                    "retry_cooldown_s": edgy(*cooldown), "command": command, "working_dir": working_dir,
                    "image": image, "env": {env: env}, "allow_interactive": interactive,
                });
                if let Ok(spec) = serde_json::from_value::<JobSpec>(spec) {
                    let _ = validate(&spec, &Policy::default());
                    validated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            },
        );
        assert!(validated.into_inner() > 0, "the generated specs reach validation");
    }

    fn check(spec: JobSpec) -> String {
        match validate(&spec, &Policy::default()) {
            Ok(()) => "ok".into(),
            Err(errors) => errors
                .iter()
                .map(|e| format!("{}: {}\n", e.field, e.message))
                .collect(),
        }
    }

    #[test]
    fn repository_urls_with_credentials_are_recognised() {
        for url in [
            "https://me:secret@github.com/team/repo.git",
            "https://ghp_token@github.com/team/repo.git",
            "ssh://git:pw@host/repo",
        ] {
            assert!(has_credentials(url), "{url}");
        }
        for url in [
            "https://github.com/team/repo.git",
            "ssh://git@host/repo",
            "git@github.com:team/repo.git",
            "/home/me/repo",
        ] {
            assert!(!has_credentials(url), "{url}");
        }
    }

    #[test]
    fn a_plain_spec_is_valid() {
        assert_eq!(
            check(JobSpec::new("train", vec!["python".into(), "train.py".into()])),
            "ok"
        );
    }

    #[test]
    fn the_lowest_i64_is_an_invalid_priority_not_a_panic() {
        let mut spec = JobSpec::new("x", vec!["true".into()]);
        spec.priority = i64::MIN;
        let errors = validate(&spec, &Policy::default()).unwrap_err();
        assert_eq!(errors[0].field, "priority");
        spec.priority = -MAX_I64_SAFE;
        assert!(validate(&spec, &Policy::default()).is_ok());
    }

    #[test]
    fn every_bad_field_is_reported() {
        let mut spec = JobSpec::new("", vec![]);
        spec.working_dir = Some("relative/dir".into());
        spec.resources.gpu = -1;
        spec.priority = MAX_I64_SAFE + 1;
        spec.max_attempts = 0;
        spec.runner = Runner::Docker;
        spec.env.insert("1BAD".into(), "x".into());
        spec.time_limit_s = Some(0);
        spec.after = vec!["job_01A".into(), "job_01A:finished".into(), "run_01B".into()];
        spec.git = Some(crate::job::GitSource {
            repository: "https://me:ghp_secret@github.com/team/repo.git".into(),
            branch: Some(String::new()),
            commit: "HEAD".into(),
            dirty: false,
        });
        expect![[r#"
            name: must not be empty
            command: must not be empty: give the program and its arguments as a list
            working_dir: must be an absolute path on the agent host, got `relative/dir` (paths are never rewritten)
            env: `1BAD` is not a valid variable name (letters, digits, '_', not first a digit)
            image: is required with runner = docker
            resources.gpu: must be 0 (the cpu_only lane) or more
            priority: must be between -2^62 and 2^62 (MAX_I64_SAFE)
            max_attempts: must be at least 1
            after[1]: job_01A is listed twice
            after[2]: `run_01B` is not a job id (job_…)
            time_limit_s: must be between 1 second and 31622400 seconds (366 days); leave it out for no limit
            git.repository: must not contain credentials (user:password@): they would be shown to everyone who can see the job
            git.branch: must be 1 to 255 characters without control characters
            git.commit: `HEAD` is not a commit id (7 to 64 hex digits)
        "#]]
        .assert_eq(&check(spec));
    }

    #[test]
    fn slurm_names_that_sbatch_would_misread_are_refused() {
        let mut spec = JobSpec::new("t", vec!["true".into()]);
        spec.runner = Runner::Slurm;
        spec.slurm = Some(crate::job::SlurmPlacement {
            partition: Some("a100,h100".into()),
            account: Some("ml-team_2".into()),
            qos: Some("normal".into()),
        });
        assert!(validate(&spec, &Policy::default()).is_ok());
        spec.slurm = Some(crate::job::SlurmPlacement {
            partition: Some("--wrap=rm".into()),
            account: Some("ml team".into()),
            qos: Some(String::new()),
        });
        spec.image = Some("python:3".into());
        expect![[r#"
            image: is only used with runner = docker
            slurm.partition: must not start with `-`
            slurm.account: may hold only letters, digits and `_ . , -`
            slurm.qos: must be 1 to 128 characters
        "#]]
        .assert_eq(&check(spec));
    }

    #[test]
    fn a_retry_may_change_the_time_limit_or_remove_it() {
        let mut spec = JobSpec::new("t", vec!["true".into()]);
        let set =
            |key: &str, value: &str| std::collections::BTreeMap::from([(key.to_string(), value.to_string())]);
        apply_changes(&mut spec, &set("time_limit_s", "1h30m")).unwrap();
        assert_eq!(spec.time_limit_s, Some(5400));
        apply_changes(&mut spec, &set("time_limit_s", "7200")).unwrap();
        assert_eq!(spec.time_limit_s, Some(7200));
        apply_changes(&mut spec, &set("time_limit_s", "none")).unwrap();
        assert_eq!(spec.time_limit_s, None);
        let errors = apply_changes(&mut spec, &set("time_limit_s", "2 hours")).unwrap_err();
        assert_eq!(errors[0].field, "set.time_limit_s");
        assert!(
            errors[0].message.contains("is not a duration"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn commands_that_wait_for_input_are_refused_unless_allowed() {
        let refused = |argv: &[&str]| interactive(&argv.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        expect![[r#"
            Some("`python` alone starts an interactive session")
            Some("`python3 -` reads the program from stdin")
            Some("`python -i` opens a prompt when the script ends")
            Some("`--pdb` stops in a debugger on the first failure")
            Some("`-m pdb` runs the program under an interactive debugger")
            Some("`bash -i` is an interactive shell")
            Some("`ipython` alone starts an interactive session")
            None
            None
            None
            None
        "#]]
        .assert_eq(
            &[
                &["python"][..],
                &["/usr/bin/python3", "-"],
                &["python", "-i", "train.py"],
                &["pytest", "--pdb"],
                &["python", "-m", "pdb", "train.py"],
                &["bash", "-i"],
                &["ipython"],
                &["python", "train.py", "-i", "in.txt"],
                &["python", "-c", "print(1)"],
                &["bash", "-c", "echo hi"],
                &["torchrun", "--nproc_per_node=8", "train.py"],
            ]
            .iter()
            .map(|argv| format!("{:?}\n", refused(argv)))
            .collect::<String>(),
        );
        let mut spec = JobSpec::new("repl", vec!["python".into()]);
        assert!(check(spec.clone()).starts_with("command: `python` alone starts an interactive session"));
        spec.allow_interactive = true;
        assert_eq!(check(spec), "ok");
    }

    #[test]
    fn docker_images_that_read_as_options_are_refused() {
        let field_errors = |image: &str| {
            let mut spec = JobSpec::new("d", vec!["true".into()]);
            spec.runner = Runner::Docker;
            spec.image = Some(image.into());
            validate(&spec, &Policy::default()).err().unwrap_or_default()
        };
        for hostile in ["-v/:/host", "--privileged", "ubuntu --privileged", "ubuntu\n"] {
            let errors = field_errors(hostile);
            assert_eq!(errors.len(), 1, "{hostile:?}: {errors:?}");
            assert_eq!(errors[0].field, "image");
        }
        assert!(field_errors("ghcr.io/acme/train@sha256:0123abcd").is_empty());
    }

    #[test]
    fn docker_images_come_only_from_allowed_registries() {
        let errors = |image: &str, allowed: Option<&[&str]>| {
            let mut spec = JobSpec::new("d", vec!["true".into()]);
            spec.runner = Runner::Docker;
            spec.image = Some(image.into());
            let policy = Policy {
                allowed_image_registries: allowed.map(|hosts| hosts.iter().map(|h| h.to_string()).collect()),
            };
            validate(&spec, &policy)
                .err()
                .unwrap_or_default()
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
        };
        let allowed: &[&str] = &["nvcr.io", "registry.example.com:5000"];
        assert!(errors("nvcr.io/nvidia/pytorch:24.08-py3", Some(allowed)).is_empty());
        assert!(errors("registry.example.com:5000/train@sha256:0123", Some(allowed)).is_empty());
        assert!(errors("ubuntu", None).is_empty(), "no allowlist: any image");
        assert_eq!(
            errors("pytorch/pytorch:latest", Some(allowed)),
            [
                "image: comes from docker.io, which this server does not allow (allowed: nvcr.io, \
              registry.example.com:5000); pin the image by digest (@sha256:…) for a reproducible run"
            ]
        );
        assert_eq!(
            errors("nvcr.io/nvidia/pytorch:24.08-py3", Some(&[])),
            [
                "image: comes from nvcr.io, but this server runs no docker images (allowed_image_registries is empty)"
            ]
        );
    }

    #[test]
    fn priority_bounds_are_inclusive() {
        let mut spec = JobSpec::new("p", vec!["true".into()]);
        spec.priority = MAX_I64_SAFE;
        assert_eq!(check(spec.clone()), "ok");
        spec.priority = -MAX_I64_SAFE;
        assert_eq!(check(spec), "ok");
    }
}
