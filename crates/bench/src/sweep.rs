//! A benchmark sweep (`linerate bench --sweep msg=1K,64K --sweep conns=1,8`): every combination
//! of the swept values applied to a base test, each point labelled by its values, and `-k N`
//! (N writes of each point's own write size).

use linerate_model::units::{parse_size32, UnitError};
use linerate_proto::bench::{TestKind, TestSpec};

/// A sweep point: its (key, value) labels and its test.
pub type SweepPoint = (Vec<(String, String)>, TestSpec);

/// Why a `--sweep` cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// Not `KEY=V1,V2`.
    #[error("--sweep {0:?}: expected KEY=V1,V2")]
    Form(String),
    /// A key this sweep does not know.
    #[error("--sweep {0}: unknown key (msg, buf, conns, response)")]
    UnknownKey(String),
    /// A size that does not parse, or is over 4 GiB.
    #[error(transparent)]
    Size(#[from] UnitError),
    /// A connection count that does not parse.
    #[error("--sweep conns: {value:?}")]
    Connections {
        /// The value as given.
        value: String,
        /// Why it does not parse.
        #[source]
        source: std::num::ParseIntError,
    },
}

/// A size in the one grammar (`64K`, `64KiB`, `65536`) that fits 32 bits.
fn size32(s: &str) -> Result<u32, SweepError> {
    Ok(parse_size32(s)?)
}

/// Every combination of the sweeps' values applied to `base`, in the order given (the last
/// sweep varies fastest); one point, `base` unlabelled, without sweeps. Keys: `msg` (`length`),
/// `buf` (`window`: both buffers), `conns` (`parallel`), `response`.
pub fn points(base: &TestSpec, sweeps: &[String]) -> Result<Vec<SweepPoint>, SweepError> {
    let mut points = vec![(Vec::new(), base.clone())];
    for sw in sweeps {
        let (key, vals) = sw.split_once('=').ok_or_else(|| SweepError::Form(sw.clone()))?;
        let mut next = Vec::new();
        for (labels, spec) in &points {
            for v in vals.split(',').map(str::trim).filter(|v| !v.is_empty()) {
                let mut s = spec.clone();
                match key {
                    "msg" | "length" => s.msg_size = size32(v)?,
                    "buf" | "window" => {
                        let b = size32(v)?;
                        (s.sndbuf, s.rcvbuf) = (Some(b), Some(b));
                    }
                    "conns" | "parallel" => {
                        s.connections =
                            v.parse().map_err(|source| SweepError::Connections { value: v.to_string(), source })?
                    }
                    "response" => s.resp_size = size32(v)?,
                    other => return Err(SweepError::UnknownKey(other.to_string())),
                }
                let mut l = labels.clone();
                l.push((key.to_string(), v.to_string()));
                next.push((l, s));
            }
        }
        points = next;
    }
    Ok(points)
}

/// `-k N`: N writes of each point's own write size.
pub fn count_blocks(points: &mut [SweepPoint], blocks: Option<u64>) {
    if let Some(k) = blocks {
        for (_, s) in points {
            s.bytes = Some(k.saturating_mul(u64::from(s.msg_size)));
        }
    }
}

/// A stream test's `-b` is per stream, as iperf3's is: each point's total rate is the rate per
/// stream times its connections (a `--sweep conns` point scales with its count). Other kinds
/// keep their rate as given (rr/crr: transactions/s in all).
pub fn rate_per_stream(points: &mut [SweepPoint]) {
    for (_, s) in points {
        if matches!(s.kind, TestKind::TcpStream | TestKind::UdpStream) {
            s.rate = s.rate.map(|r| r.saturating_mul(u64::from(s.connections.max(1))));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sweeps_run_every_combination() {
        let base = TestSpec::new(TestKind::TcpStream);
        let pts = points(&base, &["msg=512,64K".into(), "buf=8K,64K".into(), "conns=8,64,512".into()]).unwrap();
        assert_eq!(pts.len(), 12);
        assert_eq!(pts[0].0, [("msg".into(), "512".into()), ("buf".into(), "8K".into()), ("conns".into(), "8".into())]);
        assert_eq!((pts[11].1.msg_size, pts[11].1.sndbuf, pts[11].1.connections), (65536, Some(65536), 512));
        assert_eq!(points(&base, &[]).unwrap().len(), 1);
    }

    #[test]
    fn a_bad_sweep_is_named() {
        let base = TestSpec::new(TestKind::TcpStream);
        let err = |s: &str| points(&base, &[s.into()]).unwrap_err().to_string();
        assert_eq!(err("bogus=1"), "--sweep bogus: unknown key (msg, buf, conns, response)");
        assert_eq!(err("msg"), "--sweep \"msg\": expected KEY=V1,V2");
        assert_eq!(err("conns=x"), "--sweep conns: \"x\"");
        assert!(err("msg=8G").contains("over 4 GiB"), "{}", err("msg=8G"));
    }

    #[test]
    fn a_block_count_makes_bytes_of_each_points_write_size() {
        let base = TestSpec::new(TestKind::TcpStream);
        let mut pts = points(&base, &["msg=1K,2K".into()]).unwrap();
        count_blocks(&mut pts, Some(100));
        assert_eq!(pts.iter().map(|(_, s)| s.bytes).collect::<Vec<_>>(), [Some(102_400), Some(204_800)]);
    }

    #[test]
    fn a_stream_rate_is_per_stream_and_an_rr_rate_in_all() {
        let mut base = TestSpec::new(TestKind::TcpStream);
        base.rate = Some(100_000_000);
        let mut pts = points(&base, &["conns=1,4".into()]).unwrap();
        let mut rr = TestSpec::new(TestKind::TcpRr);
        (rr.rate, rr.connections) = (Some(1000), 4);
        pts.push((Vec::new(), rr));
        rate_per_stream(&mut pts);
        assert_eq!(
            pts.iter().map(|p| p.1.rate).collect::<Vec<_>>(),
            [Some(100_000_000), Some(400_000_000), Some(1000)]
        );
    }
}
