//! rsync's include/exclude rules (`cp --exclude`, `--include`, `--exclude-from`,
//! `--include-from`), matched with globset: this module maps rsync's rule syntax onto globs and
//! decides, for a path relative to the transfer root, whether the rules exclude it. The sender's
//! walk skips what they exclude (without entering an excluded directory); a receiver under
//! `--delete` keeps the names they exclude. Rules from a peer (the `Filter` frame) are compiled
//! here too, with the same caps, so a bad one is an error, never a panic.
//!
//! rsync's rules (man rsync, "PATTERN MATCHING RULES"), all kept: rules are checked in order and
//! the first match wins; a pattern without a `/` (a trailing one aside) or `**` matches the last
//! name at any depth; a leading `/` anchors it to the transfer root; a trailing `/` matches only
//! directories; any other `/` makes it match the end of the path relative to the transfer root;
//! `*` and `?` stop at `/`, `**` does not; `dir/***` is `dir/` and `dir/**`; a backslash escapes
//! only in a pattern with a wildcard (`*`, `?`, `[`).

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};
use linerate_proto::caps::{MAX_FILTER_BYTES, MAX_FILTER_REGEX, MAX_FILTER_RULES, MAX_PATH};
use linerate_proto::frame::{FilterRules, Rules, FILTER_CONTENTS, FILTER_DELETE_EXCLUDED, RULE_EXCLUDE, RULE_INCLUDE};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a rule does to the names it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    /// `--exclude`, `- PATTERN`: not sent, and kept from `--delete`.
    Exclude,
    /// `--include`, `+ PATTERN`: sent (an earlier match than any exclude).
    Include,
}

/// One rule as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Exclude or include.
    pub kind: RuleKind,
    /// The pattern, in rsync's syntax.
    pub pattern: String,
}

/// Why rules cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    /// A pattern globset cannot compile, or one that matches nothing (`/`).
    #[error("filter pattern '{pattern}': {reason}")]
    BadPattern {
        /// The pattern, escaped and cut to 64 characters (empty: the rules together).
        pattern: String,
        /// Why.
        reason: String,
    },
    /// An empty pattern (a rule line of `- ` alone).
    #[error("an empty filter pattern")]
    Empty,
    /// The rules up to this one compile to more than [`MAX_FILTER_REGEX`] bytes of regular
    /// expressions (checked before anything is compiled).
    #[error(
        "filter rule {rule} '{pattern}' takes the rules past {cap} bytes of compiled patterns ({len}): \
         use fewer rules, or fewer wildcards in them"
    )]
    TooComplex {
        /// The rule's number, from 1.
        rule: usize,
        /// The pattern, escaped and cut to 64 characters.
        pattern: String,
        /// Bytes of regular expressions up to and including this rule.
        len: usize,
        /// [`MAX_FILTER_REGEX`].
        cap: usize,
    },
    /// A pattern from a peer that is not UTF-8.
    #[error("a filter pattern is not UTF-8: {0}")]
    NotUtf8(String),
    /// More rules than a session carries.
    #[error("{count} filter rules: at most {cap} are allowed")]
    TooMany {
        /// Rules given.
        count: usize,
        /// [`MAX_FILTER_RULES`].
        cap: usize,
    },
    /// More pattern bytes than a session carries.
    #[error("filter patterns of {len} bytes: at most {cap} in all, {path_cap} each")]
    TooLong {
        /// Bytes given (in all, or of one pattern).
        len: usize,
        /// [`MAX_FILTER_BYTES`].
        cap: usize,
        /// [`MAX_PATH`].
        path_cap: usize,
    },
}

