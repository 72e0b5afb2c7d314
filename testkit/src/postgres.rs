//! A real PostgreSQL server for tests: Debian's `postgresql` package,
//! started in a temporary directory (`initdb`, then `pg_ctl start`), as the
//! `postgres` user through `runuser` when the tests run as root, and
//! reached through a Unix socket in that directory, so no port is shared
//! with anything. Each caller of [`Postgres::fresh_database`] gets its own
//! empty database. The server stops when the value is dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A PostgreSQL server of its own, in a temporary directory.
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Postgres {
    /// Creates and starts a server (about a second). Panics with the reason
    /// when PostgreSQL is not installed (`./scripts/test.sh` installs it).
    pub fn start() -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::Builder::new().prefix("gpuplane-pg-").tempdir().unwrap();
        if is_root() {
            // initdb refuses to run as root; the directory becomes the postgres user's.
            let status = Command::new("chown")
                .arg("postgres:")
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(
                status.success(),
                "cannot give {} to the postgres user",
                dir.path().display()
            );
        }
        let postgres = Postgres { dir, bin };
        let data = postgres.data_dir();
        postgres.run(
            "initdb",
            &[
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--no-sync",
                "-D",
                path(&data),
            ],
        );
        let options = format!(
            "-c listen_addresses='' -k {} -c fsync=off -c max_connections=200",
            postgres.dir.path().display()
        );
        let log = postgres.dir.path().join("server.log");
        postgres.run(
            "pg_ctl",
            &["-w", "-o", &options, "-l", path(&log), "-D", path(&data), "start"],
        );
        postgres
    }

    /// The URL of a new, empty database on this server.
    pub async fn fresh_database(&self) -> String {
        use sqlx::Connection;
        let name = format!("test_{}", ulid::Ulid::new().to_string().to_lowercase());
        let mut admin = sqlx::PgConnection::connect(&self.url("postgres")).await.unwrap();
        sqlx::Executor::execute(&mut admin, format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        admin.close().await.unwrap();
        self.url(&name)
    }

    /// `postgres://` URL of database `name`, over the socket in the temporary directory.
    fn url(&self, name: &str) -> String {
        format!(
            "postgres://postgres@localhost/{name}?host={}",
            self.dir.path().display()
        )
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A PostgreSQL program, run as the postgres user when we are root.
    fn command(&self, program: &str) -> Command {
        if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(self.bin.join(program));
            command
        } else {
            Command::new(self.bin.join(program))
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let output = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
        assert!(
            output.status.success(),
            "{program} failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
        );
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data_dir();
        let _ = self
            .command("pg_ctl")
            .args(["-m", "immediate", "-D", path(&data), "stop"])
            .output();
    }
}

fn path(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

/// The directory of `initdb` and `pg_ctl`: `$GPUPLANE_PG_BIN`, else the
/// newest `/usr/lib/postgresql/N/bin` (where Debian puts them).
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GPUPLANE_PG_BIN") {
        return PathBuf::from(dir);
    }
    let versions = std::fs::read_dir("/usr/lib/postgresql").unwrap_or_else(|_| {
        panic!("PostgreSQL is not installed: `apt-get install postgresql` (./scripts/test.sh does)")
    });
    versions
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .map(|version| PathBuf::from(format!("/usr/lib/postgresql/{version}/bin")))
        .expect("no version under /usr/lib/postgresql")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
