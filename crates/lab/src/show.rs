//! What the `lab` commands show, rendered here and written out by the CLI: a lab's hosts, the
//! commands a plan would run, the end of a teardown, and which runs of a result failed.

use crate::Plan;
use linerate_model::doc::lab::LabDocument;

/// A line per host: its name, its namespace and its interfaces' addresses.
pub fn hosts(plan: &Plan) -> String {
    let mut o = String::new();
    for (h, p) in &plan.hosts {
        let addrs: Vec<String> =
            p.ifaces.iter().map(|i| format!("{} {}/{}", i.name, crate::scenario::fmt_ip(i.addr), i.prefix)).collect();
        o.push_str(&format!("  {h:<12} netns {:<24} {}\n", p.ns, addrs.join(", ")));
    }
    o
}

/// `lab up`: the lab that came up, its hosts, and how to use it (and leave it).
pub fn up(plan: &Plan, scenario: &str, detach: bool) -> String {
    let mut o = format!("lab {} up: scenario {scenario} ({} namespaces)\n", plan.run, plan.namespaces.len());
    o.push_str(&hosts(plan));
    if detach {
        let id = &plan.run;
        o.push_str(&format!(
            "detached; `linerate lab exec HOST -- CMD` to use it, `linerate lab down {id}` to remove it\n"
        ));
    } else {
        o.push_str("`linerate lab exec HOST -- CMD` from another terminal; Ctrl-C tears it down\n");
    }
    o
}

/// `lab plan`: a title, the hosts, and every ip/tc command of `plan`, a line each.
pub fn plan(plan: &Plan, scenario: &str) -> String {
    let mut o = format!("# {scenario} — run id shown as {}\n", plan.run);
    o.push_str(&hosts(plan));
    for c in &plan.commands {
        o.push_str(&c.join(" "));
        o.push('\n');
    }
    o
}

/// The end of run `id`'s teardown: one line when it is gone, else a line per problem.
pub fn down_lines(id: &str, problems: &[String]) -> Vec<String> {
    if problems.is_empty() {
        vec![format!("lab {id} torn down")]
    } else {
        problems.iter().map(|p| format!("linerate lab: {id}: {p}")).collect()
    }
}

/// Which runs failed and which groups they left incomplete, for the closing line of a run
/// that exits 1.
pub fn failures(doc: &LabDocument) -> String {
    let failed: Vec<&str> = doc.runs.iter().filter(|r| !r.ok).map(|r| r.name.as_str()).collect();
    let incomplete: Vec<String> = doc
        .groups
        .iter()
        .filter(|g| !g.ok && g.members.len() > 1)
        .map(|g| {
            let (n, of) = g.measured();
            format!("{} ({n} of {of} members measured)", g.group)
        })
        .collect();
    let mut s = format!("{} of {} runs failed: {}", failed.len(), doc.runs.len(), failed.join(", "));
    if !incomplete.is_empty() {
        s.push_str(&format!(
            "; incomplete groups, whose totals and fairness are not the experiment's: {}",
            incomplete.join(", ")
        ));
    }
    s.push_str(" (each run's error is in the results file and the log above)");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_teardown_is_one_line_or_a_line_per_problem() {
        assert_eq!(down_lines("lr1", &[]), ["lab lr1 torn down"]);
        let problems = ["a".to_string(), "b".to_string()];
        assert_eq!(down_lines("lr1", &problems), ["linerate lab: lr1: a", "linerate lab: lr1: b"]);
    }
}
