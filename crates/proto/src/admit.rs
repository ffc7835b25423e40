//! A server's admission as a machine without a clock (issue 30): handshake slots (in all and per
//! source address), each handshake's deadline, session slots, the one-session server's wait
//! for its client, and the stages of a shutdown (a grace for running sessions, then an abort,
//! then a last wait). The server feeds it what happens with the time it happened —
//! `handle_*(.., now)` — asks [`Admission::poll_timeout`] when to wake it next, and acts on
//! [`Admission::poll_event`]: closing a connection, aborting sessions, giving up. Every rule
//! and deadline is therefore tested here on a virtual clock, in microseconds.
//!
//! The count of connections by source address under a cap ([`SourceSlots`]) is the piece the
//! agent's other listener, the metrics endpoint, shares: one implementation of per-source caps.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The limits an [`Admission`] enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitConfig {
    /// Most connections in their handshake at once; when all are taken, a new connection takes
    /// the oldest one's slot (which is closed), so peers that never finish cannot lock others out.
    pub max_handshakes: usize,
    /// Most connections from one source address in their handshake at once; more are closed
    /// at once.
    pub max_handshakes_per_source: usize,
    /// Time from accept to a finished handshake; a connection still in it then is closed.
    pub handshake_timeout: Duration,
    /// Most sessions at once; a session beyond them is refused as busy.
    pub max_sessions: usize,
    /// A one-session server (`serve --once`): sessions are never refused for a shutdown, which
    /// its only session's end starts.
    pub once: bool,
    /// With `once`: how long to wait for the session to start before giving up.
    pub first_connect: Option<Duration>,
    /// On a stop: how long running sessions may go on before they are aborted.
    pub shutdown_grace: Duration,
    /// After aborting them: how long to wait for them to end before giving up on them.
    pub abort_wait: Duration,
}

impl Default for AdmitConfig {
    fn default() -> Self {
        AdmitConfig {
            max_handshakes: 128,
            max_handshakes_per_source: 16,
            handshake_timeout: Duration::from_secs(10),
            max_sessions: 64,
            once: false,
            first_connect: None,
            shutdown_grace: Duration::from_secs(30),
            abort_wait: Duration::from_secs(10),
        }
    }
}

/// One connection in its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HandshakeId(pub u64);

/// What to do with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Run its handshake as `id`; close `evict` (the oldest handshake, whose slot it takes).
    Admit {
        /// The handshake's id, for [`Admission::handle_handshake_end`].
        id: HandshakeId,
        /// A handshake to close now.
        evict: Option<HandshakeId>,
    },
    /// Close it unanswered.
    Refuse(Refusal),
}

/// Why a connection or a session is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source address has all its slots (handshake slots, for [`Admission`]).
    PerSource,
    /// Every slot is taken (session slots, for [`Admission`]).
    Busy,
    /// The server is shutting down.
    Stopping,
}

/// What the server must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Close this connection: its handshake ran out of time, or the shutdown aborts it.
    Close(HandshakeId),
    /// A one-session server's client did not come in time: give up.
    NoClient,
    /// The grace is over (or the stop was repeated): abort the sessions still running.
    AbortSessions,
    /// Aborted sessions did not end within [`AdmitConfig::abort_wait`]: stop waiting for them.
    GiveUp,
}

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Accepting.
    Open,
    /// Stopped accepting; running sessions may finish until `abort_at`.
    Draining {
        /// When the grace ends.
        abort_at: Instant,
    },
    /// Running sessions were aborted; the server waits for them until `give_up_at`.
    Aborting {
        /// When it stops waiting.
        give_up_at: Instant,
    },
    /// Nothing more to wait for.
    Over,
}

/// Connections held by each source address, under a cap for each source and one in all. A
/// source is its address in canonical form: an IPv4-mapped IPv6 address (a dual-stack
/// listener's IPv4 client) is its IPv4 address.
#[derive(Debug, Clone)]
pub struct SourceSlots {
    max_all: usize,
    max_per_source: usize,
    held: HashMap<IpAddr, usize>,
    all: usize,
}

