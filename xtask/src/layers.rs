//! `cargo xtask layers`: the server's and the bench's modules keep their order.
//!
//! A crate's layer order is the order of the `mod` lines in its root file
//! (`lib.rs` or `main.rs`), lowest first. Every `crate::` and `super::` path
//! in a module's files — imports, paths in code and inside macro calls —
//! must name the module itself or one declared before it; only the root
//! names the root's own items. Inside a folder, the modules in it import
//! each other without a circle. The server's handlers (`api/`) run no SQL
//! themselves: their queries belong to the domain modules. There is no
//! list of exceptions: a path that runs back up fails the check, and the
//! fix is to move code. And no Rust file of the server, the console or the
//! agent, tests included, is longer than a reader can hold (750 lines).

use anyhow::Context;
use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;

/// The crates whose modules are layered, by their source folder and root file.
pub const CRATES: [(&str, &str); 2] = [("server/src", "lib.rs"), ("bench/src", "main.rs")];

/// The folder of the server's HTTP handlers, which run no SQL themselves.
pub const HANDLERS: &str = "api/";

/// The folders whose Rust files stay short, and how short.
pub const SHORT_FILES: [&str; 3] = ["server", "app", "agent"];
pub const MAX_LINES: usize = 750;

/// A module's path from the crate root: `["jobs", "dispatch"]`; the root is `[]`.
type ModulePath = Vec<String>;

/// One path a module names: where it is written, what it names.
struct Reference {
    file: String,
    from: ModulePath,
    to: Vec<String>,
}

/// Reads every `.rs` file under `src` into (file name relative to `src`, text).
pub fn read_sources(src: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut sources = BTreeMap::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in
            std::fs::read_dir(&folder).with_context(|| format!("cannot read {}", folder.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let name = path.strip_prefix(src)?.to_string_lossy().replace('\\', "/");
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                sources.insert(name, text);
            }
        }
    }
    Ok(sources)
}

/// What is wrong with the layering of one crate, given its files' texts;
/// empty when nothing is.
pub fn check(sources: &BTreeMap<String, String>, root_file: &str) -> anyhow::Result<Vec<String>> {
    let root = sources
        .get(root_file)
        .with_context(|| format!("no {root_file}"))?;
    let order = declared_modules(&parse(root_file, root)?);
    let rank = |name: &str| order.iter().position(|module| module == name);
    let modules: BTreeSet<ModulePath> = sources.keys().map(|file| module_path(file, root_file)).collect();
    let mut references = Vec::new();
    for (file, text) in sources {
        if file != root_file && module_path(file, root_file).is_empty() {
            continue; // another crate root beside this one (a `bin/`)
        }
        collect(
            &parse(file, text)?,
            &module_path(file, root_file),
            file,
            &mut references,
        );
    }

    let mut problems = Vec::new();
    // Between the root's modules: only down the declared order.
    for reference in &references {
        let Some(from) = reference.from.first() else {
            continue;
        };
        let to = resolve(&modules, &reference.to);
        let written = format!("crate::{}", reference.to.join("::"));
        match to.first() {
            None => problems.push(format!(
                "{}: `{written}` reaches the crate root from `{from}`; only {root_file} may use its own items",
                reference.file
            )),
            Some(to) if to != from && rank(to) > rank(from) => problems.push(format!(
                "{}: `{written}` runs back up: `{to}` is declared after `{from}` in {root_file}",
                reference.file
            )),
            _ => {}
        }
    }
    // Inside each folder: the modules in it form no circle.
    let mut edges: BTreeMap<ModulePath, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    for reference in &references {
        let to = resolve(&modules, &reference.to);
        let common = reference.from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        if common == 0 || reference.from.len() == common || to.len() == common {
            continue; // the root's modules (ordered above), or a module and its own parent or child
        }
        let example = format!("{} names `crate::{}`", reference.file, to.join("::"));
        edges
            .entry(to[..common].to_vec())
            .or_default()
            .entry(reference.from[common].clone())
            .or_default()
            .entry(to[common].clone())
            .or_insert(example);
    }
    for (folder, graph) in &edges {
        for circle in circles(graph) {
            let steps: Vec<String> = circle
                .windows(2)
                .map(|pair| graph[&pair[0]][&pair[1]].clone())
                .chain(std::iter::once(graph[circle.last().unwrap()][&circle[0]].clone()))
                .collect();
            problems.push(format!(
                "modules in `{}` import each other in a circle ({}): {}",
                folder.join("::"),
                circle.join(" → "),
                steps.join("; ")
            ));
        }
    }
    Ok(problems)
}

