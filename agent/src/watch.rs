//! Watching an attempt's `watch_dirs`: TensorBoard event files become
//! metric points, checkpoint files become checkpoint records. A job with
//! `wandb = "offline"` also has its W&B folder watched: the run files the
//! `wandb` package writes there become points and config the same way.
//!
//! Each event file has at most one batch in flight. Its state (`offset`,
//! and the end of the batch being sent) is written to `watch.json` in the
//! attempt directory before the batch is queued and again once it is
//! acknowledged, so an agent restarted in between sends exactly the same
//! batch (same id, same range) again: the server stores it once.

use crate::files;
use crate::reporter::Reporter;
use gpuplane_api::agent::ReportItem;
use gpuplane_api::event::EventKind;
use gpuplane_api::metric::{Point, Value, key_is_valid};
use gpuplane_tfevents::wandb::{WandbFile, is_wandb_file};
use gpuplane_tfevents::{Corruption, EventFile, Found, is_event_file};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

const STATE_FILE: &str = "watch.json";
const SCAN_EVERY: Duration = Duration::from_secs(1);
const MAX_DEPTH: usize = 4;
/// Checkpoint files by extension.
pub const CHECKPOINT_EXTENSIONS: &[&str] = &["pt", "pth", "ckpt", "safetensors"];

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct FileProgress {
    offset: u64,
    /// The end of the batch queued but not yet acknowledged.
    pending_end: Option<u64>,
}

/// A file's reader: TensorBoard's or W&B's, which read into the same [`Found`].
enum Reader {
    Events(EventFile),
    Wandb(WandbFile),
}

impl Reader {
    fn open(path: &Path, offset: u64) -> Reader {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if is_wandb_file(&name) {
            Reader::Wandb(WandbFile::new(path, offset))
        } else {
            Reader::Events(EventFile::new(path, offset))
        }
    }

    fn offset(&self) -> u64 {
        match self {
            Reader::Events(file) => file.offset,
            Reader::Wandb(file) => file.offset,
        }
    }

    fn set_offset(&mut self, offset: u64) {
        match self {
            Reader::Events(file) => file.offset = offset,
            Reader::Wandb(file) => file.offset = offset,
        }
    }

    fn corrupt(&self) -> Option<&Corruption> {
        match self {
            Reader::Events(file) => file.corrupt.as_ref(),
            Reader::Wandb(file) => file.corrupt.as_ref(),
        }
    }

    fn read_until(&mut self, limit: u64) -> std::io::Result<Found> {
        match self {
            Reader::Events(file) => file.read_until(limit),
            Reader::Wandb(file) => file.read_until(limit),
        }
    }

    /// Batch ids' prefix, by format.
    fn prefix(&self) -> &'static str {
        match self {
            Reader::Events(_) => "tb",
            Reader::Wandb(_) => "wandb",
        }
    }
}

struct Tracked {
    reader: Reader,
    /// `(end offset, reporter sequence number)` of the batch in flight.
    in_flight: Option<(u64, u64)>,
    corruption_reported: bool,
    /// Whether points under tags that cannot be metric keys were reported.
    bad_keys_reported: bool,
}

pub struct Watcher {
    job_id: String,
    attempt: i64,
    dirs: Vec<PathBuf>,
    state_path: PathBuf,
    files: BTreeMap<PathBuf, Tracked>,
    /// Checkpoints: last seen (size, mtime), and whether reported in that state.
    checkpoints: HashMap<PathBuf, ((u64, i64), bool)>,
    next_scan: Instant,
}

