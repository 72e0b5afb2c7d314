//! Text from jobs and users, made safe to show in a terminal or open in a
//! spreadsheet. A job's output keeps its colours (SGR) and carriage returns,
//! as progress bars need, and loses every sequence that acts on the
//! terminal itself: window titles, the clipboard and hyperlinks (OSC),
//! device control strings (DCS), cursor moves and reports, and the rest.
//! Any other text shows its control characters as visible escapes. A CSV
//! cell that a spreadsheet would run as a formula is quoted as text.

/// `text` with every control character but `\n` and `\t` shown as an
/// escape (`\x1b`, `\u{9b}`), so nothing in it can drive the terminal.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return text.into();
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown.into()
}

/// What the log filter is in the middle of, across pieces of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Text,
    /// After 0xC2 in text: a C1 control (U+0080–U+009F) may follow.
    TextC2,
    /// After ESC.
    Escape,
    /// Inside `ESC [` …: the parameters gathered so far.
    Csi,
    /// Inside a string sequence (OSC, DCS, SOS, PM, APC) until BEL or ST.
    String,
    /// ESC seen inside a string sequence: `\` ends it.
    StringEscape,
    /// 0xC2 seen inside a string sequence: 0x9C (ST) ends it.
    StringC2,
}

/// Strips a job's output of the escape sequences that act on a terminal,
/// keeping SGR (colours, bold) and `\r`, `\n`, `\t`. Fed piece by piece
/// (a sequence may be split between two pieces of a file).
#[derive(Debug, Default)]
pub struct LogFilter {
    state: State,
    /// The CSI sequence being read, emitted only if it ends in `m` (SGR).
    csi: Vec<u8>,
}

/// The longest CSI sequence kept track of; a longer one is dropped.
const MAX_CSI: usize = 64;

impl LogFilter {
    pub fn new() -> LogFilter {
        LogFilter::default()
    }

    /// The bytes of `input` that may reach the terminal.
    pub fn push(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        for &byte in input {
            self.step(byte, &mut out);
        }
        out
    }

    fn step(&mut self, byte: u8, out: &mut Vec<u8>) {
        match self.state {
            State::Text => match byte {
                0x1b => self.state = State::Escape,
                b'\n' | b'\r' | b'\t' => out.push(byte),
                0x00..=0x1f | 0x7f => {}
                0xc2 => self.state = State::TextC2,
                _ => out.push(byte),
            },
            State::TextC2 => match byte {
                0x9b => {
                    self.csi.clear();
                    self.state = State::Csi;
                }
                0x90 | 0x98 | 0x9d | 0x9e | 0x9f => self.state = State::String,
                // Any other C1 control: dropped.
                0x80..=0x9f => self.state = State::Text,
                // An ordinary character starting with 0xC2 (U+00A0–U+00BF).
                _ => {
                    out.push(0xc2);
                    self.state = State::Text;
                    self.step(byte, out);
                }
            },
            State::Escape => {
                self.state = match byte {
                    b'[' => {
                        self.csi.clear();
                        State::Csi
                    }
                    b']' | b'P' | b'X' | b'^' | b'_' => State::String,
                    // ESC followed by one character (or a broken one): dropped.
                    _ => State::Text,
                };
            }
            State::Csi => match byte {
                0x40..=0x7e => {
                    if byte == b'm' && self.csi.iter().all(|b| b.is_ascii_digit() || *b == b';') {
                        out.extend_from_slice(b"\x1b[");
                        out.extend_from_slice(&self.csi);
                        out.push(b'm');
                    }
                    self.csi.clear();
                    self.state = State::Text;
                }
                0x20..=0x3f => {
                    if self.csi.len() < MAX_CSI {
                        self.csi.push(byte);
                    }
                }
                // A control byte cuts the sequence short.
                _ => {
                    self.csi.clear();
                    self.state = State::Text;
                }
            },
            State::String => match byte {
                0x07 => self.state = State::Text,
                0x1b => self.state = State::StringEscape,
                0xc2 => self.state = State::StringC2,
                _ => {}
            },
            State::StringEscape => {
                self.state = if byte == b'\\' { State::Text } else { State::String };
            }
            State::StringC2 => {
                self.state = if byte == 0x9c { State::Text } else { State::String };
            }
        }
    }

    /// One whole line (no newline in it) made safe.
    pub fn line(text: &str) -> String {
        let kept = LogFilter::new().push(text.as_bytes());
        String::from_utf8_lossy(&kept).into_owned()
    }
}

/// A CSV cell that a spreadsheet would take for a formula (it starts with
/// `=`, `+`, `-`, `@`, a tab or a carriage return) gets a leading `'`,
/// which spreadsheets read as "text". Numbers (`-0.5`) stay numbers.
pub fn csv_text(cell: &str) -> std::borrow::Cow<'_, str> {
    let formula = cell.starts_with(['=', '+', '-', '@', '\t', '\r']);
    if formula && cell.parse::<f64>().is_err() {
        format!("'{cell}").into()
    } else {
        cell.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(pieces: &[&[u8]]) -> String {
        let mut filter = LogFilter::new();
        let bytes: Vec<u8> = pieces.iter().flat_map(|piece| filter.push(piece)).collect();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn colours_and_carriage_returns_stay_everything_acting_on_the_terminal_goes() {
        let progress = "\x1b[32m 50%\x1b[0m|#####     |\r\x1b[1;32m100%\x1b[0m|##########|";
        assert_eq!(filtered(&[progress.as_bytes()]), progress);
        for (attack, left) in [
            ("\x1b]0;pwned title\x07after", "after"),
            ("\x1b]52;c;ZWNobyBoaQ==\x07x", "x"),
            ("\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", "click"),
            ("\x1bP+q544e\x1b\\y", "y"),
            ("\x1b[6n\x1b[21t\x1b[2J\x1b[1;1H\x1b[?1049h z", " z"),
            ("\u{9b}31m\u{9d}0;title\u{9c}ok", "\x1b[31mok"),
            ("bell\x07 back\x08space", "bell backspace"),
            ("\x1b[38;5;196mred\x1b[0m", "\x1b[38;5;196mred\x1b[0m"),
        ] {
            assert_eq!(filtered(&[attack.as_bytes()]), left, "{attack:?}");
        }
    }

    #[test]
    fn a_sequence_split_between_two_pieces_is_still_recognised() {
        let text = b"before\x1b]0;title\x07\x1b[31mred\x1b[0m";
        for cut in 0..text.len() {
            let (head, tail) = text.split_at(cut);
            assert_eq!(
                filtered(&[head, tail]),
                "before\x1b[31mred\x1b[0m",
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn one_line_fields_show_their_control_characters() {
        assert_eq!(visible("plain name"), "plain name");
        assert_eq!(visible("evil\x1b]0;x\x07"), "evil\\u{1b}]0;x\\u{7}");
        assert_eq!(visible("two\nlines\tok"), "two\nlines\tok");
    }

    #[test]
    fn cells_a_spreadsheet_would_run_are_text() {
        assert_eq!(csv_text("=HYPERLINK(\"http://x\")"), "'=HYPERLINK(\"http://x\")");
        assert_eq!(csv_text("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_text("+1+cmd|' /C calc'!A0"), "'+1+cmd|' /C calc'!A0");
        assert_eq!(csv_text("-0.25"), "-0.25");
        assert_eq!(csv_text("resnet"), "resnet");
    }
}
