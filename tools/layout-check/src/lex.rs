//! A Rust source file split into code and comments, byte for byte.
//!
//! Invariant: [`Source::code`] has exactly the bytes of the file, except
//! that comments (line, block, doc), the contents of string, byte-string,
//! raw-string and char literals are replaced by spaces; newlines are kept
//! everywhere, so a byte offset means the same line in the text and in the
//! code. Lifetimes and labels (`'a`) stay code. Every scan in this crate runs
//! over `code` (so a path in a comment or a string is never an import) and
//! looks at [`Source::comment`] only for opt-out and `SAFETY:` comments.

/// One lexed source file.
pub struct Source {
    /// The file as read.
    pub text: String,
    /// The file with comments and literal contents blanked (see the module
    /// essay).
    pub code: Vec<u8>,
    /// Comment text per line (0-based), concatenated if a line has several.
    comments: Vec<String>,
    /// Byte offset of the start of each line.
    line_starts: Vec<usize>,
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl Source {
    /// Lexes `text`. Never panics, whatever the input (unterminated
    /// comments and literals run to the end of the file).
    pub fn new(text: String) -> Source {
        let bytes = text.as_bytes();
        let n = bytes.len();
        let mut code = bytes.to_vec();
        let mut line_starts = vec![0];
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'\n' {
                line_starts.push(i + 1);
            }
        }
        let mut comments = vec![String::new(); line_starts.len()];
        let line_of = |starts: &[usize], off: usize| starts.partition_point(|&s| s <= off) - 1;
        // Blanks code[from..to] (keeping newlines); when `keep` collects the
        // text into `comments`.
        let blank =
            |code: &mut Vec<u8>, comments: &mut Vec<String>, from: usize, to: usize, keep: bool| {
                let to = to.min(n);
                if keep && from < to {
                    let mut line = line_of(&line_starts, from);
                    let mut start = from;
                    for i in from..to {
                        if bytes[i] == b'\n' {
                            comments[line].push_str(&String::from_utf8_lossy(&bytes[start..i]));
                            line += 1;
                            start = i + 1;
                        }
                    }
                    comments[line].push_str(&String::from_utf8_lossy(&bytes[start..to]));
                }
                for c in code.iter_mut().take(to).skip(from) {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
            };
        let mut i = 0;
        while i < n {
            let b = bytes[i];
            let next = bytes.get(i + 1).copied().unwrap_or(0);
            if b == b'/' && next == b'/' {
                let end = bytes[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(n, |p| i + p);
                blank(&mut code, &mut comments, i, end, true);
                i = end;
            } else if b == b'/' && next == b'*' {
                let mut depth = 0usize;
                let mut j = i;
                while j < n {
                    if bytes[j] == b'/' && bytes.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if bytes[j] == b'*' && bytes.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                blank(&mut code, &mut comments, i, j, true);
                i = j;
            } else if b == b'"' {
                let mut j = i + 1;
                while j < n && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut code, &mut comments, i + 1, j, false);
                i = j + 1;
            } else if b == b'\'' {
                // A char literal or a lifetime / label.
                if next == b'\\' {
                    let mut j = i + 2;
                    // The escaped character itself, then up to the closing quote.
                    j += 1;
                    while j < n && bytes[j] != b'\'' && bytes[j] != b'\n' {
                        j += 1;
                    }
                    blank(&mut code, &mut comments, i + 1, j, false);
                    i = j + 1;
                } else {
                    let len = utf8_len(next);
                    if next != 0 && bytes.get(i + 1 + len) == Some(&b'\'') {
                        blank(&mut code, &mut comments, i + 1, i + 1 + len, false);
                        i += 2 + len;
                    } else {
                        i += 1;
                    }
                }
            } else if is_ident(b) {
                let mut j = i;
                while j < n && is_ident(bytes[j]) {
                    j += 1;
                }
                let run = &bytes[i..j];
                let mut hashes = 0;
                while j + hashes < n && bytes[j + hashes] == b'#' {
                    hashes += 1;
                }
                if matches!(run, b"r" | b"br" | b"cr") && bytes.get(j + hashes) == Some(&b'"') {
                    // A raw string: r"…", r#"…"#, br"…", cr#"…"#.
                    let body = j + hashes + 1;
                    let mut k = body;
                    while k < n
                        && !(bytes[k] == b'"'
                            && bytes[k + 1..]
                                .iter()
                                .take(hashes)
                                .filter(|&&c| c == b'#')
                                .count()
                                == hashes)
                    {
                        k += 1;
                    }
                    blank(&mut code, &mut comments, body, k, false);
                    i = k + 1 + hashes;
                } else {
                    // Identifiers, keywords, numbers; a `b`/`c` prefix of a
                    // literal leaves the quote to the next round.
                    i = j;
                }
            } else {
                i += 1;
            }
        }
        Source {
            text,
            code,
            comments,
            line_starts,
        }
    }

    /// The 1-based line of byte offset `off`.
    pub fn line(&self, off: usize) -> usize {
        self.line_starts.partition_point(|&s| s <= off)
    }

    /// The number of lines.
    pub fn lines(&self) -> usize {
        self.line_starts.len()
    }

    /// The comment text on 1-based line `line` (empty if none).
    pub fn comment(&self, line: usize) -> &str {
        self.comments
            .get(line.wrapping_sub(1))
            .map_or("", |s| s.as_str())
    }

    /// The code (comments and literals blanked) of 1-based line `line`.
    pub fn code_line(&self, line: usize) -> &str {
        self.line_in(&self.code, line)
    }

    /// Line `line` (1-based) of `code`, a blanked copy of this file's code
    /// (such as [`without_tests`] gives); "" if out of range or not UTF-8.
    pub fn line_in<'a>(&self, code: &'a [u8], line: usize) -> &'a str {
        let Some(&start) = self.line_starts.get(line.wrapping_sub(1)) else {
            return "";
        };
        let end = self
            .line_starts
            .get(line)
            .map_or(code.len(), |&e| e - 1)
            .min(code.len());
        std::str::from_utf8(&code[start.min(end)..end]).unwrap_or("")
    }