/// Add the rule `text` (an `--exclude` or `--include` argument, or a line of a rules file) to
/// `rules`: `- PAT` and `+ PAT` say the kind (as rsync accepts in both places), anything else
/// is a rule of kind `default`, and `!` alone clears the rules so far.
pub fn push_rule(rules: &mut Vec<Rule>, text: &str, default: RuleKind) {
    let (kind, pattern) = if let Some(p) = text.strip_prefix("- ") {
        (RuleKind::Exclude, p)
    } else if let Some(p) = text.strip_prefix("+ ") {
        (RuleKind::Include, p)
    } else if text == "!" {
        rules.clear();
        return;
    } else {
        (default, text)
    };
    rules.push(Rule { kind, pattern: pattern.to_string() });
}

/// Add the rules of a rules file (`--exclude-from`, `--include-from`): one per line; blank lines
/// and lines starting with `;` or `#` are skipped; see [`push_rule`] for the rest.
pub fn push_file_rules(rules: &mut Vec<Rule>, text: &str, default: RuleKind) {
    for line in text.split('\n') {
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        push_rule(rules, line, default);
    }
}

/// One filter flag as given (`--exclude`, `--include`, `--exclude-from`, `--include-from`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    /// `--exclude PATTERN` or `--include PATTERN`.
    Rule(RuleKind, String),
    /// `--exclude-from FILE` or `--include-from FILE`.
    File(RuleKind, PathBuf),
}

/// Why the flags' rules could not be had.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// A rules file could not be read (`from`: its path, or standard input).
    #[error("reading filter rules from {from}")]
    Read {
        /// Where from.
        from: String,
        /// Why.
        #[source]
        io: std::io::Error,
    },
    /// The rules do not compile.
    #[error(transparent)]
    Filter(#[from] FilterError),
}

/// The rules of the flags `given`, in their order (the first match wins), compiled; `None`
/// without any. Rule files are read now (`-`: standard input).
pub fn from_given(given: &[Given]) -> Result<Option<Arc<Filter>>, RulesError> {
    let mut rules: Vec<Rule> = Vec::new();
    for g in given {
        match g {
            Given::Rule(kind, text) => push_rule(&mut rules, text, *kind),
            Given::File(kind, path) => push_file_rules(&mut rules, &read_rules(path)?, *kind),
        }
    }
    if given.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(Filter::new(rules)?)))
}

/// The text of a rules file, `-` for standard input.
fn read_rules(path: &Path) -> Result<String, RulesError> {
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|io| RulesError::Read { from: "standard input".into(), io })?;
    } else {
        text = std::fs::read_to_string(path).map_err(|io| RulesError::Read { from: path.display().to_string(), io })?;
    }
    Ok(text)
}

/// One glob of a compiled rule.
#[derive(Debug, Clone, Copy)]
struct GlobOf {
    /// Index of the rule (the first matching rule wins).
    rule: usize,
    /// Matches directories only (a trailing `/`; the directory half of `dir/***`).
    dir_only: bool,
}

/// Compiled rules.
#[derive(Debug, Clone)]
pub struct Filter {
    rules: Vec<Rule>,
    /// Patterns matched against the last name.
    names: GlobSet,
    names_of: Vec<GlobOf>,
    /// Patterns matched against the whole path below the transfer root.
    paths: GlobSet,
    paths_of: Vec<GlobOf>,
}

