//! ANSI colour codes in job output, turned into styled pieces of text.
//! Colours and bold are kept; every other escape sequence is dropped.

/// A piece of a line and the CSS classes of its style (may be empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub classes: String,
    pub text: String,
}

#[derive(Default, Clone, Copy)]
struct Style {
    bold: bool,
    /// 0–7 normal colours, 8–15 bright ones.
    colour: Option<u8>,
}

impl Style {
    fn classes(self) -> String {
        let mut classes = Vec::new();
        if self.bold {
            classes.push("ansi-bold".to_string());
        }
        if let Some(colour) = self.colour {
            classes.push(format!("ansi-{colour}"));
        }
        classes.join(" ")
    }

    fn apply(&mut self, parameters: &str) {
        let codes: Vec<u16> = parameters
            .split(';')
            .map(|code| code.parse().unwrap_or(0))
            .collect();
        let mut codes = codes.into_iter();
        while let Some(code) = codes.next() {
            match code {
                0 => *self = Style::default(),
                1 => self.bold = true,
                22 => self.bold = false,
                30..=37 => self.colour = Some((code - 30) as u8),
                90..=97 => self.colour = Some((code - 90 + 8) as u8),
                39 => self.colour = None,
                // 256-colour and true-colour forms: skip their arguments.
                38 | 48 => match codes.next() {
                    Some(5) => {
                        codes.next();
                    }
                    Some(2) => {
                        codes.nth(2);
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
}

/// Splits a line into styled pieces.
pub fn pieces(line: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut style = Style::default();
    let mut text = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            text.push(c);
            continue;
        }
        if chars.peek() != Some(&'[') {
            chars.next();
            continue;
        }
        chars.next();
        let mut parameters = String::new();
        let mut end = None;
        for c in chars.by_ref() {
            if ('@'..='~').contains(&c) {
                end = Some(c);
                break;
            }
            parameters.push(c);
        }
        if end == Some('m') {
            if !text.is_empty() {
                out.push(Piece {
                    classes: style.classes(),
                    text: std::mem::take(&mut text),
                });
            }
            style.apply(&parameters);
        }
    }
    if !text.is_empty() || out.is_empty() {
        out.push(Piece {
            classes: style.classes(),
            text,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(line: &str) -> String {
        pieces(line).into_iter().map(|piece| piece.text).collect()
    }

    /// Fuzz: any line becomes pieces whose text has no escape left and is
    /// the line's characters in order (escapes dropped, nothing added); never
    /// a panic.
    #[test]
    fn fuzz_ansi_pieces() {
        bolero::check!().with_type::<String>().for_each(|line| {
            let text = plain(line);
            assert!(!text.contains('\u{1b}'), "{line:?} → {text:?}");
            let mut rest = line.chars();
            assert!(text.chars().all(|c| rest.any(|d| d == c)), "{line:?} → {text:?}");
        });
    }

    #[test]
    fn colours_and_bold_become_classes() {
        let got = pieces("ok \u{1b}[1;31mFAILED\u{1b}[0m done");
        assert_eq!(
            got,
            vec![
                Piece {
                    classes: "".into(),
                    text: "ok ".into()
                },
                Piece {
                    classes: "ansi-bold ansi-1".into(),
                    text: "FAILED".into()
                },
                Piece {
                    classes: "".into(),
                    text: " done".into()
                },
            ]
        );
    }

    #[test]
    fn other_sequences_are_dropped() {
        assert_eq!(
            plain("\u{1b}[2K\u{1b}[38;5;208mloss\u{1b}[39m 0.5\u{1b}[1G"),
            "loss 0.5"
        );
        assert_eq!(pieces("\u{1b}[92mok")[0].classes, "ansi-10");
    }

    #[test]
    fn plain_text_is_one_piece() {
        assert_eq!(pieces("")[0].text, "");
        assert_eq!(pieces("a < b")[0].text, "a < b");
    }
}
