//! The files of a spool directory: listing them, opening them without
//! following links, reading their records, and writing to the quarantine.

use crate::quarantine_dir;
use serde::Serialize;
use serde_json::{Value, json};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A replay that creates a run started offline leaves its id in
/// `created-<local id>` for the process that logs to it (the SDK's
/// `created_run`); removed by that process, or by a replay a week later.
pub(crate) const CREATED_PREFIX: &str = "created-";
const CREATED_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// A line longer than this is skipped as unreadable (a batch is at most
/// 5,000 points or 8 MiB of texts), so a hostile file cannot exhaust memory.
const MAX_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// Whether `name` is a spool file's name.
fn is_spool_name(name: &str) -> bool {
    name.starts_with("sdk-") && name.ends_with(".jsonl")
}

/// Whether `path` is a directory itself, not a link to one.
pub fn real_dir(path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) => Ok(metadata.is_dir()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// The spool files of `dir` (regular files only), oldest first (ties by
/// name). Run ids left for a process a week ago or more are removed on the way.
pub fn spool_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // `DirEntry::metadata` does not follow links.
        let Ok(metadata) = entry.metadata() else { continue };
        if name.starts_with(CREATED_PREFIX) && metadata.is_file() {
            let old = metadata
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age > CREATED_KEEP);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        if is_spool_name(&name) && metadata.is_file() {
            files.push((metadata.modified().ok(), entry.path()));
        }
    }
    files.sort();
    Ok(files.into_iter().map(|(_, path)| path).collect())
}

/// Opens an existing spool file to read and append, never through a link
/// and never anything but a regular file (a FIFO would block the reader).
/// `None` when it is gone (replayed meanwhile).
pub(crate) fn open_existing(path: &Path) -> io::Result<Option<File>> {
    let opened = OpenOptions::new()
        .read(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(Some(file))
}

/// Reads a file from a position of its own (`pread`), so appending to the
/// same file (which moves its offset to the end) never cuts the reading short.
pub(crate) struct ReadAt<'a> {
    file: &'a File,
    offset: u64,
}

impl<'a> ReadAt<'a> {
    pub fn start(file: &'a File) -> ReadAt<'a> {
        ReadAt { file, offset: 0 }
    }
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let read = self.file.read_at(buf, self.offset)?;
        self.offset += read as u64;
        Ok(read)
    }
}

/// Reads one record a line, skipping (and counting) lines that are not
/// JSON objects: a crash's partial last line, or a line over the limit.
pub(crate) struct Records<R> {
    reader: BufReader<R>,
    pub skipped: usize,
}

impl<R: io::Read> Records<R> {
    pub fn new(source: R) -> Records<R> {
        Records {
            reader: BufReader::new(source),
            skipped: 0,
        }
    }

    pub fn next_record(&mut self) -> io::Result<Option<Value>> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = (&mut self.reader)
                .take(MAX_LINE_BYTES)
                .read_until(b'\n', &mut line)?;
            if read == 0 {
                return Ok(None);
            }
            if line.last() != Some(&b'\n') {
                // Over the limit (skip to its end), or the partial last line of a crash.
                if read as u64 == MAX_LINE_BYTES {
                    self.reader.skip_until(b'\n')?;
                }
                self.skipped += 1;
                continue;
            }
            match serde_json::from_slice::<Value>(&line) {
                Ok(record) if record.is_object() => return Ok(Some(record)),
                _ => self.skipped += 1,
            }
        }
    }
}

/// A spool file's first line says which run it is for.
fn describe_run(header: Option<&Value>) -> String {
    let Some(header) = header else {
        return "unknown run (no header line)".into();
    };
    match header["run_id"].as_str() {
        Some(id) => id.to_string(),
        None => format!(
            "a new run {} in project {}",
            header["name"].as_str().unwrap_or("?"),
            header["project"].as_str().unwrap_or("?")
        ),
    }
}

/// One file of a spool directory, summed up for `gpuctl sync --list`.
#[derive(Debug, Serialize)]
pub struct SpoolFile {
    pub file: String,
    /// The run's id, or the run it would create.
    pub run: String,
    pub records: usize,
    pub points: usize,
    pub texts: usize,
    /// Seconds since the epoch of its last change.
    pub modified: Option<u64>,
    /// Why the SDK spooled it; for a quarantined file, what the server answered.
    pub reason: Option<String>,
    /// A quarantined file's HTTP status from the server.
    pub status: Option<u16>,
}

/// What `gpuctl sync --list` shows.
#[derive(Debug, Serialize)]
pub struct Listing {
    pub spool_dir: String,
    /// Waiting for the server (replayed by the next sync).
    pub pending: Vec<SpoolFile>,
    /// Refused by the server (replayed with `--quarantined`).
    pub quarantined: Vec<SpoolFile>,
}

/// The spool's files and its quarantine, without sending anything.
pub fn list(dir: &Path) -> io::Result<Listing> {
    let summarise = |paths: Vec<PathBuf>| -> io::Result<Vec<SpoolFile>> {
        paths
            .iter()
            .filter_map(|path| summary(path).transpose())
            .collect()
    };
    Ok(Listing {
        spool_dir: dir.display().to_string(),
        pending: summarise(spool_files(dir)?)?,
        quarantined: summarise(quarantined_files(dir)?)?,
    })
}

/// The files of `dir`'s quarantine (none when it is not a folder of its own).
pub fn quarantined_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let quarantine = quarantine_dir(dir);
    if !real_dir(&quarantine)? {
        return Ok(Vec::new());
    }
    spool_files(&quarantine)
}

