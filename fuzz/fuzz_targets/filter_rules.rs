//! The `Filter` frame's decoder (`cp --exclude` rules, peer input to a server) on arbitrary
//! bodies: no panic; what decodes holds only known flags and kinds, non-empty patterns within
//! `MAX_PATH`, at most `MAX_FILTER_RULES` of them and `MAX_FILTER_BYTES` in all, as many as it
//! announces; and it re-encodes to the very bytes it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_proto::caps::{MAX_FILTER_BYTES, MAX_FILTER_RULES, MAX_PATH};
use linerate_proto::frame::{self, Frame, Rules, FILTER_CONTENTS, FILTER_DELETE_EXCLUDED, RULE_INCLUDE};

/// The `Filter` frame's type byte.
const FILTER: u8 = 0x15;

fuzz_target!(|body: &[u8]| {
    let mut data = vec![FILTER];
    data.extend_from_slice(&(body.len() as u32).to_be_bytes());
    data.extend_from_slice(body);
    let Ok((f, used)) = frame::decode(&data) else { return };
    assert_eq!(used, data.len());
    let Frame::Filter(r) = &f else { panic!("tag 0x15 decoded as {f:?}") };
    assert_eq!(r.flags & !(FILTER_CONTENTS | FILTER_DELETE_EXCLUDED), 0);
    let rules: Vec<(u8, &[u8])> = r.rules.iter().collect();
    assert_eq!(rules.len(), r.rules.len(), "announced and present differ");
    assert!(rules.len() <= MAX_FILTER_RULES);
    assert!(rules.iter().all(|(k, p)| *k <= RULE_INCLUDE && !p.is_empty() && p.len() <= MAX_PATH));
    assert!(rules.iter().map(|(_, p)| p.len()).sum::<usize>() <= MAX_FILTER_BYTES);
    let mut out = Vec::new();
    let again = Rules::encode(&rules, &mut out);
    assert_eq!(again, r.rules, "re-encoded rules differ");
    let mut buf = Vec::new();
    f.encode(&mut buf);
    assert_eq!(buf, data, "re-encoding differs from the decoded bytes");
});
