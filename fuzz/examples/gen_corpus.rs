//! Writes the committed seed corpus: `cargo run --manifest-path fuzz/Cargo.toml --example
//! gen_corpus [DIR]` (default `fuzz/corpus`). Every seed is a small valid input; the handshake
//! seeds carry a fresh ephemeral key and so change on every run, the others are deterministic.

use arbitrary::{Arbitrary, Unstructured};
use linerate_fuzz::bench_model;
use linerate_fuzz::pull_receiver::Receiver;
use linerate_fuzz::tracker_model::{Harness, Ops};
use linerate_fuzz::{handshake_prologue, handshake_suite, record_params, HANDSHAKE_PSK, RECORD_KEY};
use linerate_proto::frame::*;
use linerate_proto::handshake::{Handshake, Role};
use linerate_proto::hello::{AuthMode, ClientHello, ServerHello, StreamKind, Suite};
use linerate_proto::record::{Sealer, HEADER_LEN};
use std::fs;
use std::path::{Path, PathBuf};

fn samples() -> Vec<(&'static str, Frame<'static>)> {
    let t = Time { sec: 1_700_000_000, nsec: 123_456_789 };
    vec![
        (
            "begin",
            Frame::Begin(Begin {
                dest: b"backup/dir",
                sources: 2,
                chunk_size: 1 << 20,
                flags: FLAG_VERIFY | FLAG_FSYNC | FLAG_HARD_LINKS | FLAG_SPARSE,
                streams: 4,
                modify_window: 2,
            }),
        ),
        ("hard_link", Frame::HardLink(HardLink { kind: LINK_NAME, file: 7, parent: 1, name: b"again" })),
        ("link_target", Frame::HardLink(HardLink { kind: LINK_TARGET, file: 7, parent: 0, name: b"" })),
        ("hole", Frame::Hole(Hole { file: 7, offset: 1 << 20, len: 2 << 20 })),
        (
            "dir",
            Frame::Dir(DirEntry { id: 1, parent: 0, name: b"d", mode: 0o755, mtime: t, owner: Default::default() }),
        ),
        (
            "link",
            Frame::Link(LinkEntry {
                parent: 1,
                name: b"l",
                target: b"../x",
                mtime: Time { sec: -5, nsec: 0 },
                owner: Default::default(),
            }),
        ),
        (
            "file_start",
            Frame::FileStart(FileStart {
                id: 7,
                parent: 1,
                name: b"f.txt",
                size: 3,
                mode: 0o644,
                mtime: t,
                owner: Default::default(),
            }),
        ),
        ("chunk", Frame::Chunk(Chunk { file: 7, offset: 0, data: b"abc" })),
        ("file_end_digest", Frame::FileEnd(FileEnd { file: 7, size: 3, digest: Some([0xab; 32]) })),
        ("file_end", Frame::FileEnd(FileEnd { file: 7, size: 3, digest: None })),
        ("file_abort", Frame::FileAbort(FileAbort { file: 7, code: 5, message: b"changed while read" })),
        ("end", Frame::End),
        ("finish", Frame::Finish(Finish { files: 1, bytes: 3, dirs: 1, links: 1 })),
        ("target", Frame::Target { dest_is_dir: true }),
        ("error", Frame::Error(ErrorReport { code: 3, path: b"d/f.txt", message: b"EACCES" })),
        (
            "summary",
            Frame::Summary(Summary {
                files: 1,
                bytes: 3,
                dirs: 1,
                links: 1,
                errors: 0,
                cpu_user_us: 9,
                cpu_sys_us: 8,
                peak_rss: 7 << 20,
            }),
        ),
        ("fatal", Frame::Fatal(Fatal { code: 9, message: b"authentication failed" })),
        ("client_auth", Frame::ClientAuth(KeyAuth { key: [0x5a; 32], signature: [0xc3; 64] })),
        ("host_auth", Frame::HostAuth(KeyAuth { key: [0xa5; 32], signature: [0x3c; 64] })),
        (
            "special",
            Frame::Special(SpecialEntry {
                parent: 1,
                name: b"null",
                kind: SpecialKind::Char,
                major: 1,
                minor: 3,
                mode: 0o666,
                mtime: t,
                owner: Owner { uid: 0, gid: 0 },
            }),
        ),
        ("id_name", Frame::IdName(IdName { kind: IdKind::User, id: 65534, name: b"nobody" })),
        ("filter", filter_sample()),
    ]
}

