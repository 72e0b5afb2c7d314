//! With `GPUPLANE_EMBED_SITE=DIR` (an absolute path, set by `cargo xtask dist`), the console's
//! files under DIR are compiled into the binary (`console.rs::EMBEDDED`),
//! so a release is one file to copy. Without it the table is empty and the
//! server serves the files of its `site_root`.
//!
//! It also has cargo rebuild the crate when a migration is added or changed
//! (`sqlx::migrate!` embeds them, and a proc macro cannot say so itself).

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=GPUPLANE_EMBED_SITE");
    println!("cargo:rerun-if-changed=../migrations");
    let mut files = Vec::new();
    if let Some(dir) = std::env::var_os("GPUPLANE_EMBED_SITE") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.is_absolute(),
            "GPUPLANE_EMBED_SITE must be an absolute path, not {}",
            dir.display()
        );
        let dir = dir
            .canonicalize()
            .unwrap_or_else(|error| panic!("GPUPLANE_EMBED_SITE={}: {error}", dir.display()));
        collect(&dir, &dir, &mut files);
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    files.sort();
    let mut table = String::from("&[\n");
    for (route, path) in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            table,
            "    ({route:?}, include_bytes!({:?}) as &[u8]),",
            path.display().to_string()
        )
        .expect("writing to a String");
    }
    table.push(']');
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("embedded_site.rs"), table).expect("cannot write embedded_site.rs");
}

/// Every file under `dir`, as (its path from `root` with `/`, its absolute path).
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(root, &path, files);
        } else {
            let route = path.strip_prefix(root).expect("under the root");
            let route = route
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>();
            files.push((route.join("/"), path));
        }
    }
}