    /// Whether 1-based line `line` holds a comment and no code.
    pub fn comment_only(&self, line: usize) -> bool {
        !self.comment(line).is_empty() && self.code_line(line).trim().is_empty()
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

/// A token of [`Source::code`]: identifiers (keywords included), numbers,
/// `::`, and single punctuation bytes. Literals show as their quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tok {
    /// The token text.
    pub text: String,
    /// Byte offset in the file.
    pub off: usize,
}

impl Tok {
    /// Whether the token is an identifier or keyword.
    pub fn is_ident(&self) -> bool {
        self.text
            .as_bytes()
            .first()
            .is_some_and(|&b| b.is_ascii_alphabetic() || b == b'_')
    }
}

/// Splits blanked code into [`Tok`]s.
pub fn tokens(code: &[u8]) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let b = code[i];
        if b.is_ascii_whitespace() || !b.is_ascii() {
            i += 1;
        } else if is_ident(b) {
            let mut j = i;
            while j < code.len() && is_ident(code[j]) {
                j += 1;
            }
            out.push(Tok {
                text: String::from_utf8_lossy(&code[i..j]).into_owned(),
                off: i,
            });
            i = j;
        } else if b == b':' && code.get(i + 1) == Some(&b':') {
            out.push(Tok {
                text: "::".into(),
                off: i,
            });
            i += 2;
        } else {
            out.push(Tok {
                text: (b as char).to_string(),
                off: i,
            });
            i += 1;
        }
    }
    out
}