/// `cp --include keep.o --exclude node_modules/ --exclude '*.o'` of a directory's contents.
fn filter_sample() -> Frame<'static> {
    let rules = [(RULE_INCLUDE, &b"keep.o"[..]), (RULE_EXCLUDE, b"node_modules/"), (RULE_EXCLUDE, b"*.o")];
    let out: &'static mut Vec<u8> = Box::leak(Box::default());
    Frame::Filter(FilterRules { flags: FILTER_CONTENTS, rules: Rules::encode(&rules, out) })
}

fn encode(frames: &[&Frame<'_>]) -> Vec<u8> {
    let mut buf = Vec::new();
    for f in frames {
        f.encode(&mut buf);
    }
    buf
}

/// A session's control stream as a client sends it, in one buffer.
fn session() -> Vec<u8> {
    let s = samples();
    let pick = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, f)| f.clone()).unwrap();
    encode(&[
        &pick("begin"),
        &pick("dir"),
        &pick("link"),
        &pick("file_start"),
        &pick("chunk"),
        &pick("file_end_digest"),
        &pick("end"),
        &pick("finish"),
    ])
}

/// Chunk data of the `pull_receiver` seeds: the tail of a 70,000-byte file (65,536 + 4,464).
static TAIL: [u8; 4464] = [0x5a; 4464];

/// Seeds of the `pull_receiver` target: what a server of a pull of `tree` might send, honest and
/// not, on one stream.
fn pull_sessions() -> Vec<(&'static str, Vec<Frame<'static>>)> {
    let t = Time { sec: 1_700_000_000, nsec: 0 };
    let dir = |id: u64, parent: u64, name: &'static [u8]| {
        Frame::Dir(DirEntry { id, parent, name, mode: 0o755, mtime: t, owner: Default::default() })
    };
    let file = |id: u64, parent: u64, name: &'static [u8], size: u64| {
        Frame::FileStart(FileStart { id, parent, name, size, mode: 0o644, mtime: t, owner: Default::default() })
    };
    // The receiver's decision on an offer follows `mtime.nsec % 4`: all, skip, hold chunk 0,
    // hold chunks 1 and 2.
    let offer = |id: u64, parent: u64, name: &'static [u8], size: u64, nsec: u32| {
        Frame::Offer(Offer {
            file: FileStart {
                id,
                parent,
                name,
                size,
                mode: 0o644,
                mtime: Time { sec: t.sec, nsec },
                owner: Default::default(),
            },
            digest: None,
        })
    };
    let link = |parent: u64, name: &'static [u8], target: &'static [u8]| {
        Frame::Link(LinkEntry { parent, name, target, mtime: t, owner: Default::default() })
    };
    let chunk = |file: u64, offset: u64, data: &'static [u8]| Frame::Chunk(Chunk { file, offset, data });
    let end = |file: u64, size: u64| Frame::FileEnd(FileEnd { file, size, digest: None });
    let keep = |dir: u64, last: bool, names: &[&[u8]]| {
        let buf: &'static mut Vec<u8> = Box::leak(Box::default());
        Frame::Keep(Keep { dir, last, names: Names::encode(names, buf) })
    };
    let mut deep = vec![dir(1, 0, b"tree")];
    deep.extend((1..24).map(|i| dir(i + 1, i, b"d")));
    deep.extend([file(100, 24, b"f", 1), chunk(100, 0, b"x"), end(100, 1), Frame::End]);
    vec![
        (
            "tree_dir",
            vec![
                dir(1, 0, b"tree"),
                dir(2, 1, b"sub"),
                file(3, 2, b"f.txt", 3),
                chunk(3, 0, b"abc"),
                Frame::FileEnd(FileEnd { file: 3, size: 3, digest: Some([0xab; 32]) }),
                link(1, b"l", b"../x"),
                file(4, 1, b"empty", 0),
                end(4, 0),
                Frame::End,
            ],
        ),
        ("tree_file", vec![file(1, 0, b"tree", 5), chunk(1, 0, b"hello"), end(1, 5), Frame::End]),
        ("tree_link", vec![link(0, b"tree", b"target"), Frame::End]),
        (
            "beside_the_tree",
            vec![
                dir(1, 0, b"tree"),
                file(2, 0, b"evil", 3),
                chunk(2, 0, b"abc"),
                link(0, b".bashrc", b"/tmp/x"),
                dir(3, 0, b"tree"),
                dir(4, 0, b"other"),
                file(5, 1, b"ok", 0),
                end(5, 0),
                Frame::End,
            ],
        ),
        (
            "out_of_order",
            vec![
                chunk(3, 0, b"abc"),
                end(3, 3),
                file(3, 2, b"f", 3),
                Frame::FileAbort(FileAbort { file: 6, code: 5, message: b"changed while read" }),
                file(6, 2, b"g", 1),
                dir(2, 1, b"sub"),
                dir(1, 0, b"tree"),
                Frame::End,
            ],
        ),
        (
            "sync_offers_and_keeps",
            vec![
                dir(1, 0, b"tree"),
                offer(5, 1, b"big", 70_000, 2),
                chunk(5, 65_536, &TAIL[..]),
                end(5, 70_000),
                offer(6, 1, b"same", 10, 1),
                chunk(6, 0, b"0123456789"),
                offer(7, 1, b"new", 3, 0),
                chunk(7, 0, b"abc"),
                end(7, 3),
                offer(8, 1, b"resumed", 200_000, 3),
                keep(1, false, &[b"big", b"same"]),
                keep(1, true, &[b"new", b"resumed"]),
                keep(0, true, &[b"tree"]),
                keep(9, true, &[b"x"]),
                dir(9, 1, b"later"),
                Frame::Finish(Finish { files: 3, bytes: 70_013, dirs: 2, links: 0 }),
            ],
        ),
        (
            "reserved_names",
            vec![
                dir(1, 0, b"tree"),
                file(2, 1, b".linerate-journal", 3),
                dir(3, 1, b".linerate-x"),
                link(1, b".linerate-l", b"x"),
                file(4, 1, b".linerate", 0),
                end(4, 0),
                Frame::End,
            ],
        ),
        (
            "one_name_in_flight",
            vec![
                dir(1, 0, b"tree"),
                file(2, 1, b"a", 3),
                file(3, 1, b"a", 3),
                Frame::FileAbort(FileAbort { file: 2, code: 5, message: b"gone" }),
                file(4, 1, b"a", 3),
                chunk(4, 0, b"xyz"),
                end(4, 3),
                file(5, 1, b"a", 0),
                end(5, 0),
                Frame::End,
            ],
        ),
        ("tree_twice", vec![file(1, 0, b"tree", 0), end(1, 0), file(2, 0, b"tree", 0), dir(3, 0, b"tree")]),
        ("deep", deep),
    ]
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

