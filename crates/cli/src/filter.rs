//! `cp`'s rsync filter flags: `--exclude`, `--include`, `--exclude-from`, `--include-from`,
//! `--delete-excluded`. The rules keep the order they were given in across all four flags (the
//! first match wins), which clap's derive cannot tell, so these flags are read from the matches
//! by hand, with their positions; linerate-copy's `filter` reads and compiles them.

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use linerate_copy::filter::{from_given, Filter, Given, RuleKind, RulesError};
use std::path::PathBuf;
use std::sync::Arc;

/// The filter flags, in the order given.
#[derive(Debug, Clone, Default)]
pub struct FilterArgs {
    given: Vec<Given>,
    /// `--delete-excluded`.
    pub delete_excluded: bool,
}

const FLAGS: [(&str, RuleKind, bool); 4] = [
    ("exclude", RuleKind::Exclude, false),
    ("include", RuleKind::Include, false),
    ("exclude-from", RuleKind::Exclude, true),
    ("include-from", RuleKind::Include, true),
];

impl FilterArgs {
    /// The compiled rules (`None` without any), reading rule files (`-`: standard input).
    pub fn filter(&self) -> Result<Option<Arc<Filter>>, RulesError> {
        from_given(&self.given)
    }
}

impl FromArgMatches for FilterArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut at: Vec<(usize, Given)> = Vec::new();
        for (id, kind, file) in FLAGS {
            let (Some(values), Some(indices)) = (m.get_many::<String>(id), m.indices_of(id)) else { continue };
            at.extend(indices.zip(values).map(|(i, v)| {
                (i, if file { Given::File(kind, PathBuf::from(v)) } else { Given::Rule(kind, v.clone()) })
            }));
        }
        at.sort_by_key(|(i, _)| *i);
        Ok(FilterArgs {
            given: at.into_iter().map(|(_, g)| g).collect(),
            delete_excluded: m.get_flag("delete-excluded"),
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = FilterArgs::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for FilterArgs {
    fn augment_args(cmd: Command) -> Command {
        let rule = |id: &'static str, name: &'static str, help: &'static str| {
            Arg::new(id).long(id).value_name(name).action(ArgAction::Append).help(help)
        };
        cmd.arg(rule(
            "exclude",
            "PATTERN",
            "Do not copy what matches PATTERN (rsync's rules; see FILTER RULES below). Repeatable; \
             with --include, the first matching rule wins",
        ))
        .arg(rule("include", "PATTERN", "Copy what matches PATTERN even where a later --exclude matches it"))
        .arg(rule(
            "exclude-from",
            "FILE",
            "Read exclude patterns from FILE, one a line ('-': standard input); blank lines and lines \
             starting with ';' or '#' are skipped, '+ PAT' includes and '- PAT' excludes",
        ))
        .arg(rule("include-from", "FILE", "Read include patterns from FILE, as --exclude-from does"))
        .arg(
            Arg::new("delete-excluded")
                .long("delete-excluded")
                .action(ArgAction::SetTrue)
                .help("With --delete: also delete what the rules exclude at the destination (implies --delete)"),
        )
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        FilterArgs::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct T {
        #[command(flatten)]
        f: FilterArgs,
    }

    #[test]
    fn rules_keep_their_order_across_the_four_flags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("rules");
        std::fs::write(&file, "# skip\n+ keep.o\n- *.tmp\n").expect("write");
        let t: T = clap::Parser::try_parse_from([
            "t".as_ref(),
            "--include".as_ref(),
            "a.o".as_ref(),
            "--exclude-from".as_ref(),
            file.as_os_str(),
            "--exclude=*.o".as_ref(),
            "--delete-excluded".as_ref(),
        ])
        .expect("parse");
        assert!(t.f.delete_excluded);
        let f = t.f.filter().expect("rules").expect("some");
        let got: Vec<_> = f.rules().iter().map(|r| (r.kind, r.pattern.as_str())).collect();
        assert_eq!(
            got,
            [
                (RuleKind::Include, "a.o"),
                (RuleKind::Include, "keep.o"),
                (RuleKind::Exclude, "*.tmp"),
                (RuleKind::Exclude, "*.o")
            ]
        );
        let none: T = clap::Parser::try_parse_from(["t"]).expect("parse");
        assert!(none.f.filter().expect("no rules").is_none());
        let missing: T = clap::Parser::try_parse_from(["t", "--exclude-from", "/nonexistent/rules"]).expect("parse");
        let e = format!("{:#}", missing.f.filter().unwrap_err());
        assert!(e.contains("/nonexistent/rules"), "{e}");
        let bad: T = clap::Parser::try_parse_from(["t", "--exclude", "[a"]).expect("parse");
        assert!(format!("{:#}", bad.f.filter().unwrap_err()).contains("'[a'"));
    }
}