/// One file summed up (None when it is gone).
pub fn summary(path: &Path) -> io::Result<Option<SpoolFile>> {
    let Some(file) = open_existing(path)? else {
        return Ok(None);
    };
    let modified = file
        .metadata()?
        .modified()
        .ok()
        .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    let mut records = Records::new(ReadAt::start(&file));
    let mut summary = SpoolFile {
        file: path.display().to_string(),
        run: String::new(),
        records: 0,
        points: 0,
        texts: 0,
        modified,
        reason: None,
        status: None,
    };
    let mut header = None;
    while let Some(record) = records.next_record()? {
        match record["type"].as_str().unwrap_or_default() {
            "run" => {
                if let Some(reason) = record["reason"].as_str() {
                    summary.reason = Some(reason.to_string());
                }
                header.get_or_insert(record);
            }
            "refused" => {
                summary.status = record["status"].as_u64().and_then(|s| u16::try_from(s).ok());
                summary.reason = record["message"].as_str().map(str::to_string);
            }
            "run_created" => {}
            kind => {
                summary.records += 1;
                if kind == "batch" {
                    summary.points += record["points"].as_array().map_or(0, Vec::len);
                    summary.texts += record["texts"].as_array().map_or(0, Vec::len);
                }
            }
        }
    }
    summary.run = describe_run(header.as_ref());
    Ok(Some(summary))
}

/// Moves the quarantined files back into the spool, for a replay after the
/// cause was fixed; returns how many. A name already in the spool stays put.
pub fn restore_quarantined(dir: &Path) -> io::Result<usize> {
    let mut moved = 0;
    for path in quarantined_files(dir)? {
        let Some(name) = path.file_name() else { continue };
        let target = dir.join(name);
        if std::fs::symlink_metadata(&target).is_ok() {
            continue;
        }
        std::fs::rename(&path, &target)?;
        moved += 1;
    }
    Ok(moved)
}

/// Appends refused records to the quarantine file of a spool file,
/// creating the quarantine folder (0700) and the file (0600) as needed.
pub(crate) struct QuarantineFile {
    pub path: PathBuf,
    file: File,
}

impl QuarantineFile {
    /// The quarantine file for `source` (a spool file of `dir`), its run line
    /// written when it is new: the run's id when known, else `header`.
    pub fn open(
        dir: &Path,
        source: &Path,
        header: &Value,
        run_id: Option<&str>,
    ) -> io::Result<QuarantineFile> {
        let quarantine = quarantine_dir(dir);
        if !real_dir(&quarantine)? {
            std::fs::DirBuilder::new().mode(0o700).create(&quarantine)?;
        }
        let name = source
            .file_name()
            .ok_or_else(|| io::Error::other("a spool file without a name"))?;
        let path = quarantine.join(name);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)?;
        let metadata = file.metadata()?;
        if !metadata.is_file() || metadata.nlink() != 1 {
            return Err(io::Error::other(format!(
                "{} is not a regular file of its own",
                path.display()
            )));
        }
        let mut quarantined = QuarantineFile { path, file };
        if metadata.len() == 0 {
            let mut run = match run_id {
                Some(id) => json!({"type": "run", "run_id": id}),
                None => header.clone(),
            };
            if let Some(fields) = run.as_object_mut() {
                fields.remove("reason");
                fields.insert("type".into(), json!("run"));
            }
            quarantined.write(&run)?;
        }
        Ok(quarantined)
    }

    /// The server's refusal, before the records it holds for.
    pub fn refused(&mut self, status: u16, message: &str) -> io::Result<()> {
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.write(&json!({"type": "refused", "status": status, "message": message, "time": time}))
    }

    /// A record (run lines and earlier refusals are not copied).
    pub fn record(&mut self, record: &Value) -> io::Result<()> {
        match record["type"].as_str() {
            Some("run" | "run_created" | "refused") => Ok(()),
            _ => self.write(record),
        }
    }

    fn write(&mut self, record: &Value) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)
    }

    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }
}

/// Leaves `run_id` for `local_id` beside the spool file `path` (only for a
/// local id the SDK could have made: letters, digits, `-` and `_`).
pub(crate) fn remember_created(path: &Path, local_id: &str, run_id: &str) -> io::Result<()> {
    let valid = (1..=64).contains(&local_id.len())
        && local_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let Some(dir) = path.parent().filter(|_| valid) else {
        return Ok(());
    };
    let marker = dir.join(format!("{CREATED_PREFIX}{local_id}"));
    let temporary = dir.join(format!("{CREATED_PREFIX}{local_id}.tmp"));
    // A leftover (or a planted link) goes first: the new file is created, never opened.
    match std::fs::remove_file(&temporary) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(run_id.as_bytes())?;
    std::fs::rename(&temporary, &marker)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Vec<Value>, usize) {
        let mut records = Records::new(text.as_bytes());
        let mut found = Vec::new();
        while let Some(record) = records.next_record().unwrap() {
            found.push(record);
        }
        (found, records.skipped)
    }

    #[test]
    fn lines_that_are_not_whole_json_objects_are_skipped_and_counted() {
        let (records, skipped) =
            read("{\"type\":\"run\"}\n[1,2]\nnot json\n{\"type\":\"batch\"}\n{\"type\":\"ba");
        assert_eq!(records, vec![json!({"type": "run"}), json!({"type": "batch"})]);
        assert_eq!(skipped, 3, "an array, a broken line and the partial last line");
    }

    #[test]
    fn a_refusal_about_the_record_is_told_from_one_about_the_run() {
        assert!(crate::about_the_record(422) && crate::about_the_record(409));
        assert!(
            !crate::about_the_record(403) && !crate::about_the_record(404) && !crate::about_the_record(401)
        );
        assert!(crate::retry_later(503) && crate::retry_later(429) && !crate::retry_later(404));
    }
}
