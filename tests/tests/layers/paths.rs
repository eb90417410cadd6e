//! Where a file names a module of its own crate: every path that starts at `crate`, `self` or
//! `super`, in `use` lines (grouped and nested forms included) and inline in expressions and types,
//! resolved against the module the code sits in (the file's module, plus any inline `mod x { … }`
//! around it).

use super::tokens::Token;

/// A path written in a file, resolved to the top-level module of the crate it lands in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The first component of the resolved path: a top-level module, or an item of the root.
    pub module: String,
    pub line: usize,
    /// Written inside a `#[cfg(test)] mod … { … }`.
    pub in_test: bool,
}

/// What one file says about the modules of its crate.
#[derive(Debug, Default)]
pub struct FileScan {
    pub references: Vec<Reference>,
    /// Full module paths of the `#[cfg(test)] mod x;` declared here, whose files are test code.
    pub test_modules: Vec<Vec<String>>,
}

/// Reads one file's tokens; `module` is the file's module path (`src/a/b.rs` is `["a", "b"]`).
pub fn scan(tokens: &[Token], module: &[String]) -> FileScan {
    let mut walker = Walker {
        tokens,
        at: 0,
        depth: 0,
        scopes: Vec::new(),
        cfg_test: false,
        module: module.to_vec(),
        out: FileScan::default(),
    };
    walker.run();
    walker.out
}

/// An inline `mod name { … }` open at the cursor.
#[derive(Debug)]
struct Scope {
    name: String,
    /// Brace depth just inside the module's `{`.
    depth: usize,
    test: bool,
}

/// A path segment and the line it is written on.
type Segment = (String, usize);

struct Walker<'t> {
    tokens: &'t [Token],
    at: usize,
    depth: usize,
    scopes: Vec<Scope>,
    /// A `#[cfg(test)]` seen and not yet spent on an item.
    cfg_test: bool,
    module: Vec<String>,
    out: FileScan,
}

impl Walker<'_> {
    fn text(&self, at: usize) -> &str {
        self.tokens.get(at).map_or("", |t| t.text.as_str())
    }

    fn run(&mut self) {
        while self.at < self.tokens.len() {
            match self.text(self.at) {
                "#" => self.read_attribute(),
                "mod" if is_ident(self.text(self.at + 1)) => self.read_mod(),
                "{" => {
                    self.depth += 1;
                    self.cfg_test = false;
                    self.at += 1;
                }
                "}" => {
                    if self.scopes.last().is_some_and(|s| s.depth == self.depth) {
                        self.scopes.pop();
                    }
                    self.depth = self.depth.saturating_sub(1);
                    self.cfg_test = false;
                    self.at += 1;
                }
                ";" => {
                    self.cfg_test = false;
                    self.at += 1;
                }
                "crate" | "self" | "super" if self.starts_path() => self.read_path(),
                _ => self.at += 1,
            }
        }
    }

    /// `#[…]` or `#![…]`; only `cfg(test)` matters.
    fn read_attribute(&mut self) {
        let mut at = self.at + 1;
        if self.text(at) == "!" {
            at += 1;
        }
        if self.text(at) != "[" {
            self.at += 1;
            return;
        }
        let start = at + 1;
        let mut nesting = 0;
        while at < self.tokens.len() {
            match self.text(at) {
                "[" => nesting += 1,
                "]" => {
                    nesting -= 1;
                    if nesting == 0 {
                        break;
                    }
                }
                _ => {}
            }
            at += 1;
        }
        let inside: Vec<&str> = (start..at).map(|k| self.text(k)).collect();
        if inside == ["cfg", "(", "test", ")"] {
            self.cfg_test = true;
        }
        self.at = at + 1;
    }

    /// `mod name { … }` opens a scope; `mod name;` under `#[cfg(test)]` names a test file.
    fn read_mod(&mut self) {
        let name = self.text(self.at + 1).to_string();
        let test = self.cfg_test || self.in_test();
        match self.text(self.at + 2) {
            "{" => {
                self.depth += 1;
                self.scopes.push(Scope {
                    name,
                    depth: self.depth,
                    test,
                });
                self.at += 3;
            }
            ";" if test => {
                let mut path = self.current_module();
                path.push(name);
                self.out.test_modules.push(path);
                self.at += 3;
            }
            _ => self.at += 2,
        }
        self.cfg_test = false;
    }

    /// A path starts here when `::` follows and no `::` comes before (`pub(crate)` is no path).
    fn starts_path(&self) -> bool {
        self.text(self.at + 1) == "::" && (self.at == 0 || self.text(self.at - 1) != "::")
    }

    fn read_path(&mut self) {
        let mut paths = Vec::new();
        self.at = self.read_tree(self.at, &[], &mut paths);
        let module = self.current_module();
        let in_test = self.in_test();
        for path in paths {
            if let Some((name, line)) = land(&path, &module) {
                self.out.references.push(Reference {
                    module: name,
                    line,
                    in_test,
                });
            }
        }
    }

    /// A path, or a use tree: `a::b`, `a::*`, `a::{b, c::{d, e}}`. Every full path it names goes
    /// to `paths`; returns the index just past it.
    fn read_tree(&self, mut at: usize, prefix: &[Segment], paths: &mut Vec<Vec<Segment>>) -> usize {
        let mut path = prefix.to_vec();
        loop {
            match self.text(at) {
                "{" => return self.read_group(at + 1, &path, paths),
                "*" => {
                    at += 1;
                    break;
                }
                word if is_ident(word) => {
                    path.push((word.to_string(), self.tokens[at].line));
                    at += 1;
                }
                _ => break,
            }
            if self.text(at) != "::" {
                break;
            }
            at += 1;
        }
        paths.push(path);
        at
    }

    /// The trees between `{` and `}`, each maybe renamed with `as`; returns the index past `}`.
    fn read_group(
        &self,
        mut at: usize,
        prefix: &[Segment],
        paths: &mut Vec<Vec<Segment>>,
    ) -> usize {
        while at < self.tokens.len() {
            match self.text(at) {
                "}" => return at + 1,
                "," => at += 1,
                _ => {
                    at = self.read_tree(at, prefix, paths);
                    while !matches!(self.text(at), "," | "}" | "") {
                        at += 1;
                    }
                }
            }
        }
        at
    }

    fn current_module(&self) -> Vec<String> {
        let inline = self.scopes.iter().map(|s| s.name.clone());
        self.module.iter().cloned().chain(inline).collect()
    }

    fn in_test(&self) -> bool {
        self.scopes.iter().any(|s| s.test)
    }
}

/// The top-level module a path lands in, and the line that names it; `None` for a path that
/// climbs above the root or names nothing below it.
fn land(path: &[Segment], module: &[String]) -> Option<(String, usize)> {
    let (first, start_line) = path.first()?;
    let mut base = module.to_vec();
    let mut rest = &path[1..];
    match first.as_str() {
        "crate" => base.clear(),
        "self" => {}
        _ => {
            base.pop()?;
        }
    }
    while let Some(((word, _), after)) = rest.split_first() {
        if word != "super" {
            break;
        }
        base.pop()?;
        rest = after;
    }
    match base.first() {
        Some(top) => Some((top.clone(), *start_line)),
        None => rest.first().cloned(),
    }
}

fn is_ident(word: &str) -> bool {
    word.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}