struct Out {
    root: PathBuf,
    total: usize,
}

impl Out {
    fn write(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.root.join(target);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), bytes).unwrap();
        self.total += bytes.len();
    }
}

fn sealed(selector: u8, plaintexts: &[&[u8]]) -> Vec<u8> {
    let (suite, binding) = record_params(selector);
    let mut s = Sealer::new(suite, &RECORD_KEY, binding).unwrap();
    let mut out = vec![selector];
    for p in plaintexts {
        let mut rec = vec![0u8; HEADER_LEN];
        rec.extend_from_slice(p);
        s.seal(&mut rec).unwrap();
        out.extend_from_slice(&rec);
    }
    out
}

/// Tiny deterministic generator (xorshift) for the tracker seed search.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn main() {
    let root = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"));
    let mut out = Out { root, total: 0 };

    // frame_decode: every frame type alone, and a whole control stream.
    for (name, f) in samples() {
        out.write("frame_decode", name, &encode(&[&f]));
    }
    out.write("frame_decode", "session", &session());
    // filter_rules: the body of a Filter frame.
    let f = encode(&[&filter_sample()]);
    out.write("filter_rules", "three_rules", &f[5..]);
    out.write("filter_rules", "none", &[0, 0, 0]);

    // pull_receiver: server frame streams of a pull of `tree`; each must pass the target's checks.
    for (name, frames) in pull_sessions() {
        let bytes = encode(&frames.iter().collect::<Vec<_>>());
        Receiver::run(&bytes);
        out.write("pull_receiver", name, &bytes);
    }

    // hello: each valid client preamble followed by a server answer.
    let hellos = [
        ("control_aes", StreamKind::Control, Suite::Aes256Gcm, [0; 16], 0),
        ("control_chacha", StreamKind::Control, Suite::ChaCha20Poly1305, [0; 16], 0),
        ("data_aes", StreamKind::Data, Suite::Aes256Gcm, [0x11; 16], 3),
    ];
    for (name, kind, suite, session, stream) in hellos {
        let ch = ClientHello { kind, suite, session, stream, auth: AuthMode::Secret };
        out.write("hello", name, &ch.encode());
    }
    let key = ClientHello {
        kind: StreamKind::Control,
        suite: Suite::Aes256Gcm,
        session: [0; 16],
        stream: 0,
        auth: AuthMode::PublicKey,
    };
    out.write("hello", "control_public_key", &key.encode());
    out.write("hello", "server_busy", &ServerHello { version: linerate_proto::PROTOCOL_VERSION, status: 11 }.encode());

    // record_open: records sealed with the target's fixed key, for each suite and direction.
    let sess = session();
    let s = samples();
    let begin = encode(&[&s[0].1]);
    let summary = encode(&[&s[12].1]);
    out.write("record_open", "aes_c2s_session", &sealed(0, &[&sess]));
    out.write("record_open", "chacha_c2s_two_records", &sealed(1, &[&begin, &sess[begin.len()..]]));
    out.write("record_open", "aes_s2c_summary", &sealed(2, &[&summary, b""]));
    out.write("record_open", "chacha_s2c_empty", &sealed(3, &[b""]));

    // handshake_responder: a real initiator's first message for each suite.
    for (name, selector) in [("aes", 0u8), ("chacha", 1u8)] {
        let suite = handshake_suite(selector);
        let mut i = Handshake::new(Role::Initiator, suite, &HANDSHAKE_PSK, &handshake_prologue(suite)).unwrap();
        let mut m = vec![selector];
        m.extend_from_slice(&i.write(b"").unwrap());
        // Check it really authenticates with the target's settings.
        let mut r = Handshake::new(Role::Responder, suite, &HANDSHAKE_PSK, &handshake_prologue(suite)).unwrap();
        r.read(&m[1..]).unwrap();
        out.write("handshake_responder", name, &m);
    }

    // tracker: pseudo-random inputs that reach new outcome classes in the model (and pass it).
    // Inputs the model rejects (a tracker bug) are skipped, not written: report them.
    std::panic::set_hook(Box::new(|info| {
        let msg = info.payload_as_str().unwrap_or("?").to_string();
        LAST_PANIC.with(|p| *p.borrow_mut() = msg);
    }));
    let mut failing = 0usize;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seen = 0u64;
    let mut kept = 0;
    for attempt in 0..20_000 {
        if kept >= 12 {
            break;
        }
        let len = 32 + (rng.next() % 224) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let Ok(Ops(ops)) = Ops::arbitrary_take_rest(Unstructured::new(&bytes)) else {
            continue;
        };
        // Keep small, quick inputs only.
        let Ok(features) = std::panic::catch_unwind(|| Harness::run(&ops)) else {
            if failing == 0 {
                eprintln!("tracker model check failed on a search input: {}", LAST_PANIC.with(|p| p.borrow().clone()));
            }
            failing += 1;
            continue;
        };
        if features & !seen != 0 && (features & !seen).count_ones() >= 2 {
            seen |= features;
            kept += 1;
            out.write("tracker", &format!("search_{attempt}"), &bytes);
        }
    }
    if failing > 0 {
        eprintln!("{failing} tracker search inputs failed the model check and were skipped");
    }

    // bench_machines: the same search over structured benchmark sessions.
    let mut failing = 0usize;
    let mut seen = 0u64;
    let mut kept = 0;
    for attempt in 0..50_000 {
        if kept >= 12 {
            break;
        }
        let len = 16 + (rng.next() % 480) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let Ok(bench_model::Ops(ops)) = bench_model::Ops::arbitrary_take_rest(Unstructured::new(&bytes)) else {
            continue;
        };
        let Ok(features) = std::panic::catch_unwind(|| bench_model::Harness::run(&ops)) else {
            if failing == 0 {
                eprintln!("bench model check failed on a search input: {}", LAST_PANIC.with(|p| p.borrow().clone()));
            }
            failing += 1;
            continue;
        };
        if features & !seen != 0 {
            seen |= features;
            kept += 1;
            out.write("bench_machines", &format!("search_{attempt}"), &bytes);
        }
    }
    let _ = std::panic::take_hook();
    if failing > 0 {
        eprintln!("{failing} bench_machines search inputs failed the model check and were skipped");
    }

    eprintln!("wrote seeds under {} ({} bytes in total)", out.root.display(), out.total);
}