impl Filter {
    /// Compile `rules` (in order: the first match wins).
    pub fn new(rules: Vec<Rule>) -> Result<Filter, FilterError> {
        if rules.len() > MAX_FILTER_RULES {
            return Err(FilterError::TooMany { count: rules.len(), cap: MAX_FILTER_RULES });
        }
        let total: usize = rules.iter().map(|r| r.pattern.len()).sum();
        let longest = rules.iter().map(|r| r.pattern.len()).max().unwrap_or(0);
        if total > MAX_FILTER_BYTES || longest > MAX_PATH {
            let len = if longest > MAX_PATH { longest } else { total };
            return Err(FilterError::TooLong { len, cap: MAX_FILTER_BYTES, path_cap: MAX_PATH });
        }
        let (mut names, mut paths) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        let (mut names_of, mut paths_of) = (Vec::new(), Vec::new());
        let mut compiled = 0usize;
        for (i, r) in rules.iter().enumerate() {
            let bad = |reason: &str| FilterError::BadPattern { pattern: shown(&r.pattern), reason: reason.to_string() };
            if r.pattern.is_empty() {
                return Err(FilterError::Empty);
            }
            let mut p = r.pattern.as_str();
            let dir_only = p.ends_with('/');
            p = p.trim_end_matches('/');
            let anchored = p.starts_with('/');
            p = p.trim_start_matches('/');
            if p.is_empty() {
                return Err(bad("matches nothing (a pattern needs a name besides '/')"));
            }
            let whole_path = anchored || p.contains('/') || p.contains("**");
            // `dir/***`: the directory itself (as `dir/`) and everything in it (as `dir/**`).
            let parts: Vec<(String, bool)> = match p.strip_suffix("/***") {
                Some(base) if !base.is_empty() => vec![(base.to_string(), true), (format!("{base}/**"), dir_only)],
                _ => vec![(p.to_string(), dir_only)],
            };
            for (p, dir_only) in parts {
                let wild = p.contains(['*', '?', '[']);
                let mut glob = if wild { translate(&p) } else { globset::escape(&p) };
                if whole_path && !anchored {
                    glob.insert_str(0, "**/");
                }
                let g = GlobBuilder::new(&glob)
                    .literal_separator(true)
                    .backslash_escape(wild)
                    .empty_alternates(true)
                    .build()
                    .map_err(|e| bad(&e.kind().to_string()))?;
                compiled = compiled.saturating_add(g.regex().len());
                if compiled > MAX_FILTER_REGEX {
                    let (pattern, cap) = (shown(&r.pattern), MAX_FILTER_REGEX);
                    return Err(FilterError::TooComplex { rule: i + 1, pattern, len: compiled, cap });
                }
                let of = GlobOf { rule: i, dir_only };
                if whole_path {
                    paths.add(g);
                    paths_of.push(of);
                } else {
                    names.add(g);
                    names_of.push(of);
                }
            }
        }
        let build = |b: GlobSetBuilder| {
            b.build().map_err(|e| FilterError::BadPattern {
                pattern: String::new(),
                reason: format!("the rules together: {e}"),
            })
        };
        Ok(Filter { rules, names: build(names)?, names_of, paths: build(paths)?, paths_of })
    }

    /// The rules, as given.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the rules exclude `path` (relative to the transfer root, components joined with
    /// `/`, no leading `/`): the first rule that matches decides; none matching includes it.
    pub fn excluded(&self, path: &[u8], is_dir: bool) -> bool {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        let first = |set: &GlobSet, of: &[GlobOf], what: &[u8]| {
            set.matches_candidate(&Candidate::from_bytes(what))
                .into_iter()
                .filter_map(|g| of.get(g))
                .filter(|g| is_dir || !g.dir_only)
                .map(|g| g.rule)
                .min()
        };
        let rule = match (first(&self.names, &self.names_of, name), first(&self.paths, &self.paths_of, path)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        rule.and_then(|r| self.rules.get(r)).is_some_and(|r| r.kind == RuleKind::Exclude)
    }

    /// The rules as a `Filter` frame's [`Rules`], encoded into `out`.
    pub fn encode<'a>(&self, out: &'a mut Vec<u8>) -> Rules<'a> {
        let rules: Vec<(u8, &[u8])> = self
            .rules
            .iter()
            .map(|r| (if r.kind == RuleKind::Include { RULE_INCLUDE } else { RULE_EXCLUDE }, r.pattern.as_bytes()))
            .collect();
        Rules::encode(&rules, out)
    }

    /// The rules of a peer's `Filter` frame, compiled (its caps were checked by the decoder and
    /// are checked again here).
    pub fn of_frame(f: &FilterRules<'_>) -> Result<Filter, FilterError> {
        let mut rules = Vec::with_capacity(f.rules.len().min(MAX_FILTER_RULES));
        for (kind, p) in f.rules.iter() {
            let pattern = std::str::from_utf8(p).map_err(|_| FilterError::NotUtf8(linerate_proto::name::escape(p)))?;
            let kind = if kind == RULE_INCLUDE { RuleKind::Include } else { RuleKind::Exclude };
            rules.push(Rule { kind, pattern: pattern.to_string() });
        }
        Filter::new(rules)
    }
}

