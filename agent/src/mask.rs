//! Masking a job's secret values (`secret_env`) as `***` in everything the
//! agent sends of its output: shipped lines and full-log downloads. The
//! files on this host keep what the job wrote.

/// What replaces a secret.
pub const MASK: &str = "***";
/// Shorter values are not masked: they would garble ordinary output.
const MIN_SECRET_LEN: usize = 4;

/// The byte strings to mask for these secret values: each value, and each
/// line of a multi-line value (a PEM key printed line by line), longest first.
pub fn needles<'a>(values: impl IntoIterator<Item = &'a String>) -> Vec<Vec<u8>> {
    let mut needles: Vec<Vec<u8>> = Vec::new();
    for value in values {
        let lines = value.lines().map(|line| line.trim_end_matches('\r'));
        for candidate in std::iter::once(value.as_str()).chain(lines) {
            if candidate.len() >= MIN_SECRET_LEN && !needles.iter().any(|n| n == candidate.as_bytes()) {
                needles.push(candidate.as_bytes().to_vec());
            }
        }
    }
    needles.sort_by_key(|needle| std::cmp::Reverse(needle.len()));
    needles
}

/// `text` with every needle replaced by [`MASK`].
pub fn line(text: &str, needles: &[Vec<u8>]) -> String {
    let mut text = text.to_string();
    for needle in needles {
        // Needles come from UTF-8 strings, so they match on char boundaries.
        let needle = String::from_utf8_lossy(needle);
        if text.contains(needle.as_ref()) {
            text = text.replace(needle.as_ref(), MASK);
        }
    }
    text
}

/// Masks a byte stream read in chunks: holds back just enough of each
/// chunk's end that a secret split across two chunks is still found.
pub struct Masker {
    needles: Vec<Vec<u8>>,
    /// Read but not yet emitted.
    pending: Vec<u8>,
}

impl Masker {
    pub fn new(needles: Vec<Vec<u8>>) -> Masker {
        Masker {
            needles,
            pending: Vec::new(),
        }
    }

    /// Takes the next chunk; returns what can be emitted safely.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        if self.needles.is_empty() {
            return std::mem::take(&mut self.pending);
        }
        self.pending = replace_all(&self.pending, &self.needles);
        // A secret not yet complete starts within the last (longest - 1) bytes.
        let keep = self.needles[0].len() - 1;
        let emit = self.pending.len().saturating_sub(keep);
        self.pending.drain(..emit).collect()
    }

    /// The rest, at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

fn replace_all(bytes: &[u8], needles: &[Vec<u8>]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for needle in needles {
        let finder = memchr::memmem::Finder::new(needle);
        if finder.find(&out).is_none() {
            continue;
        }
        let mut replaced = Vec::with_capacity(out.len());
        let mut at = 0;
        for found in finder.find_iter(&out) {
            replaced.extend_from_slice(&out[at..found]);
            replaced.extend_from_slice(MASK.as_bytes());
            at = found + needle.len();
        }
        replaced.extend_from_slice(&out[at..]);
        out = replaced;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_multi_line_secrets_are_masked() {
        let values = [
            "hunter2-key".to_string(),
            "-----BEGIN KEY-----\nAAAABBBB\n-----END KEY-----".to_string(),
            "ab".to_string(),
        ];
        let needles = needles(values.iter());
        assert_eq!(line("key=hunter2-key!", &needles), "key=***!");
        assert_eq!(
            line("AAAABBBB", &needles),
            "***",
            "each line of a multi-line secret"
        );
        assert_eq!(line("ab cd", &needles), "ab cd", "too short to mask");
    }

    #[test]
    fn a_secret_split_across_chunks_is_still_masked() {
        let secret = "s3cr3t-across-chunks".to_string();
        let text = format!("before {secret} middle {secret}{secret} after\n").repeat(50);
        for size in [1, 2, 3, 7, 19, 20, 21, 64, 4096] {
            let mut masker = Masker::new(needles([&secret]));
            let mut out = Vec::new();
            for chunk in text.as_bytes().chunks(size) {
                out.extend(masker.push(chunk));
            }
            out.extend(masker.finish());
            let out = String::from_utf8(out).unwrap();
            assert!(!out.contains("s3cr3t"), "chunks of {size}");
            assert_eq!(out, text.replace(&secret, MASK), "chunks of {size}");
        }
    }
}
