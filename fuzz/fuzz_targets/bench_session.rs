//! The benchmark session's decoders and state machines on hostile input: `DataHello`,
//! `MsgHeader`, `UdpHeader`, and any frame fed to `ServerMachine`/`ClientMachine` (JSON test
//! requests, admissions and results included). No panic; accepted values re-encode or validate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_proto::bench::{
    ClientEvent, ClientMachine, DataHello, Limits, MsgHeader, ServerEvent, ServerMachine, TestKind, TestSpec,
    UdpHeader, DATA_HELLO_LEN, MAX_PROFILE_MSG, MSG_HEADER_LEN, REPLY_STREAM,
};
use linerate_proto::frame::{self, Frame};

fuzz_target!(|data: &[u8]| {
    if data.len() >= DATA_HELLO_LEN {
        let b: [u8; DATA_HELLO_LEN] = data[..DATA_HELLO_LEN].try_into().unwrap_or([0; DATA_HELLO_LEN]);
        if let Ok(h) = DataHello::decode(&b) {
            assert_eq!(h.encode(), b);
        }
    }
    if data.len() >= MSG_HEADER_LEN {
        let b: [u8; MSG_HEADER_LEN] = data[..MSG_HEADER_LEN].try_into().unwrap_or([0; MSG_HEADER_LEN]);
        if let Ok(h) = MsgHeader::decode(&b) {
            assert!(h.len <= MAX_PROFILE_MSG && (h.reply <= MAX_PROFILE_MSG || h.reply == REPLY_STREAM));
        }
    }
    let _ = UdpHeader::read(data);

    // The server side: every frame in the input, in order, through one machine.
    let mut s = ServerMachine::default();
    for f in frame::frames(data) {
        let Ok(f) = f else { break };
        match s.handle(&f) {
            Ok(ServerEvent::Request(spec)) => {
                let _ = spec.validate(&Limits::default());
                s.admitted();
            }
            Ok(ServerEvent::Stop) => s.finished(),
            Ok(ServerEvent::Go) | Err(_) => {}
        }
    }
    // The client side, after asking for a test.
    let mut c = ClientMachine::default();
    let _ = c.request(&TestSpec::new(TestKind::TcpStream));
    for f in frame::frames(data) {
        let Ok(f) = f else { break };
        match c.handle(&f) {
            Ok(ClientEvent::Ready(_)) => {
                let _ = c.go();
            }
            Ok(ClientEvent::Started) => {
                let _ = c.stop();
            }
            Ok(ClientEvent::Result(r)) => assert!(r.seconds.is_finite()),
            Err(_) => {}
        }
        let _ = Frame::BenchGo;
    }
});