/// A pattern as an error shows it: escaped, and cut to 64 characters.
fn shown(pattern: &str) -> String {
    let mut s: String = pattern.chars().take(64).collect();
    if s.len() < pattern.len() {
        s.push('…');
    }
    linerate_proto::name::escape(s.as_bytes())
}

/// A wildcard pattern of rsync's as a glob for globset (which then runs with `literal_separator`
/// and backslash escapes): `{` and `}` are literal in rsync, so escaped; a `**` inside a name
/// (`foo**`, which in rsync crosses `/`) becomes `*{,/**/}*`, one between names (`a/**/b`)
/// `*/**`; classes and escapes pass as they are.
fn translate(p: &str) -> String {
    let c: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 8);
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '\\' => {
                out.push('\\');
                if let Some(&n) = c.get(i + 1) {
                    out.push(n);
                    i += 1;
                }
            }
            '[' => {
                // Up to the closing `]` (one right after `[`, `[!` or `[^` belongs to the class).
                let mut j = i + 1;
                if matches!(c.get(j), Some('!' | '^')) {
                    j += 1;
                }
                if c.get(j) == Some(&']') {
                    j += 1;
                }
                while j < c.len() && c[j] != ']' {
                    j += 1;
                }
                let end = (j + 1).min(c.len());
                out.extend(&c[i..end]);
                i = end;
                continue;
            }
            '{' | '}' => {
                out.push('\\');
                out.push(c[i]);
            }
            '*' if c.get(i + 1) == Some(&'*') => {
                let mut j = i;
                while c.get(j) == Some(&'*') {
                    j += 1;
                }
                let whole = (i == 0 || c[i - 1] == '/') && (j == c.len() || c[j] == '/');
                // A whole `**` between two names (`a/**/b`) spans at least one name in rsync
                // (`a/b` does not match), where globset's would take none.
                let middle = i > 0 && j < c.len();
                out.push_str(match (whole, middle) {
                    (true, true) => "*/**",
                    (true, false) => "**",
                    (false, _) => "*{,/**/}*",
                });
                i = j;
                continue;
            }
            ch => out.push(ch),
        }
        i += 1;
    }
    out
}

/// Rules as a session applies them to one tree: with the root's own name at the start of every
/// path (`cp dir DEST`: paths are `dir/...`, as rsync's are), or without it (`cp dir/ DEST`: the
/// directory is the transfer root).
#[derive(Debug, Clone)]
pub struct TreeFilter {
    /// The compiled rules.
    pub filter: Arc<Filter>,
    /// The root's name begins every path (it is not the transfer root itself).
    pub root_in_path: bool,
}

impl TreeFilter {
    /// Whether the entry at `rel` below the root named `root` is excluded; `rel` empty is the
    /// root itself (never excluded when it is the transfer root).
    pub fn excluded(&self, root: &[u8], rel: &[u8], is_dir: bool) -> bool {
        match (self.root_in_path, rel.is_empty()) {
            (false, true) => false,
            (false, false) => self.filter.excluded(rel, is_dir),
            (true, true) => self.filter.excluded(root, is_dir),
            (true, false) => {
                let mut p = Vec::with_capacity(root.len() + 1 + rel.len());
                p.extend_from_slice(root);
                p.push(b'/');
                p.extend_from_slice(rel);
                self.filter.excluded(&p, is_dir)
            }
        }
    }

