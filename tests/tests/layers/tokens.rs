//! Rust source cut into the few tokens the module check reads: identifiers, `::`, and single
//! punctuation characters, each with its line. Comments, string and character literals and
//! lifetimes leave no token, so a path written inside them names nothing.

/// One identifier (or keyword, or number) or one punctuation mark; `::` is a single token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub text: String,
    pub line: usize,
}

/// Cuts `source` into tokens, dropping whitespace, comments, literals and lifetimes.
pub fn tokenize(source: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        chars: source.chars().collect(),
        at: 0,
        line: 1,
        out: Vec::new(),
    };
    lexer.run();
    lexer.out
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            match c {
                '/' if self.peek(1) == Some('/') => self.skip_line_comment(),
                '/' if self.peek(1) == Some('*') => self.skip_block_comment(),
                '"' => self.skip_string(),
                '\'' => self.skip_char_or_lifetime(),
                ':' if self.peek(1) == Some(':') => {
                    self.push("::".to_string());
                    self.at += 2;
                }
                c if is_ident_char(c) => self.read_word(),
                c => {
                    if !c.is_whitespace() {
                        self.push(c.to_string());
                    }
                    self.bump();
                }
            }
        }
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    /// Moves past one character, counting lines.
    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.at += 1;
    }

    fn push(&mut self, text: String) {
        self.out.push(Token {
            text,
            line: self.line,
        });
    }

    fn skip_line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    /// Block comments nest in Rust.
    fn skip_block_comment(&mut self) {
        let mut depth = 0;
        while let Some(c) = self.peek(0) {
            if c == '/' && self.peek(1) == Some('*') {
                depth += 1;
                self.at += 2;
            } else if c == '*' && self.peek(1) == Some('/') {
                depth -= 1;
                self.at += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.bump();
            }
        }
    }

    /// A quoted string whose opening `"` is at the cursor; a backslash escapes the next character.
    fn skip_string(&mut self) {
        self.bump();
        while let Some(c) = self.peek(0) {
            self.bump();
            match c {
                '\\' => self.bump(),
                '"' => return,
                _ => {}
            }
        }
    }

    /// A raw string `r#"…"#` whose `#`s (any number, maybe none) start at the cursor.
    fn skip_raw_string(&mut self) {
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            hashes += 1;
            self.at += 1;
        }
        self.bump();
        while let Some(c) = self.peek(0) {
            self.bump();
            if c == '"' && (0..hashes).all(|k| self.peek(k) == Some('#')) {
                self.at += hashes;
                return;
            }
        }
    }

    /// `'x'` and `'\n'` are characters; `'a` in `&'a str` or `'outer: loop` is a lifetime or
    /// label. Neither leaves a token.
    fn skip_char_or_lifetime(&mut self) {
        if self.peek(1) == Some('\\') {
            self.at += 3;
            while self.peek(0).is_some_and(|c| c != '\'') {
                self.bump();
            }
            self.at += 1;
        } else if self.peek(2) == Some('\'') {
            self.at += 3;
        } else {
            self.at += 1;
            while self.peek(0).is_some_and(is_ident_char) {
                self.at += 1;
            }
        }
    }

    /// An identifier, keyword or number, or the prefix of a literal: `b"…"`, `r"…"`, `br#"…"#`,
    /// `c"…"`, `b'x'`, or of a raw identifier `r#type`.
    fn read_word(&mut self) {
        let start = self.at;
        while self.peek(0).is_some_and(is_ident_char) {
            self.at += 1;
        }
        let word: String = self.chars[start..self.at].iter().collect();
        let next = self.peek(0);
        let raw = matches!(word.as_str(), "r" | "br" | "cr");
        if raw && (next == Some('"') || (next == Some('#') && self.raw_string_follows())) {
            self.skip_raw_string();
        } else if matches!(word.as_str(), "b" | "c") && next == Some('"') {
            self.skip_string();
        } else if word == "b" && next == Some('\'') {
            self.skip_char_or_lifetime();
        } else if word == "r" && next == Some('#') {
            self.at += 1;
            self.read_word();
        } else {
            self.push(word);
        }
    }

    /// After an `r` at `#`: `#`s then `"` open a raw string, `#` then a letter a raw identifier.
    fn raw_string_follows(&self) -> bool {
        let mut ahead = 0;
        while self.peek(ahead) == Some('#') {
            ahead += 1;
        }
        self.peek(ahead) == Some('"')
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}