impl SourceSlots {
    /// At most `max_all` slots in all and `max_per_source` for one source (each at least 1).
    pub fn new(max_all: usize, max_per_source: usize) -> SourceSlots {
        SourceSlots { max_all: max_all.max(1), max_per_source: max_per_source.max(1), held: HashMap::new(), all: 0 }
    }

    /// Take a slot for `source`, or say why not: it holds its share ([`Refusal::PerSource`]),
    /// or every slot is taken ([`Refusal::Busy`]).
    pub fn take(&mut self, source: IpAddr) -> Result<(), Refusal> {
        let source = source.to_canonical();
        let mine = self.held.get(&source).copied().unwrap_or(0);
        if mine >= self.max_per_source {
            return Err(Refusal::PerSource);
        }
        if self.all >= self.max_all {
            return Err(Refusal::Busy);
        }
        *self.held.entry(source).or_insert(0) += 1;
        self.all += 1;
        Ok(())
    }

    /// Give back a slot `source` took; a source that holds none changes nothing.
    pub fn give_back(&mut self, source: IpAddr) {
        let source = source.to_canonical();
        if let Some(n) = self.held.get_mut(&source) {
            *n -= 1;
            self.all -= 1;
            if *n == 0 {
                self.held.remove(&source);
            }
        }
    }

    /// Slots held in all.
    pub fn held(&self) -> usize {
        self.all
    }

    /// Slots `source` holds.
    pub fn held_by(&self, source: IpAddr) -> usize {
        self.held.get(&source.to_canonical()).copied().unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    source: IpAddr,
    deadline: Instant,
}

/// The admission machine; see the module documentation.
#[derive(Debug)]
pub struct Admission {
    cfg: AdmitConfig,
    next: u64,
    /// Handshakes by id, which is their order of arrival.
    pending: BTreeMap<HandshakeId, Pending>,
    /// Handshakes by source; their number in all is capped by eviction instead (see
    /// [`AdmitConfig::max_handshakes`]).
    per_source: SourceSlots,
    sessions: usize,
    started: bool,
    /// When a one-session server gives up waiting for its client.
    no_client_at: Option<Instant>,
    stage: Stage,
    events: VecDeque<Event>,
}

impl Admission {
    /// A server that starts accepting `now`.
    pub fn new(cfg: AdmitConfig, now: Instant) -> Admission {
        let no_client_at = if cfg.once { cfg.first_connect.map(|d| now + d) } else { None };
        let per_source = SourceSlots::new(usize::MAX, cfg.max_handshakes_per_source);
        Admission {
            cfg,
            next: 0,
            pending: BTreeMap::new(),
            per_source,
            sessions: 0,
            started: false,
            no_client_at,
            stage: Stage::Open,
            events: VecDeque::new(),
        }
    }

    /// A connection from `source` was accepted at `now`.
    pub fn handle_connect(&mut self, source: IpAddr, now: Instant) -> Verdict {
        if self.stage != Stage::Open {
            return Verdict::Refuse(Refusal::Stopping);
        }
        if let Err(why) = self.per_source.take(source) {
            return Verdict::Refuse(why);
        }
        let evict = if self.pending.len() >= self.cfg.max_handshakes.max(1) {
            self.pending.keys().next().copied().inspect(|&oldest| self.forget(oldest))
        } else {
            None
        };
        let id = HandshakeId(self.next);
        self.next += 1;
        self.pending.insert(id, Pending { source, deadline: now + self.cfg.handshake_timeout });
        Verdict::Admit { id, evict }
    }

    /// Handshake `id` is over (done, failed, or closed): its slots are free. Unknown ids (an
    /// evicted or expired handshake) change nothing.
    pub fn handle_handshake_end(&mut self, id: HandshakeId) {
        self.forget(id);
    }

    /// Whether a session could start now (asked before a handshake is answered, so that a
    /// client of a full server is told it is busy without costing a handshake).
    pub fn session_room(&self) -> bool {
        self.sessions < self.cfg.max_sessions.max(1)
    }