/// Byte ranges of items gated by `#[cfg(test)]` (the attribute through the
/// end of the item: its `;` or its closing brace). A file whose inner
/// attributes say `#![cfg(test)]` is one range.
pub fn test_ranges(code: &[u8]) -> Vec<(usize, usize)> {
    let toks = tokens(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i].text == "#" {
            let inner = toks.get(i + 1).is_some_and(|t| t.text == "!");
            let open = if inner { i + 2 } else { i + 1 };
            if toks.get(open).is_some_and(|t| t.text == "[") {
                let close = matching(&toks, open);
                let body: String = toks[open + 1..close.min(toks.len())]
                    .iter()
                    .map(|t| t.text.as_str())
                    .collect();
                if body == "cfg(test)" {
                    if inner {
                        return vec![(0, code.len())];
                    }
                    let end = item_end(&toks, close + 1);
                    let end_off = toks.get(end).map_or(code.len(), |t| t.off + 1);
                    out.push((toks[i].off, end_off));
                    i = end + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

/// Index of the token closing the bracket opened at `open` (`(`, `[` or
/// `{`), or `toks.len()` if unclosed.
pub fn matching(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0i64;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// Index of the last token of the item starting at `from` (after any
/// further outer attributes): its `;` at bracket depth 0, or the `}`
/// closing its first top-level brace. `toks.len()` if the file ends first.
pub fn item_end(toks: &[Tok], mut from: usize) -> usize {
    while toks.get(from).is_some_and(|t| t.text == "#")
        && toks.get(from + 1).is_some_and(|t| t.text == "[")
    {
        from = matching(toks, from + 1) + 1;
    }
    let mut j = from;
    // Depth of generic angle brackets (`->` and `=>` are not brackets), so
    // that the comma of `fn f<A, B>()` does not end the item.
    let mut angle = 0usize;
    while j < toks.len() {
        let arrow = j > 0 && matches!(toks[j - 1].text.as_str(), "-" | "=");
        match toks[j].text.as_str() {
            ";" => return j,
            "," if angle == 0 => return j,
            "<" => {
                angle += 1;
                j += 1;
            }
            ">" if !arrow => {
                angle = angle.saturating_sub(1);
                j += 1;
            }
            "(" | "[" => j = matching(toks, j) + 1,
            "{" => return matching(toks, j),
            "}" | ")" | "]" => return j.saturating_sub(1),
            _ => j += 1,
        }
    }
    toks.len()
}

/// `code` with the `#[cfg(test)]` ranges blanked as well.
pub fn without_tests(code: &[u8]) -> Vec<u8> {
    let mut out = code.to_vec();
    for (a, b) in test_ranges(code) {
        for c in out.iter_mut().take(b.min(code.len())).skip(a) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blanks_comments_and_literals() {
        let s = Source::new(
            "use a; // use crate::x;\n/* crate::y /* nested */ still */ let s = \"crate::z\";\nlet c = '\"'; let l: &'a str = r#\"crate::w\"#; let b = b'x';\n"
                .into(),
        );
        let code = String::from_utf8(s.code.clone()).unwrap();
        assert!(!code.contains("crate"), "{code}");
        assert!(code.contains("&'a str"), "{code}");
        assert_eq!(s.comment(1), "// use crate::x;");
        assert!(s.comment(2).contains("nested"));
        assert_eq!(s.line(s.text.find("let c").unwrap()), 3);
        assert_eq!(code.len(), s.text.len());
    }

    #[test]
    fn never_panics_on_truncations() {
        let full = "//! é\n#![deny(unsafe_code)]\nuse crate::{a::{B, c as D}, e::*};\n/* /* x */ y */\nfn f<'a>(s: &'a str) -> char { let _ = (r##\"q\"#\"##, b\"\\\"\", '\\u{e9}', 'é', '\\''); d[..6].len(); 'x' }\n#[cfg(test)]\nmod t { #[test] fn z() {} }\n";
        for cut in (0..=full.len()).filter(|&c| full.is_char_boundary(c)) {
            let s = Source::new(full[..cut].to_string());
            assert_eq!(s.code.len(), cut);
            let _ = without_tests(&s.code);
            for l in 1..=s.lines() {
                let _ = (s.comment(l), s.code_line(l), s.comment_only(l));
            }
        }
        let s = Source::new(full.to_string());
        let code = String::from_utf8_lossy(&without_tests(&s.code)).into_owned();
        assert!(code.contains("d[..6]") && !code.contains("fn z"), "{code}");
    }

    #[test]
    fn item_ends() {
        let src = "#[allow(unsafe_code)]\npub fn f<A: Into<u8>, B>(a: A) -> Option<B> where B: Default { unsafe { g() } }\nfn h() {}\nstruct S { #[cfg(test)] a: Vec<(u8, u8)>, b: u8 }\n";
        let toks = tokens(src.as_bytes());
        let end = item_end(&toks, 0);
        assert_eq!(toks[end].off, src.find("} }").unwrap() + 2);
        let code = String::from_utf8(without_tests(src.as_bytes())).unwrap();
        assert!(!code.contains("a: Vec") && code.contains("b: u8"), "{code}");
    }

    #[test]
    fn cfg_test_items_are_removed() {
        let src = "fn a() {}\n#[cfg(test)]\nmod tests {\n    use crate::p;\n}\n#[cfg(test)]\nuse crate::q;\nfn b() {}\n";
        let s = Source::new(src.into());
        let code = String::from_utf8(without_tests(&s.code)).unwrap();
        assert!(code.contains("fn a") && code.contains("fn b"), "{code}");
        assert!(!code.contains("crate"), "{code}");
        assert_eq!(code.lines().count(), src.lines().count());
    }
}
