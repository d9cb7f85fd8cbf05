//! Parsing of raw LLM text into move lists. Parsing never fails loudly: it returns `None` and the
//! task charges its parse penalty. `atgrpo.envs.reference.parse` mirrors these rules exactly.
//!
//! Accepted move answers (the prompts ask for the first form):
//! - a line `#### [U, R, R]` (the last `####` in the text wins; the answer runs to the end of its line),
//! - a line `**Actions List**: ["U", "L"]` (whichever marker comes last wins),
//! - or a text that is nothing but a move list, e.g. `["U", "L"]` or `up left`.
//!
//! Tokens are separated by ASCII whitespace and `, [ ] " ' * :`; each token must be one of U D L R /
//! UP DOWN LEFT RIGHT (ASCII case-insensitive). Anything else, no token at all, more than
//! `max_moves` tokens, or a text longer than `MAX_ACTION_BYTES` is unparseable.

/// Texts longer than this are rejected before scanning, so a 1 MB answer costs nothing.
pub const MAX_ACTION_BYTES: usize = 16 * 1024;

const ANSWER_MARKER: &str = "####";
const ACTIONS_MARKER: &str = "Actions List";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Up,
    Down,
    Left,
    Right,
}

impl Dir {
    pub const ALL: [Dir; 4] = [Dir::Up, Dir::Down, Dir::Left, Dir::Right];

    pub fn letter(self) -> char {
        match self {
            Dir::Up => 'U',
            Dir::Down => 'D',
            Dir::Left => 'L',
            Dir::Right => 'R',
        }
    }

    /// (row delta, column delta).
    pub fn delta(self) -> (i32, i32) {
        match self {
            Dir::Up => (-1, 0),
            Dir::Down => (1, 0),
            Dir::Left => (0, -1),
            Dir::Right => (0, 1),
        }
    }
}

fn is_separator(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c' | b',' | b'[' | b']' | b'"' | b'\'' | b'*' | b':')
}

fn token_to_dir(token: &[u8]) -> Option<Dir> {
    const WORDS: [(&[u8], Dir); 8] = [
        (b"U", Dir::Up),
        (b"D", Dir::Down),
        (b"L", Dir::Left),
        (b"R", Dir::Right),
        (b"UP", Dir::Up),
        (b"DOWN", Dir::Down),
        (b"LEFT", Dir::Left),
        (b"RIGHT", Dir::Right),
    ];
    WORDS.iter().find(|(w, _)| w.eq_ignore_ascii_case(token)).map(|&(_, d)| d)
}

/// The part of `text` that holds the move answer (see the module docs).
pub fn move_region(text: &str) -> &str {
    let answer = text.rfind(ANSWER_MARKER).map(|i| i + ANSWER_MARKER.len());
    let actions = text.rfind(ACTIONS_MARKER).map(|i| i + ACTIONS_MARKER.len());
    match answer.max(actions) {
        Some(start) => {
            let rest = &text[start..];
            &rest[..rest.find('\n').unwrap_or(rest.len())]
        }
        None => text,
    }
}

/// Parses a move answer into `out` (cleared first). Returns false when the text is unparseable.
pub fn parse_moves(text: &str, max_moves: usize, out: &mut Vec<Dir>) -> bool {
    out.clear();
    if text.len() > MAX_ACTION_BYTES {
        return false;
    }
    for token in move_region(text).as_bytes().split(|&b| is_separator(b)) {
        if token.is_empty() {
            continue;
        }
        match token_to_dir(token) {
            Some(d) if out.len() < max_moves => out.push(d),
            _ => return false,
        }
    }
    !out.is_empty()
}

/// The canonical answer text for a plan, in the format the prompts ask for.
pub fn format_moves(moves: &[Dir]) -> String {
    let mut s = String::with_capacity(8 + moves.len() * 3);
    s.push_str("#### [");
    for (i, d) in moves.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push(d.letter());
    }
    s.push(']');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Option<String> {
        let mut out = Vec::new();
        parse_moves(text, 100, &mut out).then(|| out.iter().map(|d| d.letter()).collect())
    }

    #[test]
    fn accepts_prompt_formats() {
        assert_eq!(parse("thinking...\n#### [U, R, R]").as_deref(), Some("URR"));
        assert_eq!(parse("**Actions List**: [\"U\", \"L\"]").as_deref(), Some("UL"));
        assert_eq!(parse("[\"up\", 'Left', DOWN]").as_deref(), Some("ULD"));
        assert_eq!(parse("#### [U]\nlater text ignored").as_deref(), Some("U"));
        assert_eq!(parse("#### [U]\n#### [D, D]").as_deref(), Some("DD"));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "####", "#### []", "I would go up", "#### [U, X]", "#### [U2]", "\u{0}\u{fffd}"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(parse(&"U ".repeat(101)), None, "more than max_moves");
        assert_eq!(parse(&"#### [U]".repeat(MAX_ACTION_BYTES)), None, "oversized");
    }

    #[test]
    fn canonical_format_round_trips() {
        let moves = [Dir::Up, Dir::Right, Dir::Down, Dir::Left];
        let mut out = Vec::new();
        assert!(parse_moves(&format_moves(&moves), 10, &mut out));
        assert_eq!(out, moves);
    }
}