    /// A session is about to start (its handshake finished): counted until
    /// [`Admission::handle_session_end`], unless refused — a server shutting down starts no
    /// new session (but a one-session server's only one).
    pub fn handle_session_start(&mut self) -> Result<(), Refusal> {
        if self.stage != Stage::Open && !self.cfg.once {
            return Err(Refusal::Stopping);
        }
        self.sessions += 1;
        self.started = true;
        self.no_client_at = None;
        Ok(())
    }

    /// A session that started has ended.
    pub fn handle_session_end(&mut self) {
        self.sessions = self.sessions.saturating_sub(1);
    }

    /// Sessions running.
    pub fn sessions(&self) -> usize {
        self.sessions
    }

    /// Connections in their handshake.
    pub fn handshakes(&self) -> usize {
        self.pending.len()
    }

    /// Whether a session has started (a one-session server's client came).
    pub fn started(&self) -> bool {
        self.started
    }

    /// The stage the server is at.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Stop (at `now`): accept nothing more; running sessions have the grace. A second stop
    /// aborts them now.
    pub fn handle_stop(&mut self, now: Instant) {
        match self.stage {
            Stage::Open => {
                self.stage = Stage::Draining { abort_at: now + self.cfg.shutdown_grace };
                self.no_client_at = None;
            }
            Stage::Draining { .. } => self.abort(now),
            Stage::Aborting { .. } | Stage::Over => {}
        }
    }

