//! A real PostgreSQL server for tests: Debian's `postgresql` package,
//! started in a temporary directory (`initdb`, then `pg_ctl start`), as the
//! `postgres` user through `runuser` when the tests run as root, and
//! reached through a Unix socket in that directory, so no port is shared
//! with anything. Each caller of [`Postgres::fresh_database`] gets its own
//! empty database. The server stops when the value is dropped.

use crate::is_root;
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
        create_database(self.dir.path()).await
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

/// The environment variable that runs the suites on PostgreSQL: the socket
/// directory of a running server whose `postgres` user may create
/// databases (`./scripts/test.sh --postgres` starts one and sets it).
pub const TEST_POSTGRES: &str = "GPUPLANE_TEST_POSTGRES";

/// Beside a data dir, the URL of its PostgreSQL database (see [`database_for`]).
const DATABASE_URL_FILE: &str = "test-database-url";

/// The store a test server over `data_dir` uses: the database given to
/// [`use_database`]; else `None` (the SQLite file in the data dir) unless
/// [`TEST_POSTGRES`] is set, and then a database of its own on that
/// server, created on first use and the same for every later server and
/// process over `data_dir` (the URL is kept in a file in it).
pub async fn database_for(data_dir: &Path) -> Option<String> {
    let file = data_dir.join(DATABASE_URL_FILE);
    if let Ok(url) = std::fs::read_to_string(&file) {
        return Some(url);
    }
    let socket_dir = std::env::var_os(TEST_POSTGRES).filter(|dir| !dir.is_empty())?;
    let url = create_database(Path::new(&socket_dir)).await;
    std::fs::create_dir_all(data_dir).unwrap();
    std::fs::write(&file, &url).unwrap();
    Some(url)
}

/// Makes the test servers over `data_dir` use the database at `url`
/// (several data dirs on one database: replicas), whether or not
/// [`TEST_POSTGRES`] is set.
pub fn use_database(data_dir: &Path, url: &str) {
    std::fs::create_dir_all(data_dir).unwrap();
    std::fs::write(data_dir.join(DATABASE_URL_FILE), url).unwrap();
}

/// Every byte the store of the test server over `data_dir` keeps: the files
/// of the data dir (SQLite; checkpoint its log or stop the server first),
/// and on PostgreSQL also every table of its database copied out in
/// binary form (each value as stored, whatever the pages hold), for tests
/// that prove a secret is nowhere in clear.
pub async fn stored_bytes(data_dir: &Path) -> Vec<u8> {
    use futures_util::TryStreamExt;
    use sqlx::Connection;
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(data_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            bytes.extend(std::fs::read(path).unwrap());
        }
    }
    let Some(url) = database_for(data_dir).await else {
        return bytes;
    };
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for table in tables {
        let mut copy = conn
            .copy_out_raw(&format!("COPY \"{table}\" TO STDOUT WITH (FORMAT binary)"))
            .await
            .unwrap();
        while let Some(chunk) = copy.try_next().await.unwrap() {
            bytes.extend_from_slice(&chunk);
        }
    }
    conn.close().await.unwrap();
    bytes
}

/// Creates an empty database on the server listening in `socket_dir`; returns its URL.
async fn create_database(socket_dir: &Path) -> String {
    use sqlx::Connection;
    let name = format!("test_{}", ulid::Ulid::new().to_string().to_lowercase());
    let mut admin = sqlx::PgConnection::connect(&url(socket_dir, "postgres"))
        .await
        .unwrap_or_else(|error| panic!("cannot reach PostgreSQL in {}: {error}", socket_dir.display()));
    sqlx::Executor::execute(&mut admin, format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    admin.close().await.unwrap();
    url(socket_dir, &name)
}

/// `postgres://` URL of database `name`, over the socket in `socket_dir`.
fn url(socket_dir: &Path, name: &str) -> String {
    format!(
        "postgres://postgres@localhost/{name}?host={}",
        socket_dir.display()
    )
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