/// Files under `folder` that run SQL themselves (`sql!`, `sqlx::query…`).
pub fn sql_in(sources: &BTreeMap<String, String>, folder: &str) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    for (file, text) in sources.iter().filter(|(file, _)| file.starts_with(folder)) {
        if runs_sql(&parse(file, text)?) {
            problems.push(format!(
                "{file} runs SQL: a handler calls a domain module, which runs the query"
            ));
        }
    }
    Ok(problems)
}

/// Whether the tokens call `sql!` or a `sqlx::query…` function.
fn runs_sql(tokens: &TokenStream) -> bool {
    let tokens: Vec<TokenTree> = tokens.clone().into_iter().collect();
    tokens.iter().enumerate().any(|(i, token)| match token {
        TokenTree::Ident(name) if name == "sql" => {
            matches!(tokens.get(i + 1), Some(TokenTree::Punct(bang)) if bang.as_char() == '!')
        }
        TokenTree::Ident(name) if name == "sqlx" && is_path_separator(&tokens, i + 1) => {
            matches!(tokens.get(i + 3), Some(TokenTree::Ident(function)) if function.to_string().starts_with("query"))
        }
        TokenTree::Group(group) => runs_sql(&group.stream()),
        _ => false,
    })
}

fn parse(file: &str, text: &str) -> anyhow::Result<TokenStream> {
    TokenStream::from_str(text).map_err(|error| anyhow::anyhow!("cannot read {file} as Rust tokens: {error}"))
}

/// `jobs/dispatch.rs` → `["jobs", "dispatch"]`; `jobs/mod.rs` → `["jobs"]`.
fn module_path(file: &str, root_file: &str) -> ModulePath {
    if file == root_file {
        return Vec::new();
    }
    let mut path: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    if path.len() == 1 && (path[0] == "main" || path[0] == "lib") {
        return Vec::new();
    }
    path
}

/// The names of the `mod NAME;` lines of a root file, in order.
fn declared_modules(root: &TokenStream) -> Vec<String> {
    let tokens: Vec<TokenTree> = root.clone().into_iter().collect();
    let mut names = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if let (TokenTree::Ident(keyword), Some(TokenTree::Ident(name)), Some(TokenTree::Punct(semicolon))) =
            (token, tokens.get(i + 1), tokens.get(i + 2))
            && keyword == "mod"
            && semicolon.as_char() == ';'
        {
            names.push(name.to_string());
        }
    }
    names
}

/// The longest leading part of `path` that is a module (the root when none is).
fn resolve(modules: &BTreeSet<ModulePath>, path: &[String]) -> ModulePath {
    (0..=path.len())
        .rev()
        .map(|length| path[..length].to_vec())
        .find(|prefix| modules.contains(prefix))
        .unwrap_or_default()
}

/// Adds every `crate::…` and `super::…` path in `tokens`, written in module
/// `module`, to `out`, resolved to a path from the crate root.
fn collect(tokens: &TokenStream, module: &ModulePath, file: &str, out: &mut Vec<Reference>) {
    let tokens: Vec<TokenTree> = tokens.clone().into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            // An inline module, `mod tests { … }`: its `super` is this module.
            TokenTree::Ident(keyword) if keyword == "mod" => {
                if let (Some(TokenTree::Ident(name)), Some(TokenTree::Group(body))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                    && body.delimiter() == Delimiter::Brace
                {
                    let mut inner = module.clone();
                    inner.push(name.to_string());
                    collect(&body.stream(), &inner, file, out);
                    i += 3;
                    continue;
                }
            }
            TokenTree::Ident(start)
                if (start == "crate" || start == "super") && is_path_separator(&tokens, i + 1) =>
            {
                let mut base = if start == "crate" {
                    Vec::new()
                } else {
                    parent(module)
                };
                let mut next = i + 3;
                // `super::super::…`
                while let Some(TokenTree::Ident(more)) = tokens.get(next)
                    && more == "super"
                    && is_path_separator(&tokens, next + 1)
                {
                    base = parent(&base);
                    next += 3;
                }
                i = path_rest(&tokens, next, base, module, file, out);
                continue;
            }
            TokenTree::Group(group) => collect(&group.stream(), module, file, out),
            _ => {}
        }
        i += 1;
    }
}