    /// Whether `name` in the receiver's directory `dir` (its path below the destination, the
    /// root's name first) is excluded.
    pub fn excluded_in(&self, dir: &[u8], name: &[u8], is_dir: bool) -> bool {
        let (root, below) = match dir.iter().position(|&b| b == b'/') {
            Some(i) => (&dir[..i], &dir[i + 1..]),
            None => (dir, &b""[..]),
        };
        let mut rel = below.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name);
        self.excluded(root, &rel, is_dir)
    }

    /// The `Filter` frame's flags for these rules.
    pub fn frame_flags(&self, delete_excluded: bool) -> u8 {
        let mut f = 0;
        if !self.root_in_path {
            f |= FILTER_CONTENTS;
        }
        if delete_excluded {
            f |= FILTER_DELETE_EXCLUDED;
        }
        f
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn filter(rules: &[&str]) -> Filter {
        let mut r = Vec::new();
        for t in rules {
            push_rule(&mut r, t, RuleKind::Exclude);
        }
        Filter::new(r).unwrap()
    }

    fn ex(f: &Filter, path: &str) -> bool {
        f.excluded(path.as_bytes(), false)
    }

    fn ex_dir(f: &Filter, path: &str) -> bool {
        f.excluded(path.as_bytes(), true)
    }

    #[test]
    fn a_pattern_without_a_slash_matches_the_last_name_at_any_depth() {
        let f = filter(&["*.o"]);
        assert!(ex(&f, "a.o") && ex(&f, "src/a.o") && ex(&f, "src/deep/er/b.o"));
        assert!(!ex(&f, "a.c") && !ex(&f, "x.o/y"), "only the last name");
        assert!(ex(&f, ".hidden.o"), "a leading dot is an ordinary character");
    }

    #[test]
    fn a_leading_slash_anchors_to_the_transfer_root() {
        let f = filter(&["/build"]);
        assert!(ex(&f, "build") && ex_dir(&f, "build"));
        assert!(!ex(&f, "src/build"));
    }

    #[test]
    fn a_trailing_slash_matches_directories_only() {
        let f = filter(&["node_modules/"]);
        assert!(ex_dir(&f, "node_modules") && ex_dir(&f, "web/app/node_modules"));
        assert!(!ex(&f, "node_modules"), "a file of that name is sent");
    }

    #[test]
    fn a_slash_inside_matches_the_end_of_the_path() {
        let f = filter(&["sub/file"]);
        assert!(ex(&f, "sub/file") && ex(&f, "a/b/sub/file"));
        assert!(!ex(&f, "file") && !ex(&f, "xsub/file") && !ex(&f, "sub/file/x"));
        let f = filter(&["foo/*/bar"]);
        assert!(ex(&f, "foo/x/bar") && ex(&f, "top/foo/x/bar"));
        assert!(!ex(&f, "foo/x/y/bar"), "'*' does not cross '/'");
    }

    #[test]
    fn star_stops_at_a_slash_and_double_star_does_not() {
        let f = filter(&["/a/*"]);
        assert!(ex(&f, "a/x") && !ex(&f, "a/x/y"));
        let f = filter(&["/a/**"]);
        assert!(ex(&f, "a/x") && ex(&f, "a/x/y") && !ex_dir(&f, "a"));
        let f = filter(&["/foo/**/bar"]);
        assert!(ex(&f, "foo/x/bar") && ex(&f, "foo/x/y/bar"));
        // rsync: "/foo/**/bar" does not exclude /foo/bar.
        assert!(!ex(&f, "foo/bar"), "globset's '/**/' would take zero directories");
        let f = filter(&["/lib**"]);
        assert!(ex(&f, "lib") && ex(&f, "libc/x/y.so") && !ex(&f, "x/lib"), "'**' inside a name crosses '/'");
        let f = filter(&["dir/***"]);
        assert!(ex_dir(&f, "dir") && ex(&f, "dir/x") && ex(&f, "a/dir/x/y"));
        assert!(!ex(&f, "dir"), "'dir/***' matches dir as a directory");
    }

    #[test]
    fn question_marks_and_classes_match_one_character_but_not_a_slash() {
        let f = filter(&["file?.[ch]"]);
        assert!(ex(&f, "file1.c") && ex(&f, "d/fileX.h"));
        assert!(!ex(&f, "file12.c") && !ex(&f, "file1.o") && !ex(&f, "file.c"));
        let f = filter(&["/a?b"]);
        assert!(!ex(&f, "a/b"));
        let f = filter(&["[!a]*"]);
        assert!(ex(&f, "bcd") && !ex(&f, "abc"));
    }

    #[test]
    fn braces_are_literal_and_a_backslash_escapes_only_beside_a_wildcard() {
        let f = filter(&["{a,b}"]);
        assert!(ex(&f, "{a,b}") && !ex(&f, "a"));
        let f = filter(&["*{x}"]);
        assert!(ex(&f, "a{x}") && !ex(&f, "ax"));
        let f = filter(&["foo\\bar"]);
        assert!(ex(&f, "foo\\bar"), "no wildcard: the backslash is literal");
        let f = filter(&["\\*.o"]);
        assert!(ex(&f, "*.o") && !ex(&f, "a.o"), "a wildcard: the backslash escapes");
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let f = filter(&["+ keep.o", "*.o"]);
        assert!(!ex(&f, "keep.o") && ex(&f, "other.o"));
        let f = filter(&["*.o", "+ keep.o"]);
        assert!(ex(&f, "keep.o"), "the exclude came first");
        // rsync's "include only *.c": directories and .c files in, the rest out.
        let f = filter(&["+ */", "+ *.c", "*"]);
        assert!(!ex_dir(&f, "src") && !ex(&f, "src/a.c") && ex(&f, "src/a.h") && ex(&f, "README"));
        // The name and path sets are both consulted; the lower index wins across them.
        let f = filter(&["+ /a/x.o", "*.o"]);
        assert!(!ex(&f, "a/x.o") && ex(&f, "b/x.o"));
    }

    #[test]
    fn prefixes_clear_and_files_read_as_rsync_reads_them() {
        let mut r = Vec::new();
        push_file_rules(
            &mut r,
            "# comment\n; also a comment\n\n*.tmp\n- *.o\n+ keep.log\n*.log\n#x\n",
            RuleKind::Exclude,
        );
        let kinds: Vec<_> = r.iter().map(|r| (r.kind, r.pattern.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                (RuleKind::Exclude, "*.tmp"),
                (RuleKind::Exclude, "*.o"),
                (RuleKind::Include, "keep.log"),
                (RuleKind::Exclude, "*.log")
            ]
        );
        let mut inc = Vec::new();
        push_file_rules(&mut inc, "a\n- b\n!\nc", RuleKind::Include);
        assert_eq!(inc, vec![Rule { kind: RuleKind::Include, pattern: "c".into() }], "'!' clears");
        // A '#' inside a pattern is part of it.
        let f = filter(&["a#b"]);
        assert!(ex(&f, "a#b"));
    }

    #[test]
    fn bad_rules_are_errors() {
        let bad = |p: &str| Filter::new(vec![Rule { kind: RuleKind::Exclude, pattern: p.into() }]).unwrap_err();
        assert_eq!(bad(""), FilterError::Empty);
        assert!(matches!(bad("/"), FilterError::BadPattern { .. }));
        assert!(matches!(bad("[a"), FilterError::BadPattern { .. }), "an unclosed class");
        let many = vec![Rule { kind: RuleKind::Exclude, pattern: "x".into() }; MAX_FILTER_RULES + 1];
        assert!(matches!(Filter::new(many), Err(FilterError::TooMany { .. })));
        let long = Rule { kind: RuleKind::Exclude, pattern: "x".repeat(MAX_PATH + 1) };
        assert!(matches!(Filter::new(vec![long]), Err(FilterError::TooLong { .. })));
    }

    /// Issue 42: 87 patterns of `**/` × 1000 (inside every size cap) made globset take 273 MB
    /// before it failed; the budget refuses them before anything is compiled, naming the rule,
    /// while the largest ordinary rule sets compile.
    #[test]
    fn rules_that_would_compile_past_the_budget_are_refused_first_and_named() {
        let rules = |ps: Vec<String>| {
            Filter::new(ps.into_iter().map(|pattern| Rule { kind: RuleKind::Exclude, pattern }).collect())
        };
        let deep = (0..87).map(|i| format!("\x1b{}x{i}", "**/".repeat(1000))).collect();
        let err = rules(deep).unwrap_err();
        match &err {
            FilterError::TooComplex { rule, pattern, len, cap } => {
                assert!(*rule > 1 && *rule < 87, "{rule}");
                assert!(len > cap && *cap == MAX_FILTER_REGEX);
                assert!(pattern.starts_with("\\x1b**/**/") && pattern.ends_with('…'), "{pattern}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!err.to_string().contains('\x1b'), "{err}");
        let n = MAX_FILTER_RULES;
        rules((0..n).map(|i| format!("*.o{i}")).collect()).unwrap();
        rules((0..n).map(|i| format!("**/dir/name{i}")).collect()).unwrap();
        rules((0..n / 4).map(|i| format!("build-*/**/cache/*.tmp{i}")).collect()).unwrap();
    }

    #[test]
    fn every_short_pattern_of_wildcards_and_slashes_compiles_or_is_refused_without_a_panic() {
        // The glue between rsync's syntax and globset (escapes, classes, `**` inside names,
        // `/***`) on every pattern of up to three of these characters, peer input included.
        let alphabet = ['*', '?', '[', ']', '!', '/', '\\', '{', '}', 'a'];
        let mut patterns = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..3 {
            last = last.iter().flat_map(|p| alphabet.iter().map(move |c| format!("{p}{c}"))).collect();
            patterns.extend(last.iter().cloned());
        }
        patterns.extend(["a/***", "/***", "***", "a**b/**/c", "[!]a]/**", "\\*/x", "**/**"].map(String::from));
        let mut compiled = 0;
        for p in &patterns {
            if let Ok(f) = Filter::new(vec![Rule { kind: RuleKind::Exclude, pattern: p.clone() }]) {
                compiled += 1;
                for path in ["a", "a/b", "{a}/b/a", "*/?", "[", "a/a/a/a"] {
                    let _ = f.excluded(path.as_bytes(), true);
                    let _ = f.excluded(path.as_bytes(), false);
                }
            }
        }
        assert!(compiled > patterns.len() / 2, "{compiled} of {}", patterns.len());
    }

    #[test]
    fn rules_travel_in_a_frame_and_come_back_the_same() {
        let f = filter(&["node_modules/", "+ keep.o", "*.o"]);
        let mut out = Vec::new();
        let frame = FilterRules { flags: 0, rules: f.encode(&mut out) };
        let back = Filter::of_frame(&frame).unwrap();
        assert_eq!(back.rules(), f.rules());
        let mut out = Vec::new();
        let bad = FilterRules { flags: 0, rules: Rules::encode(&[(RULE_EXCLUDE, b"\xff\xfe".as_slice())], &mut out) };
        assert!(matches!(Filter::of_frame(&bad), Err(FilterError::NotUtf8(_))));
    }

    #[test]
    fn a_tree_filter_puts_the_root_name_first_unless_it_is_the_transfer_root() {
        let t = TreeFilter { filter: Arc::new(filter(&["/src/skip", "/top"])), root_in_path: true };
        assert!(t.excluded(b"src", b"skip", false));
        assert!(!t.excluded(b"src", b"", true));
        assert!(t.excluded_in(b"src", b"skip", false), "the receiver's view: the root's directory");
        let t = TreeFilter { filter: t.filter.clone(), root_in_path: false };
        assert!(!t.excluded(b"src", b"skip", false));
        assert!(t.excluded(b"src", b"top", false));
        assert!(t.excluded_in(b"dest", b"top", true), "the receiver names the root as the destination");
        assert!(!t.excluded_in(b"dest/sub", b"top", true));
        assert_eq!(t.frame_flags(true), FILTER_CONTENTS | FILTER_DELETE_EXCLUDED);
    }
}