impl Watcher {
    /// A watcher over `dirs` (relative ones resolved against `working_dir`), resuming from the attempt dir's state.
    pub fn new(
        job_id: &str,
        attempt: i64,
        attempt_dir: &Path,
        working_dir: &Path,
        dirs: &[String],
    ) -> Watcher {
        let dirs = dirs
            .iter()
            .map(|dir| {
                let joined = if Path::new(dir).is_absolute() {
                    PathBuf::from(dir)
                } else {
                    working_dir.join(dir)
                };
                // `./tb` and `tb/.` name the same files as `tb`: paths are compared as text later.
                joined
                    .components()
                    .filter(|c| !matches!(c, std::path::Component::CurDir))
                    .collect()
            })
            .collect();
        let state_path = attempt_dir.join(STATE_FILE);
        let saved: BTreeMap<PathBuf, FileProgress> = files::read_json(&state_path).unwrap_or_default();
        let mut watcher = Watcher {
            job_id: job_id.to_string(),
            attempt,
            dirs,
            state_path,
            files: BTreeMap::new(),
            checkpoints: HashMap::new(),
            next_scan: Instant::now(),
        };
        for (path, progress) in saved {
            let mut tracked = Tracked {
                reader: Reader::open(&path, progress.offset),
                in_flight: None,
                corruption_reported: false,
                bad_keys_reported: false,
            };
            // Not acknowledged before the restart: resend exactly that batch.
            tracked.in_flight = progress.pending_end.map(|end| (end, u64::MAX));
            watcher.files.insert(path, tracked);
        }
        watcher
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// Reads what is new (scanning the dirs at most once a second unless `now`).
    pub fn poll(&mut self, reporter: &Reporter, now: bool) {
        if self.dirs.is_empty() || (!now && Instant::now() < self.next_scan) {
            return;
        }
        self.next_scan = Instant::now() + SCAN_EVERY;
        let (events, checkpoints) = scan(&self.dirs);
        for path in events {
            self.files.entry(path.clone()).or_insert_with(|| Tracked {
                reader: Reader::open(&path, 0),
                in_flight: None,
                corruption_reported: false,
                bad_keys_reported: false,
            });
        }
        let mut changed = false;
        let paths: Vec<PathBuf> = self.files.keys().cloned().collect();
        for path in paths {
            changed |= self.advance(&path, reporter);
        }
        if changed {
            self.save();
        }
        self.checkpoints(checkpoints, reporter);
    }

    /// Moves one file on: settles an acknowledged batch, or queues the next.
    fn advance(&mut self, path: &Path, reporter: &Reporter) -> bool {
        let (job_id, attempt) = (self.job_id.clone(), self.attempt);
        let Some(tracked) = self.files.get_mut(path) else {
            return false;
        };
        let mut changed = false;
        if let Some((end, seq)) = tracked.in_flight
            && seq != u64::MAX
        {
            if !reporter.is_delivered(seq) {
                return false;
            }
            // Acknowledged: it counts as read; go on with what follows.
            tracked.reader.set_offset(end);
            tracked.in_flight = None;
            changed = true;
        }
        let start = tracked.reader.offset();
        let limit = tracked.in_flight.map_or(u64::MAX, |(end, _)| end);
        let mut found = match tracked.reader.read_until(limit) {
            Ok(found) => found,
            Err(_) => return false, // deleted or unreadable: try again next scan
        };
        // read_until advanced the reader; it only counts as done once acknowledged.
        tracked.reader.set_offset(start);
        if let Some(corruption) = tracked.reader.corrupt().cloned()
            && !tracked.corruption_reported
        {
            tracked.corruption_reported = true;
            reporter.push(ReportItem::Notice {
                job_id: job_id.clone(),
                attempt,
                kind: EventKind::TensorboardCorrupt,
                message: format!(
                    "{} has a corrupt record at byte {} ({}); the points before it are kept, the rest of the file is skipped",
                    path.display(),
                    corruption.offset,
                    corruption.reason
                ),
                severity: None,
            });
        }
        if found.end == start {
            return changed;
        }
        if !found.hparams.is_empty() {
            // Setting the same keys again changes nothing: a re-read after a restart is harmless.
            reporter.push(ReportItem::Config {
                job_id: job_id.clone(),
                attempt,
                config: std::mem::take(&mut found.hparams),
            });
        }
        let tags = &found.tags;
        // A tag no metric key may be (a control character, over 256 bytes)
        // would have the server refuse the whole batch: it is left out, and
        // said once per file.
        let (points, left_out): (Vec<Point>, Vec<Point>) = found
            .scalars
            .iter()
            .map(|s| Point {
                key: tags[s.tag as usize].clone(),
                step: s.step,
                wall_time: s.wall_time,
                value: Value(s.value),
            })
            .partition(|point| key_is_valid(&point.key));
        if let Some(first) = left_out.first()
            && !tracked.bad_keys_reported
        {
            tracked.bad_keys_reported = true;
            reporter.push(ReportItem::Notice {
                job_id: job_id.clone(),
                attempt,
                kind: EventKind::ReportDropped,
                message: format!(
                    "{}: {} point(s) under tags that cannot be metric keys (1-256 bytes, no control characters) were left out, {:?} the first",
                    path.display(),
                    left_out.len(),
                    first.key
                ),
                severity: None,
            });
        }
        if points.is_empty() {
            // Records without scalars (the file version, images, …): just move on.
            tracked.reader.set_offset(found.end);
            tracked.in_flight = None;
            return true;
        }
        let batch_id = format!(
            "{}:{}:{start}-{}",
            tracked.reader.prefix(),
            path_id(path),
            found.end
        );
        // Saved before queueing, so a restart resends exactly this range.
        tracked.in_flight = Some((found.end, u64::MAX));
        self.save();
        let seq = reporter.push(ReportItem::Points {
            job_id,
            attempt,
            batch_id,
            points,
        });
        if let Some(tracked) = self.files.get_mut(path) {
            tracked.in_flight = Some((found.end, seq));
        }
        true
    }

    fn save(&self) {
        let progress: BTreeMap<&PathBuf, FileProgress> = self
            .files
            .iter()
            .map(|(path, tracked)| {
                let progress = FileProgress {
                    offset: tracked.reader.offset(),
                    pending_end: tracked.in_flight.map(|(end, _)| end),
                };
                (path, progress)
            })
            .collect();
        if let Err(error) = files::write_json(&self.state_path, &progress) {
            tracing::warn!(%error, "cannot save the watch state");
        }
    }

    /// Reports checkpoints once they stop changing between two scans.
    fn checkpoints(&mut self, found: Vec<(PathBuf, u64, i64)>, reporter: &Reporter) {
        for (path, size, modified) in found {
            let entry = self
                .checkpoints
                .entry(path.clone())
                .or_insert(((size, modified), false));
            if entry.0 != (size, modified) {
                *entry = ((size, modified), false);
                continue; // still being written
            }
            if !entry.1 {
                entry.1 = true;
                reporter.push(ReportItem::Checkpoint {
                    job_id: self.job_id.clone(),
                    attempt: self.attempt,
                    step: step_from_name(&path),
                    path: path.display().to_string(),
                    size,
                    modified,
                });
            }
        }
    }

    /// Whether every batch queued so far has been acknowledged.
    pub fn settled(&self) -> bool {
        self.files.values().all(|t| t.in_flight.is_none())
    }
}

/// A short stable id for a path (batch ids must not depend on reading order).
fn path_id(path: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Event files (TensorBoard's and W&B's) and checkpoints `(path, size,
/// mtime ms)` under the dirs.
fn scan(dirs: &[PathBuf]) -> (Vec<PathBuf>, Vec<(PathBuf, u64, i64)>) {
    let mut events = Vec::new();
    let mut checkpoints = Vec::new();
    let mut stack: Vec<(PathBuf, usize)> = dirs.iter().map(|d| (d.clone(), 0)).collect();
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            // Not followed: a link a job planted could name another's files.
            let Ok(metadata) = entry.metadata() else { continue };
            if metadata.is_symlink() {
                continue;
            }
            if metadata.is_dir() {
                if depth < MAX_DEPTH {
                    stack.push((path, depth + 1));
                }
                continue;
            }
            let name = entry.file_name().to_string_lossy().to_string();
            if is_event_file(&name) || is_wandb_file(&name) {
                events.push(path);
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| CHECKPOINT_EXTENSIONS.contains(&e))
            {
                let modified = metadata
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as i64);
                checkpoints.push((path, metadata.len(), modified));
            }
        }
    }
    events.sort();
    (events, checkpoints)
}

/// `step_1200.pt`, `epoch=3.ckpt`, `checkpoint-500/model.safetensors`, `iter_9.pth` → the number.
pub fn step_from_name(path: &Path) -> Option<i64> {
    let text = path.to_string_lossy().to_lowercase();
    for marker in ["step", "iter", "epoch", "checkpoint", "ckpt"] {
        let mut rest = text.as_str();
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let digits: String = rest
                .trim_start_matches(['_', '-', '=', '.'])
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if !digits.is_empty() {
                return digits.parse().ok();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_come_from_checkpoint_names() {
        assert_eq!(step_from_name(Path::new("/ckpt/run_1/step_1200.pt")), Some(1200));
        assert_eq!(step_from_name(Path::new("epoch=3.ckpt")), Some(3));
        assert_eq!(
            step_from_name(Path::new("out/checkpoint-500/model.safetensors")),
            Some(500)
        );
        assert_eq!(step_from_name(Path::new("iter_9.pth")), Some(9));
        assert_eq!(step_from_name(Path::new("best.pt")), None);
    }
}
