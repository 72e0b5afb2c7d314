//! Reading a growing log file as numbered lines, from any line on.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Bytes read per call, so one busy job cannot starve the others.
const READ_CHUNK: usize = 1 << 20;
/// Lines longer than this are cut (the file keeps them whole).
pub use gpuplane_api::log::MAX_LINE_BYTES;
/// Room kept at the end of a cut line for the note that says so.
const CUT_NOTE_ROOM: usize = 128;

/// Lines are numbered by the file's newlines, so a resumed reader and the
/// server always agree on which line is which: a long line is cut, never
/// split into several.
pub struct LineReader {
    path: PathBuf,
    offset: u64,
    /// The number the next complete line gets.
    pub next_n: i64,
    pending: Vec<u8>,
    /// Bytes of the current line beyond `max_line`, dropped.
    cut: usize,
    max_line: usize,
    /// The last read reached the end of the file (as it was then).
    at_end: bool,
}

impl LineReader {
    /// A reader positioned after the first `done` lines of the file.
    pub fn resume(path: &Path, done: i64) -> LineReader {
        let mut reader = LineReader {
            path: path.to_path_buf(),
            offset: 0,
            next_n: 1,
            pending: Vec::new(),
            cut: 0,
            max_line: MAX_LINE_BYTES - CUT_NOTE_ROOM,
            at_end: false,
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

    /// Cuts lines at `bytes` instead of [`MAX_LINE_BYTES`].
    pub fn with_max_line(mut self, bytes: usize) -> LineReader {
        self.max_line = bytes.saturating_sub(CUT_NOTE_ROOM).max(1);
        self
    }

    /// Complete lines written since the last call: `(first line number, lines)`.
    pub fn read(&mut self) -> (i64, Vec<String>) {
        let first = self.next_n;
        let mut lines = Vec::new();
        // A file that cannot be read has nothing more to give.
        self.at_end = true;
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
        self.at_end = read < READ_CHUNK;
        for byte in chunk {
            if byte == b'\n' {
                lines.push(self.take_line());
            } else if self.pending.len() < self.max_line {
                self.pending.push(byte);
            } else if byte == b'\r' {
                // A full line rewritten from its start (a progress bar): a
                // terminal would show only what follows.
                self.pending.clear();
                self.cut = 0;
            } else {
                self.cut += 1;
            }
        }
        self.next_n += lines.len() as i64;
        (first, lines)
    }

    /// After the process ended: a last line that had no newline.
    /// Whether the last `read` reached the end of the file. A read stops
    /// after `READ_CHUNK` bytes, which may hold no newline at all (a long
    /// line), so "no new lines" does not mean "nothing left to read".
    pub fn at_end(&self) -> bool {
        self.at_end
    }

    pub fn finish(&mut self) -> Option<(i64, String)> {
        if self.pending.is_empty() {
            return None;
        }
        let n = self.next_n;
        self.next_n += 1;
        Some((n, self.take_line()))
    }

    fn take_line(&mut self) -> String {
        let mut line = decode(&std::mem::take(&mut self.pending));
        if self.cut > 0 {
            let file = self.path.file_name().unwrap_or_default().to_string_lossy();
            line.push_str(&format!(
                " [… {} more bytes cut; the whole line is in {file} on the agent host]",
                self.cut
            ));
            self.cut = 0;
        }
        line
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

    /// A line longer than one read: the reader is not at the end until it
    /// has read past it, however many reads that takes.
    #[test]
    fn a_line_longer_than_a_read_is_read_to_its_end() {
        let dir = std::env::temp_dir().join(format!("gpuplane-tail-chunk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.log");
        std::fs::write(&path, format!("{}\ndone\n", "\u{1}".repeat(READ_CHUNK * 2 + 10))).unwrap();
        let mut reader = LineReader::resume(&path, 0).with_max_line(4 * READ_CHUNK);
        let mut lines = Vec::new();
        let mut reads = 0;
        loop {
            lines.extend(reader.read().1);
            reads += 1;
            if reader.at_end() {
                break;
            }
        }
        assert_eq!(reads, 3);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), READ_CHUNK * 2 + 10);
        assert_eq!(lines[1], "done");
        assert_eq!(reader.finish(), None);
        let mut missing = LineReader::resume(&dir.join("missing.log"), 0);
        assert_eq!(missing.read(), (1, vec![]));
        assert!(missing.at_end(), "a file that is not there has nothing left");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn long_lines_are_cut_not_split_so_numbers_match_the_file() {
        let dir = std::env::temp_dir().join(format!("gpuplane-tail-long-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.log");
        let long = "\u{1}".repeat(100);
        std::fs::write(
            &path,
            format!("a\n{long}\nb\nbar 1%\r{}\rbar 100%\nc", "x".repeat(50)),
        )
        .unwrap();
        let mut reader = LineReader::resume(&path, 0).with_max_line(10 + CUT_NOTE_ROOM);
        let (first, lines) = reader.read();
        assert_eq!(first, 1);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0], "a");
        assert!(lines[1].starts_with(&"\u{1}".repeat(10)), "{:?}", lines[1]);
        assert!(lines[1].contains("90 more bytes cut"), "{:?}", lines[1]);
        assert_eq!(lines[2], "b");
        assert_eq!(lines[3], "bar 100%", "a rewritten line shows its last state");
        assert_eq!(reader.finish(), Some((5, "c".to_string())));
        // A resumed reader agrees: line 3 is `b`.
        let mut resumed = LineReader::resume(&path, 2).with_max_line(10 + CUT_NOTE_ROOM);
        assert_eq!(resumed.read(), (3, vec!["b".to_string(), "bar 100%".to_string()]));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