fn parent(module: &ModulePath) -> ModulePath {
    module[..module.len().saturating_sub(1)].to_vec()
}

/// Whether `tokens[i..]` starts with `::`.
fn is_path_separator(tokens: &[TokenTree], i: usize) -> bool {
    matches!((tokens.get(i), tokens.get(i + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
}

/// Reads the rest of a path after `prefix::` from `tokens[i]` (names, and
/// `{…}` groups of a `use`), adds each full path, and returns where the
/// path ends.
fn path_rest(
    tokens: &[TokenTree],
    mut i: usize,
    mut prefix: Vec<String>,
    module: &ModulePath,
    file: &str,
    out: &mut Vec<Reference>,
) -> usize {
    loop {
        match tokens.get(i) {
            Some(TokenTree::Ident(name)) if name != "self" => {
                prefix.push(name.to_string());
                if is_path_separator(tokens, i + 1) {
                    i += 3;
                    continue;
                }
                i += 1;
            }
            Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
                let inner: Vec<TokenTree> = group.stream().into_iter().collect();
                for item in inner.split(|token| matches!(token, TokenTree::Punct(p) if p.as_char() == ',')) {
                    if !item.is_empty() {
                        path_rest(item, 0, prefix.clone(), module, file, out);
                    }
                }
                return i + 1;
            }
            _ => {} // `*`, `self`, or the end
        }
        out.push(Reference {
            file: file.to_string(),
            from: module.clone(),
            to: prefix,
        });
        return i;
    }
}

/// Every circle in a directed graph, one per strongly connected component
/// of more than one node, in an order a reader can follow.
fn circles(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = graph
        .keys()
        .chain(graph.values().flat_map(BTreeMap::keys))
        .collect();
    let mut found = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for start in nodes {
        if seen.contains(start) {
            continue;
        }
        // A shortest path from `start` back to itself, if any.
        let mut came_from: BTreeMap<String, String> = BTreeMap::new();
        let mut frontier = vec![start.clone()];
        let mut closed = None;
        while closed.is_none() && !frontier.is_empty() {
            let mut next = Vec::new();
            for node in &frontier {
                for target in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
                    if target == start {
                        closed = Some(node.clone());
                        break;
                    }
                    if !came_from.contains_key(target) {
                        came_from.insert(target.clone(), node.clone());
                        next.push(target.clone());
                    }
                }
                if closed.is_some() {
                    break;
                }
            }
            frontier = next;
        }
        if let Some(mut node) = closed {
            let mut circle = vec![node.clone()];
            while node != *start {
                node = came_from[&node].clone();
                circle.push(node.clone());
            }
            circle.reverse();
            seen.extend(circle.iter().cloned());
            found.push(circle);
        }
    }
    found
}

/// The files longer than `max_lines`, with their length.
pub fn long_files(sources: &BTreeMap<String, String>, max_lines: usize) -> Vec<String> {
    sources
        .iter()
        .map(|(file, text)| (file, text.lines().count()))
        .filter(|(_, lines)| *lines > max_lines)
        .map(|(file, lines)| {
            format!("{file}: {lines} lines, more than {max_lines}; split it along its seams")
        })
        .collect()
}

/// `cargo xtask layers`: checks each layered crate and reports every problem.
pub fn run(workspace: &Path) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for (src, root_file) in CRATES {
        let sources = read_sources(&workspace.join(src))?;
        let mut found = check(&sources, root_file)?;
        if src == "server/src" {
            found.extend(sql_in(&sources, HANDLERS)?);
        }
        for problem in found {
            problems.push(format!("{src}/{problem}"));
        }
        println!("{src}: {} files checked", sources.len());
    }
    for folder in SHORT_FILES {
        let sources = read_sources(&workspace.join(folder))?;
        for problem in long_files(&sources, MAX_LINES) {
            problems.push(format!("{folder}/{problem}"));
        }
    }
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("{problem}");
        }
        anyhow::bail!(
            "{} layering problems (see ARCHITECTURE.md, \"Layers\")",
            problems.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    #[test]
    fn the_server_and_the_bench_keep_their_layers() {
        for (src, root_file) in CRATES {
            let problems = check(&read_sources(&workspace().join(src)).unwrap(), root_file).unwrap();
            assert!(problems.is_empty(), "{src}:\n{}", problems.join("\n"));
        }
    }

    #[test]
    fn no_file_is_longer_than_a_reader_can_hold() {
        for folder in SHORT_FILES {
            let long = long_files(&read_sources(&workspace().join(folder)).unwrap(), MAX_LINES);
            assert!(long.is_empty(), "{folder}:\n{}", long.join("\n"));
        }
        let sources = BTreeMap::from([
            ("short.rs".to_string(), "fn f() {}\n".repeat(MAX_LINES)),
            ("long.rs".to_string(), "fn f() {}\n".repeat(MAX_LINES + 1)),
        ]);
        assert_eq!(
            long_files(&sources, MAX_LINES),
            ["long.rs: 751 lines, more than 750; split it along its seams"]
        );
    }

    #[test]
    fn handlers_run_no_sql() {
        let mut sources = read_sources(&workspace().join("server/src")).unwrap();
        assert_eq!(sql_in(&sources, HANDLERS).unwrap(), Vec::<String>::new());
        let health = sources.get_mut("api/health.rs").unwrap();
        health.push_str("\nasync fn count(db: &Db) { let _ = sql!(db, |pool| sqlx::query(\"SELECT 1\").execute(pool).await); }\n");
        let problems = sql_in(&sources, HANDLERS).unwrap();
        assert_eq!(
            problems,
            ["api/health.rs runs SQL: a handler calls a domain module, which runs the query"]
        );
        let tokens = TokenStream::from_str("fn f() { sqlx::query_scalar(\"SELECT 1\"); }").unwrap();
        assert!(runs_sql(&tokens));
        let tokens = TokenStream::from_str("fn f() -> Result<(), sqlx::Error> { Ok(()) }").unwrap();
        assert!(!runs_sql(&tokens));
    }

    #[test]
    fn an_import_that_runs_back_up_fails_the_check() {
        let mut sources = read_sources(&workspace().join("server/src")).unwrap();
        let store = sources.get_mut("store/mod.rs").unwrap();
        store.push_str("\n#[allow(unused_imports)]\nuse crate::api::ApiError;\n");
        let problems = check(&sources, "lib.rs").unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("store/mod.rs: `crate::api::ApiError` runs back up"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_path_in_code_or_a_macro_counts_as_much_as_a_use() {
        let sources = BTreeMap::from([
            (
                "lib.rs".to_string(),
                "mod store;\nmod jobs;\nfn start() {}".to_string(),
            ),
            (
                "store.rs".to_string(),
                "fn f() { let x = my_macro!(crate::jobs::Job); }".to_string(),
            ),
            (
                "jobs.rs".to_string(),
                "use crate::{store::{self, Db}, start};".to_string(),
            ),
        ]);
        let problems = check(&sources, "lib.rs").unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("`crate::start` reaches the crate root from `jobs`"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("`crate::jobs::Job` runs back up"),
            "{problems:?}"
        );
    }

    #[test]
    fn modules_in_one_folder_may_not_import_each_other_in_a_circle() {
        let sources = BTreeMap::from([
            ("lib.rs".to_string(), "mod metrics;".to_string()),
            ("metrics/mod.rs".to_string(), "mod chunk; mod codec;".to_string()),
            (
                "metrics/chunk.rs".to_string(),
                "use super::codec::encode;".to_string(),
            ),
            (
                "metrics/codec.rs".to_string(),
                "mod tests { use super::super::chunk::Chunk; }".to_string(),
            ),
        ]);
        let problems = check(&sources, "lib.rs").unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("modules in `metrics` import each other in a circle (chunk → codec)"),
            "{problems:?}"
        );
    }
}
