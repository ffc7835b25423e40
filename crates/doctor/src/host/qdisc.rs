//! The queueing discipline on an interface, from `tc qdisc show dev IF` (iproute2).

use serde::{Deserialize, Serialize};
use std::process::Command;

/// One qdisc line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Qdisc {
    /// Kind (`fq`, `fq_codel`, `mq`, `pfifo_fast`, `noqueue`, `htb`...).
    pub kind: String,
    /// Handle (`0:`, `1:`).
    pub handle: String,
    /// Parent (`root` for the root qdisc, else the parent class id).
    pub parent: String,
}

/// The qdiscs of one interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QdiscFacts {
    /// The root qdisc.
    pub root: Option<Qdisc>,
    /// Qdiscs below the root (e.g. one per transmit queue under `mq`).
    pub children: Vec<Qdisc>,
}

/// Why the qdisc could not be read.
#[derive(Debug, thiserror::Error)]
pub enum QdiscError {
    /// `tc` could not be run.
    #[error("could not run `tc` (install iproute2): {0}")]
    Spawn(#[from] std::io::Error),
    /// `tc` ran and failed.
    #[error("`tc qdisc show dev {iface}` failed: {stderr}")]
    Failed {
        /// The interface.
        iface: String,
        /// What tc said.
        stderr: String,
    },
}

/// Parse `tc qdisc show` output.
pub fn parse(text: &str) -> QdiscFacts {
    let mut f = QdiscFacts::default();
    for line in text.lines().take(4096) {
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() < 4 || t[0] != "qdisc" {
            continue;
        }
        let parent = if t[3] == "root" {
            "root".to_string()
        } else if t[3] == "parent" {
            t.get(4).copied().unwrap_or("").to_string()
        } else {
            continue;
        };
        let q = Qdisc { kind: t[1].to_string(), handle: t[2].to_string(), parent };
        if q.parent == "root" && f.root.is_none() {
            f.root = Some(q);
        } else {
            f.children.push(q);
        }
    }
    f
}

/// Run `tc qdisc show dev IFACE` and parse it.
pub fn show(iface: &str) -> Result<QdiscFacts, QdiscError> {
    let out = Command::new("tc").args(["qdisc", "show", "dev", iface]).output()?;
    if !out.status.success() {
        return Err(QdiscError::Failed {
            iface: iface.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().chars().take(300).collect(),
        });
    }
    Ok(parse(&String::from_utf8_lossy(&out.stdout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mq_with_children() {
        let f = parse(
            "qdisc mq 0: root \nqdisc fq_codel 0: parent :2 limit 10240p flows 1024\n\
             qdisc fq_codel 0: parent :1 limit 10240p flows 1024\n",
        );
        assert_eq!(f.root.as_ref().unwrap().kind, "mq");
        assert_eq!(f.children.len(), 2);
        assert_eq!(f.children[0].parent, ":2");
        assert_eq!(parse("qdisc noqueue 0: root refcnt 2\n").root.unwrap().kind, "noqueue");
        assert!(parse("garbage\n").root.is_none());
    }
}
