//! `cargo xtask site [--release]`: builds the console's hydrate bundle and
//! static site into `target/site` without cargo-leptos or wasm-bindgen-cli.
//!
//! 1. `cargo build -p frontend --target wasm32-unknown-unknown`;
//! 2. wasm-bindgen, as a library (`wasm-bindgen-cli-support`, pinned to the
//!    same version as the `wasm-bindgen` crate), into `target/site/pkg`;
//! 3. with `--release`, `wasm-opt` when npm's binaryen is installed;
//! 4. the stylesheet and `public/` beside it.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The bundle's file names: `pkg/gpuplane.js`, `pkg/gpuplane_bg.wasm`, `pkg/gpuplane.css`.
const OUTPUT_NAME: &str = "gpuplane";
const WASM_TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    if let Err(error) = run() {
        eprintln!("xtask: error: {error:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["site"] => build_site(false),
        ["site", "--release"] => build_site(true),
        _ => {
            eprintln!("usage: cargo xtask site [--release]");
            bail!("unknown arguments: {args:?}")
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

fn build_site(release: bool) -> anyhow::Result<()> {
    let root = workspace_root();
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let site = target_dir.join("site");
    let pkg = site.join("pkg");
    let profile = if release { "wasm-release" } else { "dev" };
    let started = Instant::now();

    eprintln!("xtask: building the hydrate bundle ({profile} profile)");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--package",
            "frontend",
            "--lib",
            "--target",
            WASM_TARGET,
            "--profile",
            profile,
        ])
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("the wasm build failed (is the target installed? `rustup target add {WASM_TARGET}`)");
    }
    let profile_dir = if release { "wasm-release" } else { "debug" };
    let wasm = target_dir
        .join(WASM_TARGET)
        .join(profile_dir)
        .join("frontend.wasm");

    eprintln!("xtask: wasm-bindgen {}", wasm.display());
    std::fs::create_dir_all(&pkg)?;
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&wasm)
        .web(true)?
        .typescript(false)
        .out_name(OUTPUT_NAME)
        .generate(&pkg)
        .context("wasm-bindgen failed")?;

    let bundle = pkg.join(format!("{OUTPUT_NAME}_bg.wasm"));
    if release {
        optimise(&root, &bundle)?;
    }

    std::fs::copy(
        root.join("style/main.css"),
        pkg.join(format!("{OUTPUT_NAME}.css")),
    )
    .context("cannot copy style/main.css")?;
    copy_dir(&root.join("public"), &site)?;

    let wasm_size = std::fs::metadata(&bundle)?.len();
    let js_size = std::fs::metadata(pkg.join(format!("{OUTPUT_NAME}.js")))?.len();
    eprintln!(
        "xtask: site ready in {} ({:.1}s): wasm {} KiB, js {} KiB",
        site.display(),
        started.elapsed().as_secs_f64(),
        wasm_size / 1024,
        js_size / 1024
    );
    Ok(())
}

/// Runs npm binaryen's `wasm-opt` (Debian's older one breaks hydration) when it is installed.
fn optimise(root: &Path, bundle: &Path) -> anyhow::Result<()> {
    let wasm_opt = root.join("end2end/node_modules/.bin/wasm-opt");
    if !wasm_opt.exists() {
        eprintln!("xtask: skipping wasm-opt: `npm ci --prefix end2end` installs binaryen");
        return Ok(());
    }
    let status = Command::new(&wasm_opt)
        .arg("-Oz")
        .arg("--enable-bulk-memory")
        .arg("--enable-nontrapping-float-to-int")
        .arg("--enable-sign-ext")
        .arg("--enable-mutable-globals")
        .arg("--enable-reference-types")
        .arg(bundle)
        .arg("-o")
        .arg(bundle)
        .status()
        .context("cannot run wasm-opt")?;
    if !status.success() {
        bail!("wasm-opt failed");
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
