//! Reading a growing log file as numbered lines, from any line on.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Bytes read per call, so one busy job cannot starve the others.
const READ_CHUNK: usize = 1 << 20;
/// A "line" longer than this without a newline is shipped anyway.
const MAX_PENDING: usize = 1 << 20;

pub struct LineReader {
    path: PathBuf,
    offset: u64,
    /// The number the next complete line gets.
    pub next_n: i64,
    pending: Vec<u8>,
}

impl LineReader {
    /// A reader positioned after the first `done` lines of the file.
    pub fn resume(path: &Path, done: i64) -> LineReader {
        let mut reader = LineReader {
            path: path.to_path_buf(),
            offset: 0,
            next_n: 1,
            pending: Vec::new(),
        };
        if done > 0 {
            let Ok(bytes) = std::fs::read(path) else {
                return reader;
            };
            let mut seen = 0;
            // If the file has fewer lines than the server, ship only what comes next.
            reader.offset = bytes.len() as u64;
            for (at, byte) in bytes.iter().enumerate() {
                if *byte == b'\n' {
                    seen += 1;
                    if seen == done {
                        reader.offset = at as u64 + 1;
                        break;
                    }
                }
            }
            reader.next_n = done + 1;
        }
        reader
    }

    /// Complete lines written since the last call: `(first line number, lines)`.
    pub fn read(&mut self) -> (i64, Vec<String>) {
        let first = self.next_n;
        let mut lines = Vec::new();
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return (first, lines);
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return (first, lines);
        }
        let mut chunk = Vec::with_capacity(READ_CHUNK.min(64 * 1024));
        let Ok(read) = (&mut file).take(READ_CHUNK as u64).read_to_end(&mut chunk) else {
            return (first, lines);
        };
        self.offset += read as u64;
        for byte in chunk {
            if byte == b'\n' {
                lines.push(decode(&std::mem::take(&mut self.pending)));
            } else {
                self.pending.push(byte);
                if self.pending.len() >= MAX_PENDING {
                    lines.push(decode(&std::mem::take(&mut self.pending)));
                }
            }
        }
        self.next_n += lines.len() as i64;
        (first, lines)
    }

    /// After the process ended: a last line that had no newline.
    pub fn finish(&mut self) -> Option<(i64, String)> {
        if self.pending.is_empty() {
            return None;
        }
        let n = self.next_n;
        self.next_n += 1;
        Some((n, decode(&std::mem::take(&mut self.pending))))
    }
}

/// UTF-8 (lossy), without a trailing `\r`, and only what a terminal would
/// show after carriage returns (progress bars rewrite their line).
fn decode(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.strip_suffix('\r').unwrap_or(&text);
    text.rsplit('\r').next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lines_are_numbered_across_reads_and_resumes() {
        let dir = std::env::temp_dir().join(format!("gpuplane-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.log");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(b"one\ntwo\nthr").unwrap();
        let mut reader = LineReader::resume(&path, 0);
        assert_eq!(reader.read(), (1, vec!["one".to_string(), "two".to_string()]));
        file.write_all(b"ee\r\nprogress 10%\rprogress 100%\nfour")
            .unwrap();
        assert_eq!(
            reader.read(),
            (3, vec!["three".to_string(), "progress 100%".to_string()])
        );
        assert_eq!(reader.finish(), Some((5, "four".to_string())));

        let mut resumed = LineReader::resume(&path, 2);
        assert_eq!(resumed.read().0, 3);
        let mut past_end = LineReader::resume(&path, 9);
        assert_eq!(past_end.next_n, 10);
        assert_eq!(past_end.read(), (10, vec![]));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