    /// When [`Admission::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let stage = match self.stage {
            Stage::Draining { abort_at } => Some(abort_at),
            Stage::Aborting { give_up_at } => Some(give_up_at),
            Stage::Open | Stage::Over => None,
        };
        let handshakes = self.pending.values().map(|p| p.deadline).min();
        [stage, handshakes, self.no_client_at].into_iter().flatten().min()
    }

    /// Time passed to `now`: handshakes out of time are to be closed, a grace or a wait may end.
    pub fn handle_timeout(&mut self, now: Instant) {
        let expired: Vec<HandshakeId> =
            self.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(&id, _)| id).collect();
        for id in expired {
            self.forget(id);
            self.events.push_back(Event::Close(id));
        }
        if self.no_client_at.is_some_and(|t| t <= now) {
            self.no_client_at = None;
            self.stage = Stage::Over;
            self.events.push_back(Event::NoClient);
        }
        match self.stage {
            Stage::Draining { abort_at } if abort_at <= now => self.abort(now),
            Stage::Aborting { give_up_at } if give_up_at <= now => {
                self.stage = Stage::Over;
                self.events.push_back(Event::GiveUp);
            }
            _ => {}
        }
    }

    /// The next thing the server must do.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Abort running sessions and the handshakes under way; wait for them until `abort_wait`.
    fn abort(&mut self, now: Instant) {
        self.stage = Stage::Aborting { give_up_at: now + self.cfg.abort_wait };
        self.events.push_back(Event::AbortSessions);
        let ids: Vec<HandshakeId> = self.pending.keys().copied().collect();
        for id in ids {
            self.forget(id);
            self.events.push_back(Event::Close(id));
        }
    }

    fn forget(&mut self, id: HandshakeId) {
        if let Some(p) = self.pending.remove(&id) {
            self.per_source.give_back(p.source);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([198, 18, 0, n])
    }

    fn admitted(v: Verdict) -> (HandshakeId, Option<HandshakeId>) {
        match v {
            Verdict::Admit { id, evict } => (id, evict),
            Verdict::Refuse(r) => panic!("refused: {r:?}"),
        }
    }

    fn events(a: &mut Admission) -> Vec<Event> {
        std::iter::from_fn(|| a.poll_event()).collect()
    }

    #[test]
    fn one_source_gets_at_most_its_share_of_the_handshake_slots() {
        let t0 = Instant::now();
        let cfg = AdmitConfig { max_handshakes_per_source: 2, ..AdmitConfig::default() };
        let mut a = Admission::new(cfg, t0);
        let (h1, _) = admitted(a.handle_connect(ip(1), t0));
        admitted(a.handle_connect(ip(1), t0));
        assert_eq!(a.handle_connect(ip(1), t0), Verdict::Refuse(Refusal::PerSource));
        admitted(a.handle_connect(ip(2), t0));
        a.handle_handshake_end(h1);
        a.handle_handshake_end(h1); // twice: no effect
        admitted(a.handle_connect(ip(1), t0));
        assert_eq!(a.handle_connect(ip(1), t0), Verdict::Refuse(Refusal::PerSource));
        assert_eq!(a.handshakes(), 3);
    }

    #[test]
    fn source_slots_cap_each_source_and_all_and_count_a_mapped_address_as_its_ipv4_one() {
        let mut s = SourceSlots::new(3, 2);
        let mapped = IpAddr::from(std::net::Ipv4Addr::from([198, 18, 0, 1]).to_ipv6_mapped());
        assert_eq!(s.take(ip(1)), Ok(()));
        assert_eq!(s.take(mapped), Ok(()));
        assert_eq!(s.take(ip(1)), Err(Refusal::PerSource), "the mapped address is the same source");
        assert_eq!(s.held_by(ip(1)), 2);
        assert_eq!(s.take(ip(2)), Ok(()));
        assert_eq!(s.take(ip(3)), Err(Refusal::Busy), "every slot is taken");
        s.give_back(mapped);
        s.give_back(ip(4)); // holds none: no effect
        assert_eq!((s.held(), s.held_by(ip(1))), (2, 1));
        assert_eq!(s.take(ip(3)), Ok(()));
        assert_eq!(s.take(ip(1)), Err(Refusal::Busy));
        s.give_back(ip(2));
        assert_eq!(s.take(ip(1)), Ok(()));
        assert_eq!(s.held(), 3);
        // Caps of 0 are 1.
        let mut one = SourceSlots::new(0, 0);
        assert_eq!((one.take(ip(1)), one.take(ip(2))), (Ok(()), Err(Refusal::Busy)));
    }

    #[test]
    fn a_full_server_closes_the_oldest_handshake_for_a_new_one() {
        let t0 = Instant::now();
        let mut a = Admission::new(AdmitConfig { max_handshakes: 2, ..AdmitConfig::default() }, t0);
        let (h1, e) = admitted(a.handle_connect(ip(1), t0));
        assert_eq!(e, None);
        let (h2, _) = admitted(a.handle_connect(ip(2), t0 + S));
        let (h3, e) = admitted(a.handle_connect(ip(3), t0 + 2 * S));
        assert_eq!(e, Some(h1), "the oldest gives way");
        let (_, e) = admitted(a.handle_connect(ip(1), t0 + 3 * S));
        assert_eq!(e, Some(h2));
        assert!(h3 > h2);
        assert_eq!(a.handshakes(), 2);
        // The evicted one's end changes nothing.
        a.handle_handshake_end(h1);
        assert_eq!(a.handshakes(), 2);
    }

    #[test]
    fn a_handshake_out_of_time_is_closed_at_its_deadline_and_not_before() {
        let t0 = Instant::now();
        let cfg = AdmitConfig { handshake_timeout: 10 * S, max_handshakes_per_source: 1, ..AdmitConfig::default() };
        let mut a = Admission::new(cfg, t0);
        assert_eq!(a.poll_timeout(), None, "nothing to wake for");
        let (h1, _) = admitted(a.handle_connect(ip(1), t0));
        let (h2, _) = admitted(a.handle_connect(ip(2), t0 + 4 * S));
        assert_eq!(a.poll_timeout(), Some(t0 + 10 * S));
        a.handle_timeout(t0 + 10 * S - Duration::from_nanos(1));
        assert_eq!(events(&mut a), []);
        a.handle_timeout(t0 + 10 * S);
        assert_eq!(events(&mut a), [Event::Close(h1)]);
        assert_eq!(a.poll_timeout(), Some(t0 + 14 * S));
        // Its source's slot is free again.
        admitted(a.handle_connect(ip(1), t0 + 11 * S));
        a.handle_handshake_end(h2);
        a.handle_timeout(t0 + 14 * S);
        assert_eq!(events(&mut a), [], "an ended handshake has no deadline");
    }

    #[test]
    fn sessions_beyond_the_cap_are_busy() {
        let t0 = Instant::now();
        let mut a = Admission::new(AdmitConfig { max_sessions: 2, ..AdmitConfig::default() }, t0);
        assert!(a.session_room());
        a.handle_session_start().unwrap();
        a.handle_session_start().unwrap();
        assert!(!a.session_room());
        a.handle_session_end();
        assert!(a.session_room());
        assert_eq!(a.sessions(), 1);
    }

    #[test]
    fn a_stop_refuses_new_work_gives_the_grace_then_aborts_then_gives_up() {
        let t0 = Instant::now();
        let cfg = AdmitConfig { shutdown_grace: 30 * S, abort_wait: 10 * S, ..AdmitConfig::default() };
        let mut a = Admission::new(cfg, t0);
        a.handle_session_start().unwrap();
        let (h, _) = admitted(a.handle_connect(ip(1), t0));
        a.handle_stop(t0 + S);
        assert_eq!(a.stage(), Stage::Draining { abort_at: t0 + 31 * S });
        assert_eq!(a.handle_connect(ip(2), t0 + S), Verdict::Refuse(Refusal::Stopping));
        assert_eq!(a.handle_session_start(), Err(Refusal::Stopping), "a handshake under way starts nothing");
        // The handshake deadline comes first, then the grace's end.
        assert_eq!(a.poll_timeout(), Some(t0 + 10 * S));
        a.handle_timeout(t0 + 10 * S);
        assert_eq!(events(&mut a), [Event::Close(h)]);
        assert_eq!(a.poll_timeout(), Some(t0 + 31 * S));
        a.handle_timeout(t0 + 31 * S);
        assert_eq!(events(&mut a), [Event::AbortSessions]);
        assert_eq!(a.poll_timeout(), Some(t0 + 41 * S));
        a.handle_timeout(t0 + 41 * S);
        assert_eq!(events(&mut a), [Event::GiveUp]);
        assert_eq!((a.stage(), a.poll_timeout()), (Stage::Over, None));
    }

    #[test]
    fn a_second_stop_aborts_at_once_and_closes_the_handshakes_under_way() {
        let t0 = Instant::now();
        let mut a = Admission::new(AdmitConfig::default(), t0);
        let (h, _) = admitted(a.handle_connect(ip(1), t0));
        a.handle_stop(t0);
        assert_eq!(events(&mut a), []);
        a.handle_stop(t0 + S);
        assert_eq!(events(&mut a), [Event::AbortSessions, Event::Close(h)]);
        assert_eq!(a.stage(), Stage::Aborting { give_up_at: t0 + 11 * S });
        a.handle_stop(t0 + 2 * S);
        assert_eq!(events(&mut a), [], "a third stop changes nothing");
    }

    #[test]
    fn a_one_session_server_gives_up_when_no_client_comes_in_time() {
        let t0 = Instant::now();
        let cfg = AdmitConfig { once: true, first_connect: Some(60 * S), ..AdmitConfig::default() };
        let mut a = Admission::new(cfg.clone(), t0);
        assert_eq!(a.poll_timeout(), Some(t0 + 60 * S));
        a.handle_timeout(t0 + 59 * S);
        assert_eq!(events(&mut a), []);
        a.handle_timeout(t0 + 60 * S);
        assert_eq!(events(&mut a), [Event::NoClient]);
        // A client in time: no deadline left, and its session starts even though the end of
        // the session will stop the server.
        let mut a = Admission::new(cfg, t0);
        a.handle_session_start().unwrap();
        assert!(a.started());
        assert_eq!(a.poll_timeout(), None);
        a.handle_timeout(t0 + 3600 * S);
        assert_eq!(events(&mut a), []);
        a.handle_stop(t0 + 3600 * S);
        assert_eq!(a.handle_session_start(), Ok(()));
    }
}
