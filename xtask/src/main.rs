//! Build tasks that plain `cargo build` cannot do.
//!
//! `cargo xtask site [--release]`: builds the console's hydrate bundle and
//! static site into `target/site` without cargo-leptos or wasm-bindgen-cli.
//!
//! 1. `cargo build -p frontend --target wasm32-unknown-unknown`;
//! 2. wasm-bindgen, as a library (`wasm-bindgen-cli-support`, pinned to the
//!    same version as the `wasm-bindgen` crate), into `target/site/pkg`;
//! 3. with `--release`, `wasm-opt` when npm's binaryen is installed;
//! 4. the stylesheet and `public/` beside it;
//! 5. the manual (`docs/`, an mdBook, built by the pinned `mdbook-driver`)
//!    into `target/site/docs`, which the server serves at `/docs/`.
//!
//! `cargo xtask book`: step 5 alone, for writing the manual.
//!
//! `cargo xtask dist [--debug]`: a release package in `target/dist`:
//!
//! 1. the site (release bundle) into `target/dist/site`;
//! 2. `gpuplane-server`, `gpuplane-agent` and `gpuctl` built with
//!    `GPUPLANE_EMBED_SITE` pointing there, so the server carries the
//!    console inside it (`server/build.rs`);
//! 3. `gpuplane-VERSION-ARCH-linux/` with `bin/` (the binaries stripped of
//!    their symbols), the systemd units, the container recipe, the
//!    Prometheus scrape config and Grafana dashboard (`monitoring/`) and
//!    `SHA256SUMS`, then its `.tar.gz` and the tarball's own `.sha256`.
//!
//! `cargo xtask layers`: the server's and the bench's modules import only
//! down their declared order and in no circle (`layers.rs`).
//!
//! `--debug` builds both with the debug profiles instead: seconds instead of
//! many minutes, which is how the test script checks the packaging.

mod layers;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
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
        ["site"] => build_site(false, &target_dir().join("site")),
        ["site", "--release"] => build_site(true, &target_dir().join("site")),
        ["book"] => build_book(&workspace_root().join("docs"), &target_dir().join("site/docs")),
        ["dist"] => dist(true),
        ["dist", "--debug"] => dist(false),
        ["layers"] => layers::run(&workspace_root()),
        _ => {
            eprintln!(
                "usage: cargo xtask site [--release]\n       cargo xtask book\n       cargo xtask dist [--debug]\n       cargo xtask layers"
            );
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

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(workspace_root());
    command
}

/// Builds the console's site into `site`.
fn build_site(release: bool, site: &Path) -> anyhow::Result<()> {
    let root = workspace_root();
    let target_dir = target_dir();
    let pkg = site.join("pkg");
    let profile = if release { "wasm-release" } else { "dev" };
    let started = Instant::now();

    eprintln!("xtask: building the hydrate bundle ({profile} profile)");
    let status = cargo()
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
    copy_dir(&root.join("public"), site)?;
    build_book(&root.join("docs"), &site.join("docs"))?;

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

/// Builds the manual (the mdBook in `book`) into `out`.
fn build_book(book: &Path, out: &Path) -> anyhow::Result<()> {
    eprintln!("xtask: the manual into {}", out.display());
    let mut manual = mdbook_driver::MDBook::load(book).context("cannot load the manual (docs/)")?;
    manual.config.build.build_dir = out.to_path_buf();
    // A chapter SUMMARY.md names must exist: no empty page made up for it.
    manual.config.build.create_missing = false;
    manual.build().context("cannot build the manual")
}

/// The binaries a package carries, as cargo names their packages and files.
const BINARIES: [&str; 3] = ["gpuplane-server", "gpuplane-agent", "gpuctl"];

/// Builds the release package (see the module docs).
fn dist(release: bool) -> anyhow::Result<()> {
    let root = workspace_root();
    let out = target_dir().join("dist");
    let started = Instant::now();

    let site = out.join("site");
    if site.exists() {
        std::fs::remove_dir_all(&site)?;
    }
    build_site(release, &site)?;

    eprintln!("xtask: building {} with the console inside", BINARIES.join(", "));
    let mut build = cargo();
    build.args(["build", "--locked"]);
    if release {
        build.arg("--release");
    }
    for binary in BINARIES {
        build.args(["--package", binary]);
    }
    let status = build
        .env("GPUPLANE_EMBED_SITE", std::path::absolute(&site)?)
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("the build of the binaries failed");
    }

    let name = format!(
        "gpuplane-{}-{}-linux{}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        if release { "" } else { "-debug" }
    );
    let package = out.join(&name);
    if package.exists() {
        std::fs::remove_dir_all(&package)?;
    }
    std::fs::create_dir_all(package.join("bin"))?;
    let binaries = target_dir().join(if release { "release" } else { "debug" });
    for binary in BINARIES {
        let copy = package.join("bin").join(binary);
        std::fs::copy(binaries.join(binary), &copy).with_context(|| format!("cannot copy {binary}"))?;
        if release {
            // Symbols are half of a release binary; a panic still names its file and line.
            let status = Command::new("strip")
                .arg(&copy)
                .status()
                .context("cannot run strip (binutils)")?;
            if !status.success() {
                bail!("strip {binary} failed");
            }
        }
    }
    copy_dir(&root.join("dist/systemd"), &package.join("systemd"))?;
    copy_dir(&root.join("dist/monitoring"), &package.join("monitoring"))?;
    std::fs::copy(root.join("dist/container/Dockerfile"), package.join("Dockerfile"))?;
    std::fs::copy(
        root.join("dist/container/compose.yaml"),
        package.join("compose.yaml"),
    )?;
    std::fs::copy(root.join("README.md"), package.join("README.md"))?;
    std::fs::write(package.join("SHA256SUMS"), checksums(&package)?)?;

    let tarball = out.join(format!("{name}.tar.gz"));
    let status = Command::new("tar")
        .arg("-C")
        .arg(&out)
        .arg("-czf")
        .arg(&tarball)
        .arg(&name)
        .status()
        .context("cannot run tar")?;
    if !status.success() {
        bail!("tar failed");
    }
    let tarball_name = format!("{name}.tar.gz");
    std::fs::write(
        out.join(format!("{tarball_name}.sha256")),
        format!("{}  {tarball_name}\n", sha256_of(&tarball)?),
    )?;
    eprintln!(
        "xtask: {} ({} MiB) in {:.1}s",
        tarball.display(),
        std::fs::metadata(&tarball)?.len() / (1024 * 1024),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `sha256sum` lines (`HEX  PATH`) for every file under `dir`, by path.
fn checksums(dir: &Path) -> anyhow::Result<String> {
    let mut files = Vec::new();
    list_files(dir, dir, &mut files)?;
    files.sort();
    let mut lines = String::new();
    for file in files {
        lines += &format!("{}  {file}\n", sha256_of(&dir.join(&file))?);
    }
    Ok(lines)
}

fn list_files(root: &Path, dir: &Path, files: &mut Vec<String>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            list_files(root, &path, files)?;
        } else {
            let relative = path.strip_prefix(root)?;
            files.push(
                relative
                    .to_str()
                    .context("a file name that is not UTF-8")?
                    .to_string(),
            );
        }
    }
    Ok(())
}

fn sha256_of(path: &Path) -> anyhow::Result<String> {
    let mut hasher = Sha256::new();
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
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
