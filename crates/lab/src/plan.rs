//! Turns a validated scenario into a plan: namespace names, addresses, interface names, and
//! the exact `ip`/`tc` argv lists that build the lab, the `tc` ones through one typed builder
//! (`Tc`). Pure (no I/O), and it reads the scenario's typed values without parsing a string, so
//! it is unit-tested by comparing command lists. [`Plan::new`] runs named steps in order: segments and their subnets,
//! addresses, namespaces and bridges, wiring each link, shaping each end, then the QoS and lab
//! descriptions.

#[cfg(test)]
use crate::emu::shape::Dist;
use crate::emu::shape::{Impairment, Loss, MAX_HELD};
use crate::emu::EmuConfig;
use crate::scenario::{
    check_ifname, fmt_ip, EmulatorChoice, LabNet, LinkSpec, LinkTime, Net, QosMatch, QosSpec, Scenario, Shaper,
    ShaperRate, Side, LAB_RANGE,
};
use crate::LabError;
use linerate_model::doc::lab::{LabClass, LabDescription, LabHost, LabInterface, LabLink, LabQos, LabSwitch};
use linerate_model::units::Percent;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

/// One interface of a host.
#[derive(Debug, Clone)]
pub struct IfacePlan {
    /// Name inside the host's namespace.
    pub name: String,
    /// Address (host order).
    pub addr: u32,
    /// Prefix length.
    pub prefix: u8,
    /// The link it belongs to.
    pub link: String,
    /// Segment index (a switch or a point-to-point link); equal segments reach each other.
    pub segment: usize,
}

/// A host: its namespace and interfaces.
#[derive(Debug, Clone)]
pub struct HostPlan {
    /// Network namespace name.
    pub ns: String,
    /// Interfaces in link order.
    pub ifaces: Vec<IfacePlan>,
}

/// A QoS class as applied, for the results (which host is guaranteed what).
#[derive(Debug, Clone)]
pub struct Guarantee {
    /// Class name.
    pub class: String,
    /// Hosts named in its src/dst matches.
    pub hosts: Vec<String>,
    /// Guaranteed rate, bits/s.
    pub rate_bps: u64,
    /// Ceiling, bits/s.
    pub ceil_bps: u64,
    /// The link it shapes.
    pub link: String,
}

/// Everything needed to build, describe and tear down one run of a scenario.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Run id.
    pub run: String,
    /// Every namespace the run creates (hosts, then the switch namespace if any).
    pub namespaces: Vec<String>,
    /// Hosts by name.
    pub hosts: BTreeMap<String, HostPlan>,
    /// The `ip`/`tc` commands, in order.
    pub commands: Vec<Vec<String>>,
    /// QoS classes with the hosts they concern.
    pub guarantees: Vec<Guarantee>,
    /// linerate's link emulators, one per emulated link: started after the first
    /// `emulators_at` commands (the namespaces), before the commands that move their TAPs.
    pub emulators: Vec<EmuConfig>,
    /// Where in `commands` the emulators start.
    pub emulators_at: usize,
    /// Description of the lab for the results document.
    pub description: LabDescription,
}

/// The namespace of `host` in run `run`.
pub fn host_ns(run: &str, host: &str) -> String {
    format!("{run}-{host}")
}

/// The namespace holding a run's switches (a `.` cannot occur in host names).
pub fn switch_ns(run: &str) -> String {
    format!("{run}.sw")
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// One command line of the plan, built word by word.
struct Argv(Vec<String>);

impl Argv {
    /// A command line starting with `words`.
    fn new(words: &[&str]) -> Argv {
        Argv(s(words))
    }
    /// Then `word`.
    fn w(mut self, word: impl fmt::Display) -> Argv {
        self.0.push(word.to_string());
        self
    }
    /// Then `words`.
    fn ws<W: fmt::Display>(mut self, words: impl IntoIterator<Item = W>) -> Argv {
        self.0.extend(words.into_iter().map(|w| w.to_string()));
        self
    }
    /// The argv.
    fn done(self) -> Vec<String> {
        self.0
    }
}

/// A rate as tc reads it: `1000000000bit`.
struct Bits(u64);

impl fmt::Display for Bits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}bit", self.0)
    }
}

/// `tc` on one device of one namespace: the typed builder of every `tc` argv in the plan.
struct Tc<'a> {
    ns: &'a str,
    dev: &'a str,
}

impl Tc<'_> {
    /// `tc -n NS qdisc add dev DEV`, the rest to follow.
    fn qdisc(&self) -> Argv {
        Argv::new(&["tc", "-n", self.ns, "qdisc", "add", "dev", self.dev])
    }
    /// `tc -n NS filter add dev DEV parent PARENT`, the rest to follow.
    fn filter(&self, parent: &str) -> Argv {
        Argv::new(&["tc", "-n", self.ns, "filter", "add", "dev", self.dev, "parent", parent])
    }
    /// An htb class `classid` under `parent`: guaranteed `rate`, up to `ceil`, with `burst`
    /// bytes of burst and cburst and the Ethernet overhead.
    fn htb_class(&self, parent: &str, classid: &str, rate: u64, ceil: u64, burst: u64) -> Vec<String> {
        Argv::new(&["tc", "-n", self.ns, "class", "add", "dev", self.dev, "parent", parent, "classid", classid])
            .ws(["htb", "rate"])
            .w(Bits(rate))
            .w("ceil")
            .w(Bits(ceil))
            .w("burst")
            .w(burst)
            .w("cburst")
            .w(burst)
            .ws(["overhead", WIRE_OVERHEAD])
            .done()
    }
}

/// Where one end of a link lives.
struct End {
    ns: String,
    dev: String,
    host: Option<String>,
}

/// Bytes an Ethernet frame costs on the wire beyond what the qdisc sees (preamble and start
/// delimiter 8, FCS 4, inter-frame gap 12), so that a `10gbit` link carries what a real 10 GbE
/// link carries: at MTU 1500 at most 1448/1538 of it as TCP payload (9.41 Gbit/s).
const WIRE_OVERHEAD: &str = "24";

/// Bytes of burst for a shaper at `bps`: 2 ms worth, at least 64 KiB (a GSO packet).
fn burst(bps: u64) -> u64 {
    (bps / 8 / 500).clamp(64 * 1024, 64 << 20)
}

/// A tbf's latency when the link does not give one, µs.
const TBF_LATENCY_US: u64 = 20_000;

/// A tbf's burst (bytes) and latency (µs) on `l` shaped at `rate`: the link's, else the defaults.
/// `None` where no tbf shapes it (no rate, or htb).
fn tbf_params(l: &LinkSpec, rate: Option<u64>) -> Option<(u64, u64)> {
    let r = rate.filter(|_| l.shaper == Shaper::Tbf)?;
    let latency = l.latency.map_or(TBF_LATENCY_US, LinkTime::as_micros);
    Some((l.burst.unwrap_or_else(|| burst(r)), latency))
}

/// A link's rate in bits/s, if it is shaped.
fn link_rate(l: &LinkSpec) -> Option<u64> {
    l.rate.map(ShaperRate::bits_per_s)
}

/// A time for tc: whole milliseconds as `Nms`, else `Nus`.
fn tc_time(us: u64) -> String {
    if us % 1000 == 0 {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

/// Whether this kernel has netem (loaded, built in, or as a module to load).
pub fn netem_available() -> bool {
    if Path::new("/sys/module/sch_netem").exists() {
        return true;
    }
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let dir = Path::new("/lib/modules").join(rel.trim());
    std::fs::read_to_string(dir.join("modules.builtin")).is_ok_and(|t| t.contains("sch_netem"))
        || std::fs::read_to_string(dir.join("modules.dep")).is_ok_and(|t| t.contains("sch_netem"))
}

/// Whether link `l` is emulated by linerate's emulator rather than netem.
fn own_emulator(l: &LinkSpec, have_netem: &mut dyn FnMut() -> bool) -> bool {
    l.impaired()
        && match l.emulator {
            EmulatorChoice::Linerate => true,
            EmulatorChoice::Netem => false,
            EmulatorChoice::Auto => l.needs_own_emulator() || !have_netem(),
        }
}

/// What linerate's emulator does in each direction of link `l` (the same both ways, as netem
/// on both ends does): its delay, jitter, loss, reordering, duplication and corruption, and
/// the rate with its queue when the link has a `queue` (else tbf keeps shaping the rate).
fn impairment(l: &LinkSpec) -> Impairment {
    let pct = |p: Option<Percent>| p.map_or(0.0, Percent::fraction);
    let ns = |t: Option<LinkTime>| t.map_or(0, LinkTime::as_micros) * 1000;
    let mut i = Impairment {
        delay_ns: ns(l.delay),
        jitter_ns: ns(l.jitter),
        dist: l.jitter_dist.unwrap_or_default(),
        loss: Loss::bursty(pct(l.loss), l.loss_burst.unwrap_or(1.0)),
        reorder: pct(l.reorder),
        duplicate: pct(l.duplicate),
        corrupt: pct(l.corrupt),
        ..Impairment::default()
    };
    if let (Some(q), Some(rate)) = (l.queue, link_rate(l)) {
        i.rate_bps = Some(rate);
        i.queue_bytes = q.bytes_at(rate).clamp(1, MAX_HELD);
    }
    i
}

/// netem's arguments for what link `l` asks (`delay 5000us loss 1% ... limit 100000`), `None`
/// when it asks for nothing netem does.
fn netem_args(l: &LinkSpec) -> Option<Vec<String>> {
    let us = |t: LinkTime| format!("{}us", t.as_micros());
    let mut a = Argv::new(&[]);
    if let Some(d) = l.delay {
        a = a.w("delay").w(us(d));
        if let Some(j) = l.jitter.filter(|j| j.as_micros() > 0) {
            a = a.w(us(j)).ws(["distribution", "normal"]);
        }
    }
    for (word, p) in [("loss", l.loss), ("reorder", l.reorder), ("duplicate", l.duplicate), ("corrupt", l.corrupt)] {
        if let Some(p) = p.filter(|p| p.is_positive()) {
            a = a.w(word).w(p);
        }
    }
    let a = a.done();
    if a.is_empty() {
        return None;
    }
    Some(Argv(a).ws(["limit", "100000"]).done())
}

/// Resolves a QoS match (host name or CIDR) into networks.
fn match_nets(m: &QosMatch, addrs: &BTreeMap<String, Vec<u32>>) -> Result<Vec<Net>, LabError> {
    match m {
        QosMatch::Host(h) => addrs
            .get(h)
            .map(|v| v.iter().map(|&a| Net { addr: a, prefix: 32 }).collect())
            .ok_or_else(|| LabError::Scenario(format!("qos: unknown host '{h}'"))),
        QosMatch::Net(n) => Ok(vec![LabNet::try_from(*n).map_err(|e| LabError::Scenario(e.to_string()))?.net(32)]),
    }
}

/// A link with its ranges expanded, as `Scenario::expanded_links` gives it: (name, a, b, spec).
type Link<'a> = (String, String, String, &'a LinkSpec);

/// Whether two networks share addresses (the shorter prefix decides).
fn overlaps(a: &Net, b: &Net) -> bool {
    let m = Net { addr: 0, prefix: a.prefix.min(b.prefix) }.mask();
    a.addr & m == b.addr & m
}

/// `network/prefix` text of a subnet.
fn subnet_text(n: &Net) -> String {
    format!("{}/{}", fmt_ip(n.network()), n.prefix)
}

/// The segments of a lab (one per switch, then one per host-to-host link) and their subnets.
struct Segments {
    /// The segment of each link, in link order.
    link_seg: Vec<usize>,
    /// The subnet of each segment.
    subnet: Vec<Net>,
}

impl Segments {
    /// Gives every segment a subnet: its own, else the network of its first explicit address, else the next free /24.
    fn new(sc: &Scenario, links: &[Link], switch_idx: &BTreeMap<&str, usize>) -> Result<Segments, LabError> {
        let (mut subnet, link_seg) = declared_subnets(sc, links, switch_idx)?;
        for ((_, _, _, l), &seg) in links.iter().zip(&link_seg) {
            if subnet[seg].is_none() {
                if let Some(a) = l.a_addr.or(l.b_addr) {
                    let n = a.net(24);
                    subnet[seg] = Some(Net { addr: n.network(), prefix: n.prefix });
                }
            }
        }
        fill_free_subnets(&mut subnet)?;
        let subnet: Vec<Net> = subnet.into_iter().flatten().collect();
        check_overlaps(&subnet)?;
        Ok(Segments { link_seg, subnet })
    }
}

/// The segments with the subnets the scenario gives them (switches first), and each link's segment.
fn declared_subnets(
    sc: &Scenario,
    links: &[Link],
    switch_idx: &BTreeMap<&str, usize>,
) -> Result<(Vec<Option<Net>>, Vec<usize>), LabError> {
    let mut subnet: Vec<Option<Net>> = Vec::new();
    for sw in &sc.switches {
        subnet.push(sw.subnet.map(|n| n.net(24)));
    }
    let mut link_seg = Vec::new();
    for (name, a, b, l) in links {
        match switch_idx.get(a.as_str()).or_else(|| switch_idx.get(b.as_str())) {
            Some(&i) => {
                if l.subnet.is_some() {
                    return Err(LabError::Scenario(format!("link '{name}': set the subnet on the switch")));
                }
                link_seg.push(i)
            }
            None => {
                subnet.push(l.subnet.map(|n| n.net(24)));
                link_seg.push(subnet.len() - 1);
            }
        }
    }
    Ok((subnet, link_seg))
}

/// Gives each segment still without a subnet the next /24 of 198.18.0.0/15 that overlaps no other.
fn fill_free_subnets(subnet: &mut [Option<Net>]) -> Result<(), LabError> {
    let mut next = 1u32;
    for i in 0..subnet.len() {
        if subnet[i].is_some() {
            continue;
        }
        loop {
            if next >= 512 {
                return Err(LabError::Scenario("ran out of /24 subnets in 198.18.0.0/15".into()));
            }
            let cand = Net { addr: LAB_RANGE.addr + (next << 8), prefix: 24 };
            next += 1;
            if !subnet.iter().flatten().any(|n| overlaps(n, &cand)) {
                subnet[i] = Some(cand);
                break;
            }
        }
    }
    Ok(())
}

/// Refuses two segments whose subnets overlap.
fn check_overlaps(subnet: &[Net]) -> Result<(), LabError> {
    for (i, a) in subnet.iter().enumerate() {
        for b in &subnet[i + 1..] {
            if overlaps(a, b) {
                return Err(LabError::Scenario(format!("subnets {} and {} overlap", subnet_text(a), subnet_text(b))));
            }
        }
    }
    Ok(())
}

/// Hands out host addresses: explicit ones are reserved up front, the others take the next free host of their segment.
struct Addresses<'a> {
    /// The subnet of each segment.
    subnet: &'a [Net],
    /// Addresses taken so far.
    used: BTreeSet<u32>,
    /// Per segment, the host number to try next.
    next: Vec<u32>,
}

impl<'a> Addresses<'a> {
    /// Reserves every explicit address of `links`, refusing one given twice.
    fn new(subnet: &'a [Net], links: &[Link]) -> Result<Addresses<'a>, LabError> {
        let mut used: BTreeSet<u32> = BTreeSet::new();
        for (name, _, _, l) in links {
            for a in [l.a_addr, l.b_addr].into_iter().flatten() {
                let n = a.net(24);
                if !used.insert(n.addr) {
                    return Err(LabError::Scenario(format!("link '{name}': address {} used twice", fmt_ip(n.addr))));
                }
            }
        }
        Ok(Addresses { subnet, used, next: vec![1u32; subnet.len()] })
    }

    /// An address on segment `seg` for an end of `link`: `explicit` (a host of the segment), else the next free one.
    fn alloc(&mut self, seg: usize, explicit: Option<LabNet>, link: &str) -> Result<Net, LabError> {
        let net = self.subnet[seg];
        if let Some(a) = explicit {
            let n = a.net(net.prefix);
            if !net.contains(n.addr) || n.addr == net.network() || n.addr == net.network() | !net.mask() {
                return Err(LabError::Scenario(format!(
                    "link '{link}': {} is not a host address of its segment {}",
                    fmt_ip(n.addr),
                    subnet_text(&net)
                )));
            }
            return Ok(Net { addr: n.addr, prefix: net.prefix });
        }
        loop {
            let cand = net.network() + self.next[seg];
            self.next[seg] += 1;
            if !net.contains(cand) || cand == net.network() | !net.mask() {
                return Err(LabError::Scenario(format!("link '{link}': segment {} is full", fmt_ip(net.network()))));
            }
            if self.used.insert(cand) {
                return Ok(Net { addr: cand, prefix: net.prefix });
            }
        }
    }
}

/// Every namespace of run `run`: one per host, then the switch namespace if there are switches.
fn namespaces(run: &str, hosts: &[String], switches: bool) -> Vec<String> {
    let mut namespaces: Vec<String> = hosts.iter().map(|h| host_ns(run, h)).collect();
    if switches {
        namespaces.push(switch_ns(run));
    }
    namespaces
}

/// The lab being wired: commands so far, hosts' interfaces, and each link's ends and description.
struct Wiring<'a> {
    /// Run id.
    run: &'a str,
    /// The switch namespace.
    swns: String,
    /// Switch index by name.
    switch_idx: &'a BTreeMap<&'a str, usize>,
    /// Host address allocator.
    addrs: Addresses<'a>,
    /// Ports used so far on each switch.
    port_count: Vec<usize>,
    /// Interface names taken so far on each host.
    ifnames: BTreeMap<String, BTreeSet<String>>,
    /// The commands, in order.
    cmds: Vec<Vec<String>>,
    /// Hosts by name.
    hp: BTreeMap<String, HostPlan>,
    /// Both ends of each link, by link name and side.
    ends: BTreeMap<(String, Side), End>,
    /// Description of each link, in order.
    link_desc: Vec<LabLink>,
    /// linerate's emulators, one per emulated link.
    emulators: Vec<EmuConfig>,
    /// Whether the kernel has netem, asked once when a link first needs to know.
    have_netem: Box<dyn FnMut() -> bool + 'a>,
}

impl<'a> Wiring<'a> {
    /// Starts wiring run `run` of `sc`: hosts without interfaces, no commands yet.
    fn new(
        sc: &Scenario,
        run: &'a str,
        hosts: &[String],
        switch_idx: &'a BTreeMap<&'a str, usize>,
        addrs: Addresses<'a>,
    ) -> Wiring<'a> {
        Wiring {
            run,
            swns: switch_ns(run),
            switch_idx,
            addrs,
            port_count: vec![0usize; sc.switches.len()],
            ifnames: BTreeMap::new(),
            cmds: Vec::new(),
            hp: hosts.iter().map(|h| (h.clone(), HostPlan { ns: host_ns(run, h), ifaces: Vec::new() })).collect(),
            ends: BTreeMap::new(),
            link_desc: Vec::new(),
            emulators: Vec::new(),
            have_netem: Box::new(|| false),
        }
    }

    /// Creates the namespaces (loopback up) and one bridge per switch.
    fn namespaces_and_bridges(&mut self, namespaces: &[String], switches: usize) {
        for ns in namespaces {
            self.cmds.push(s(&["ip", "netns", "add", ns]));
            self.cmds.push(s(&["ip", "-n", ns, "link", "set", "lo", "up"]));
        }
        for i in 0..switches {
            let br = format!("br{i}");
            self.cmds.push(s(&["ip", "-n", &self.swns, "link", "add", &br, "type", "bridge"]));
            self.cmds.push(s(&["ip", "-n", &self.swns, "link", "set", &br, "up"]));
        }
    }

    /// Wires link `link` on segment `seg`: a veth pair, both ends configured, then both up.
    fn link(&mut self, link: &Link, seg: usize) -> Result<(), LabError> {
        let (name, a, b, l) = link;
        let mtu = l.mtu.unwrap_or(1500);
        let tbf = tbf_params(l, link_rate(l));
        let (ea, na) = self.end(a, &l.a_if, l.a_addr, seg, name)?;
        let (eb, nb) = self.end(b, &l.b_if, l.b_addr, seg, name)?;
        if own_emulator(l, &mut self.have_netem) {
            // Two TAPs made by the emulator in the root namespace, moved and renamed.
            let i = self.emulators.len();
            let dir = crate::state::state_dir().join(format!("{}.emu", self.run));
            let (ta, tb) = (format!("{}t{i}a", self.run), format!("{}t{i}b", self.run));
            for (tap, e) in [(&ta, &ea), (&tb, &eb)] {
                self.cmds.push(s(&["ip", "link", "set", "dev", tap, "netns", &e.ns]));
                self.cmds.push(s(&["ip", "-n", &e.ns, "link", "set", "dev", tap, "name", &e.dev]));
            }
            let imp = impairment(l);
            self.emulators.push(EmuConfig {
                link: name.clone(),
                a_tap: ta,
                b_tap: tb,
                a_to_b: imp.clone(),
                b_to_a: imp,
                ready: dir.join(format!("emu{i}.ready")),
                control: dir.join(format!("emu{i}.sock")),
                seed: 0x6c69_6e65_7261_7465 ^ i as u64,
            });
        } else {
            self.cmds.push(s(&[
                "ip", "link", "add", &ea.dev, "netns", &ea.ns, "type", "veth", "peer", "name", &eb.dev, "netns", &eb.ns,
            ]));
        }
        let addrs = vec![self.configure(&ea, na, mtu, name, seg), self.configure(&eb, nb, mtu, name, seg)];
        for e in [&ea, &eb] {
            self.cmds.push(s(&["ip", "-n", &e.ns, "link", "set", &e.dev, "up"]));
        }
        self.link_desc.push(LabLink {
            name: name.clone(),
            a: a.to_string(),
            b: b.to_string(),
            a_if: ea.dev.clone(),
            b_if: eb.dev.clone(),
            addrs,
            rate_bps: link_rate(l),
            shaper: l.shaper,
            burst_bytes: tbf.map(|t| t.0),
            latency_us: tbf.map(|t| t.1),
            mtu,
            delay_us: l.delay.map(LinkTime::as_micros),
            jitter_us: l.jitter.map(LinkTime::as_micros),
            loss_pct: l.loss.map(Percent::get),
            reorder_pct: l.reorder.map(Percent::get),
            subnet: subnet_text(&self.addrs.subnet[seg]),
        });
        self.ends.insert((name.clone(), Side::A), ea);
        self.ends.insert((name.clone(), Side::B), eb);
        Ok(())
    }

    /// The end of `link` at `who`: a switch's next port, or a host interface (`want`, else the first free `ethN`).
    fn end(
        &mut self,
        who: &str,
        want: &Option<String>,
        addr: Option<LabNet>,
        seg: usize,
        link: &str,
    ) -> Result<(End, Option<Net>), LabError> {
        if let Some(&si) = self.switch_idx.get(who) {
            let dev = format!("s{si}p{}", self.port_count[si]);
            self.port_count[si] += 1;
            check_ifname(&dev)?;
            return Ok((End { ns: self.swns.clone(), dev, host: None }, None));
        }
        let taken = self.ifnames.entry(who.to_string()).or_default();
        let dev = match want {
            Some(n) => n.clone(),
            None => (0..).map(|i| format!("eth{i}")).find(|n| !taken.contains(n)).unwrap_or_default(),
        };
        if !taken.insert(dev.clone()) {
            return Err(LabError::Scenario(format!("link '{link}': host '{who}' already has an interface '{dev}'")));
        }
        let net = self.addrs.alloc(seg, addr, link)?;
        Ok((End { ns: host_ns(self.run, who), dev, host: Some(who.to_string()) }, Some(net)))
    }

    /// Sets an end's MTU, then its address (a host's, returned as CIDR text) or its bridge (a switch port's).
    fn configure(&mut self, e: &End, n: Option<Net>, mtu: u32, link: &str, seg: usize) -> Option<String> {
        self.cmds.push(s(&["ip", "-n", &e.ns, "link", "set", &e.dev, "mtu", &mtu.to_string()]));
        match (&e.host, n) {
            (Some(h), Some(n)) => {
                let cidr = format!("{}/{}", fmt_ip(n.addr), n.prefix);
                self.cmds.push(s(&["ip", "-n", &e.ns, "addr", "add", &cidr, "dev", &e.dev]));
                if let Some(hp) = self.hp.get_mut(h) {
                    let iface = IfacePlan {
                        name: e.dev.clone(),
                        addr: n.addr,
                        prefix: n.prefix,
                        link: link.to_string(),
                        segment: seg,
                    };
                    hp.ifaces.push(iface);
                }
                Some(cidr)
            }
            _ => {
                let br = format!("br{seg}");
                self.cmds.push(s(&["ip", "-n", &e.ns, "link", "set", &e.dev, "master", &br]));
                None
            }
        }
    }
}

/// The total rate QoS `q` on link `link` shares: its own, else the link's `rate`.
fn qos_total(q: &QosSpec, rate: Option<u64>, link: &str) -> Result<u64, LabError> {
    q.rate
        .map(ShaperRate::bits_per_s)
        .or(rate)
        .ok_or_else(|| LabError::Scenario(format!("qos on '{link}': give the qos or the link a rate")))
}

/// Shapes both ends of every link: egress gets the link's rate and netem or its QoS classes, ingress QoS an ifb.
fn shape_links(
    cmds: &mut Vec<Vec<String>>,
    sc: &Scenario,
    links: &[Link],
    ends: &BTreeMap<(String, Side), End>,
    addrs: &BTreeMap<String, Vec<u32>>,
    emulated: &BTreeSet<&str>,
) -> Result<(), LabError> {
    let mut ifb_count: BTreeMap<String, usize> = BTreeMap::new();
    for (name, _, _, l) in links {
        let own = emulated.contains(name.as_str());
        // The emulator shapes the rate itself when the link has a queue of its own.
        let rate = link_rate(l).filter(|_| !(own && l.queue.is_some()));
        let netem = if own { None } else { netem_args(l) };
        for side in [Side::A, Side::B] {
            let Some(end) = ends.get(&(name.clone(), side)) else { continue };
            match sc.qos.iter().find(|q| &q.link == name && q.side == side && !q.ingress) {
                Some(q) => {
                    let total = qos_total(q, rate, name)?;
                    htb_classes(cmds, &end.ns, &end.dev, total, q, netem.as_deref(), addrs)?;
                }
                None => shape(cmds, &end.ns, &end.dev, rate, tbf_params(l, rate), netem.as_deref()),
            }
            for q in sc.qos.iter().filter(|q| &q.link == name && q.side == side && q.ingress) {
                let total = qos_total(q, rate, name)?;
                let n = ifb_count.entry(end.ns.clone()).or_default();
                let ifb = format!("lrifb{n}");
                *n += 1;
                ingress_qos(cmds, end, &ifb, total, q, addrs)?;
            }
        }
    }
    Ok(())
}

/// Ingress QoS `q` at `end`: what arrives is redirected to the new ifb device `ifb`, whose egress carries the classes.
fn ingress_qos(
    cmds: &mut Vec<Vec<String>>,
    end: &End,
    ifb: &str,
    total: u64,
    q: &QosSpec,
    addrs: &BTreeMap<String, Vec<u32>>,
) -> Result<(), LabError> {
    cmds.push(s(&["ip", "-n", &end.ns, "link", "add", ifb, "type", "ifb"]));
    cmds.push(s(&["ip", "-n", &end.ns, "link", "set", ifb, "up"]));
    let tc = Tc { ns: &end.ns, dev: &end.dev };
    cmds.push(tc.qdisc().ws(["handle", "ffff:", "ingress"]).done());
    cmds.push(
        tc.filter("ffff:")
            .ws(["protocol", "all", "prio", "1", "u32", "match", "u32", "0", "0"])
            .ws(["action", "mirred", "egress", "redirect", "dev", ifb])
            .done(),
    );
    htb_classes(cmds, &end.ns, ifb, total, q, None, addrs)
}

/// The QoS blocks as applied: the guarantees for the results, and their description.
fn describe_qos(
    sc: &Scenario,
    links: &[Link],
    addrs: &BTreeMap<String, Vec<u32>>,
) -> Result<(Vec<Guarantee>, Vec<LabQos>), LabError> {
    let mut guarantees = Vec::new();
    let mut qos_desc = Vec::new();
    for q in &sc.qos {
        let total = match q.rate {
            Some(r) => r.bits_per_s(),
            None => links.iter().find(|(n, ..)| n == &q.link).and_then(|(_, _, _, l)| link_rate(l)).unwrap_or(0),
        };
        let mut classes = Vec::new();
        for c in &q.classes {
            let r = c.rate.bits_per_s();
            let ceil = c.ceil.map_or(total, ShaperRate::bits_per_s);
            let hs: Vec<String> = [&c.src, &c.dst]
                .into_iter()
                .flatten()
                .filter_map(|m| match m {
                    QosMatch::Host(h) if addrs.contains_key(h) => Some(h.clone()),
                    _ => None,
                })
                .collect();
            guarantees.push(Guarantee {
                class: c.name.clone(),
                hosts: hs.clone(),
                rate_bps: r,
                ceil_bps: ceil,
                link: q.link.clone(),
            });
            classes.push(LabClass {
                name: c.name.clone(),
                rate_bps: r,
                ceil_bps: ceil,
                src: c.src.as_ref().map(QosMatch::to_string),
                dst: c.dst.as_ref().map(QosMatch::to_string),
                sport: c.sport,
                dport: c.dport,
                default: c.default,
                hosts: hs,
            });
        }
        qos_desc.push(LabQos { link: q.link.clone(), side: q.side, ingress: q.ingress, rate_bps: total, classes });
    }
    Ok((guarantees, qos_desc))
}

/// The lab description for the results document: hosts and their interfaces, switches, links, QoS.
fn describe_lab(
    sc: &Scenario,
    run: &str,
    hp: &BTreeMap<String, HostPlan>,
    subnet: &[Net],
    links: Vec<LabLink>,
    qos: Vec<LabQos>,
) -> LabDescription {
    let host = |p: &HostPlan| {
        let interfaces = p
            .ifaces
            .iter()
            .map(|i| LabInterface {
                name: i.name.clone(),
                addr: format!("{}/{}", fmt_ip(i.addr), i.prefix),
                link: i.link.clone(),
            })
            .collect();
        LabHost { ns: p.ns.clone(), interfaces }
    };
    LabDescription {
        hosts: hp.iter().map(|(h, p)| (h.clone(), host(p))).collect(),
        switches: sc
            .switches
            .iter()
            .enumerate()
            .map(|(i, s)| LabSwitch {
                name: s.name.clone(),
                bridge: format!("br{i}"),
                ns: switch_ns(run),
                subnet: subnet_text(&subnet[i]),
            })
            .collect(),
        links,
        qos,
    }
}

impl Plan {
    /// Plans scenario `sc` for run id `run`.
    pub fn new(sc: &Scenario, run: &str) -> Result<Plan, LabError> {
        Self::with_netem(sc, run, netem_available)
    }

    /// [`Plan::new`], asking `have_netem` (at most once) whether the kernel has netem.
    pub fn with_netem(sc: &Scenario, run: &str, have_netem: impl FnMut() -> bool) -> Result<Plan, LabError> {
        let mut have_netem = have_netem;
        let mut known: Option<bool> = None;
        let once = move || *known.get_or_insert_with(&mut have_netem);
        let hosts = sc.host_names()?;
        let links = sc.expanded_links()?;
        let switch_idx: BTreeMap<&str, usize> =
            sc.switches.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
        let segs = Segments::new(sc, &links, &switch_idx)?;
        let addrs = Addresses::new(&segs.subnet, &links)?;
        let namespaces = namespaces(run, &hosts, !sc.switches.is_empty());
        let mut w = Wiring::new(sc, run, &hosts, &switch_idx, addrs);
        w.have_netem = Box::new(once);
        w.namespaces_and_bridges(&namespaces, sc.switches.len());
        let emulators_at = w.cmds.len();
        for (link, &seg) in links.iter().zip(&segs.link_seg) {
            w.link(link, seg)?;
        }
        let Wiring { mut cmds, hp, ends, link_desc, emulators, .. } = w;
        let own: BTreeSet<&str> = emulators.iter().map(|e| e.link.as_str()).collect();
        let host_addrs: BTreeMap<String, Vec<u32>> =
            hp.iter().map(|(h, p)| (h.clone(), p.ifaces.iter().map(|i| i.addr).collect())).collect();
        shape_links(&mut cmds, sc, &links, &ends, &host_addrs, &own)?;
        let (guarantees, qos) = describe_qos(sc, &links, &host_addrs)?;
        let description = describe_lab(sc, run, &hp, &segs.subnet, link_desc, qos);
        Ok(Plan {
            run: run.to_string(),
            namespaces,
            hosts: hp,
            commands: cmds,
            guarantees,
            description,
            emulators,
            emulators_at,
        })
    }

    /// The address a client on `client` uses to reach `server`: through link `via` if given,
    /// else the first segment they share.
    pub fn server_addr(&self, client: &str, server: &str, via: Option<&str>) -> Result<u32, LabError> {
        let c = self.hosts.get(client).ok_or_else(|| LabError::Scenario(format!("unknown host '{client}'")))?;
        let s = self.hosts.get(server).ok_or_else(|| LabError::Scenario(format!("unknown host '{server}'")))?;
        if let Some(v) = via {
            // The server's interface on that link, or on the segment that link joins.
            let seg = self
                .hosts
                .values()
                .flat_map(|h| &h.ifaces)
                .find(|i| i.link == v)
                .map(|i| i.segment)
                .ok_or_else(|| LabError::Scenario(format!("link '{v}' has no host end")))?;
            return s
                .ifaces
                .iter()
                .find(|i| i.segment == seg)
                .map(|i| i.addr)
                .ok_or_else(|| LabError::Scenario(format!("host '{server}' is not on the segment of link '{v}'")));
        }
        for ci in &c.ifaces {
            if let Some(si) = s.ifaces.iter().find(|i| i.segment == ci.segment) {
                return Ok(si.addr);
            }
        }
        Err(LabError::Scenario(format!("hosts '{client}' and '{server}' share no link or switch")))
    }
}

/// Rate and/or netem on one device's egress: a tbf when `tbf` gives its burst and latency,
/// else an htb with one class.
fn shape(
    cmds: &mut Vec<Vec<String>>,
    ns: &str,
    dev: &str,
    rate: Option<u64>,
    tbf: Option<(u64, u64)>,
    netem: Option<&[String]>,
) {
    let tc = Tc { ns, dev };
    let leaf_parent = match (rate, tbf) {
        (Some(r), Some((b, latency))) => {
            cmds.push(
                tc.qdisc()
                    .ws(["root", "handle", "1:", "tbf", "rate"])
                    .w(Bits(r))
                    .w("burst")
                    .w(b)
                    .w("latency")
                    .w(tc_time(latency))
                    .ws(["overhead", WIRE_OVERHEAD])
                    .done(),
            );
            Some("1:1")
        }
        (Some(r), None) => {
            cmds.push(tc.qdisc().ws(["root", "handle", "1:", "htb", "default", "1"]).done());
            cmds.push(tc.htb_class("1:", "1:1", r, r, burst(r)));
            Some("1:1")
        }
        (None, _) => None,
    };
    if let Some(n) = netem {
        let at = match leaf_parent {
            Some(p) => tc.qdisc().ws(["parent", p, "handle", "10:", "netem"]),
            None => tc.qdisc().ws(["root", "handle", "1:", "netem"]),
        };
        cmds.push(at.ws(n).done());
    }
}

/// An htb tree: root class at `total`, one class per QoS class, u32 filters, netem leaves.
fn htb_classes(
    cmds: &mut Vec<Vec<String>>,
    ns: &str,
    dev: &str,
    total: u64,
    q: &QosSpec,
    netem: Option<&[String]>,
    addrs: &BTreeMap<String, Vec<u32>>,
) -> Result<(), LabError> {
    let tc = Tc { ns, dev };
    let n = q.classes.len();
    let def_id = q.classes.iter().position(|c| c.default).map(|i| 10 + i).unwrap_or(10 + n);
    cmds.push(tc.qdisc().ws(["root", "handle", "1:", "htb", "default"]).w(def_id).done());
    cmds.push(tc.htb_class("1:", "1:1", total, total, burst(total)));
    let mut classes: Vec<(usize, u64, u64)> = Vec::new();
    let mut sum = 0u64;
    for (i, c) in q.classes.iter().enumerate() {
        let r = c.rate.bits_per_s();
        let ceil = c.ceil.map_or(total, ShaperRate::bits_per_s).min(total);
        sum = sum.saturating_add(r);
        classes.push((10 + i, r, ceil.max(r)));
    }
    if sum > total {
        return Err(LabError::Scenario(format!(
            "qos on '{}': guaranteed rates add up to {sum} bit/s, more than the total {total}",
            q.link
        )));
    }
    if def_id == 10 + n {
        classes.push((def_id, (total - sum).max(total / 100).max(1000), total));
    }
    for &(id, r, ceil) in &classes {
        let cid = format!("1:{id}");
        cmds.push(tc.htb_class("1:1", &cid, r, ceil, burst(ceil)));
        if let Some(nm) = netem {
            cmds.push(tc.qdisc().ws(["parent", &cid, "handle", &format!("{}:", id + 100), "netem"]).ws(nm).done());
        }
    }
    for (i, c) in q.classes.iter().enumerate() {
        let cid = format!("1:{}", 10 + i);
        let nets = |m: &Option<QosMatch>| -> Result<Vec<Option<Net>>, LabError> {
            match m {
                Some(m) => Ok(match_nets(m, addrs)?.into_iter().map(Some).collect()),
                None => Ok(vec![None]),
            }
        };
        let (sv, dv) = (nets(&c.src)?, nets(&c.dst)?);
        if sv == [None] && dv == [None] && c.sport.is_none() && c.dport.is_none() {
            continue; // matches by `default` only
        }
        let cidr = |n: &Net| format!("{}/{}", fmt_ip(n.addr), n.prefix);
        for sn in &sv {
            for dn in &dv {
                let mut f = tc.filter("1:").ws(["protocol", "ip", "prio", "1", "u32"]);
                if let Some(n) = sn {
                    f = f.ws(["match", "ip", "src"]).w(cidr(n));
                }
                if let Some(n) = dn {
                    f = f.ws(["match", "ip", "dst"]).w(cidr(n));
                }
                if let Some(p) = c.sport {
                    f = f.ws(["match", "ip", "sport"]).w(p).w("0xffff");
                }
                if let Some(p) = c.dport {
                    f = f.ws(["match", "ip", "dport"]).w(p).w("0xffff");
                }
                cmds.push(f.ws(["flowid", &cid]).done());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(p: &Plan) -> Vec<String> {
        p.commands.iter().map(|c| c.join(" ")).collect()
    }

    #[test]
    fn plans_two_hosts_with_tbf_and_netem() {
        let sc = Scenario::parse(
            "name = \"t\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\nrate = \"1gbit\"\nmtu = 9000\ndelay = \"5ms\"\n",
        )
        .unwrap();
        let p = Plan::with_netem(&sc, "lr0001", || true).unwrap();
        let c = joined(&p);
        assert!(p.emulators.is_empty(), "netem is there");
        assert_eq!(p.namespaces, ["lr0001-a", "lr0001-b"]);
        assert_eq!(c[0], "ip netns add lr0001-a");
        assert!(c.contains(&"ip link add eth0 netns lr0001-a type veth peer name eth0 netns lr0001-b".to_string()));
        assert!(c.contains(&"ip -n lr0001-a addr add 198.18.1.1/24 dev eth0".to_string()));
        assert!(c.contains(&"ip -n lr0001-b addr add 198.18.1.2/24 dev eth0".to_string()));
        assert!(c.contains(&"ip -n lr0001-b link set eth0 mtu 9000".to_string()));
        assert!(c.contains(
            &"tc -n lr0001-a qdisc add dev eth0 root handle 1: tbf rate 1000000000bit burst 250000 latency 20ms overhead 24"
                .to_string()
        ));
        assert!(c.contains(
            &"tc -n lr0001-b qdisc add dev eth0 parent 1:1 handle 10: netem delay 5000us limit 100000".to_string()
        ));
        assert_eq!(p.server_addr("a", "b", None).unwrap(), 0xC612_0102);
    }

    #[test]
    fn without_netem_an_impaired_link_is_two_taps_and_an_emulator() {
        let text = "name = \"t\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\n\
                    rate = \"1gbit\"\ndelay = \"25ms\"\njitter = \"1ms\"\nloss = 1.0\nloss_burst = 3.0\nduplicate = 0.5\n\
                    [[link]]\nname = \"plain\"\na = \"a\"\nb = \"b\"\n";
        let sc = Scenario::parse(text).unwrap();
        let mut asked = 0;
        let p = Plan::with_netem(&sc, "lr0002", || {
            asked += 1;
            false
        })
        .unwrap();
        assert_eq!(asked, 0, "loss_burst needs linerate's emulator: netem is not even asked");
        let c = joined(&p);
        assert_eq!(p.emulators.len(), 1);
        let e = &p.emulators[0];
        assert_eq!((e.link.as_str(), e.a_tap.as_str(), e.b_tap.as_str()), ("a-b", "lr0002t0a", "lr0002t0b"));
        assert_eq!(e.a_to_b.delay_ns, 25_000_000);
        assert_eq!(e.a_to_b.jitter_ns, 1_000_000);
        assert_eq!(e.a_to_b.duplicate, 0.005);
        assert!(matches!(e.a_to_b.loss, Loss::GilbertElliott { .. }));
        assert_eq!(e.a_to_b, e.b_to_a, "both directions alike, as netem on both ends");
        assert_eq!(e.a_to_b.rate_bps, None, "tbf keeps the rate without a queue");
        let at = p.emulators_at;
        assert!(
            c[..at].iter().all(|x| x.starts_with("ip netns add") || x.contains("link set lo up")),
            "{:?}",
            &c[..at]
        );
        assert_eq!(c[at], "ip link set dev lr0002t0a netns lr0002-a");
        assert_eq!(c[at + 1], "ip -n lr0002-a link set dev lr0002t0a name eth0");
        assert!(
            c.iter().any(|x| x == "ip link add eth1 netns lr0002-a type veth peer name eth1 netns lr0002-b"),
            "the plain link stays a veth pair"
        );
        assert!(c.iter().any(|x| x.contains("tbf rate 1000000000bit")), "{c:?}");
        assert!(!c.iter().any(|x| x.contains("netem")), "{c:?}");

        // A queue: the emulator enforces the rate with it, and tbf steps aside.
        let q = text.replace("loss_burst = 3.0\n", "queue = \"2ms\"\n");
        let p = Plan::with_netem(&Scenario::parse(&q).unwrap(), "lr0003", || true).unwrap();
        assert_eq!(p.emulators.len(), 1, "only linerate's emulator has a byte queue");
        assert_eq!(p.emulators[0].a_to_b.rate_bps, Some(1_000_000_000));
        assert_eq!(p.emulators[0].a_to_b.queue_bytes, 250_000, "2 ms at 1 Gbit/s");
        assert!(!joined(&p).iter().any(|x| x.contains("tbf")));
        // netem asked for and present: netem, with duplication.
        let n = text.replace("loss_burst = 3.0\n", "");
        let mut asked = 0;
        let p = Plan::with_netem(&Scenario::parse(&n).unwrap(), "lr0004", || {
            asked += 1;
            true
        })
        .unwrap();
        assert_eq!(asked, 1, "asked once, for the impaired link only");
        assert!(p.emulators.is_empty());
        assert!(
            joined(&p)
                .iter()
                .any(|x| x.contains("netem delay 25000us 1000us distribution normal loss 1% duplicate 0.5%")),
            "{:?}",
            joined(&p)
        );
        assert!(
            Scenario::parse(&text.replace("loss_burst = 3.0\n", "loss_burst = 3.0\nemulator = \"netem\"\n")).is_err()
        );
        let u = n.replace("jitter = \"1ms\"\n", "jitter = \"1ms\"\njitter_dist = \"uniform\"\n");
        let p = Plan::with_netem(&Scenario::parse(&u).unwrap(), "lr0005", || true).unwrap();
        assert_eq!(p.emulators[0].a_to_b.dist, Dist::Uniform, "netem has no uniform jitter: linerate's emulator");
        assert!(Scenario::parse(&u.replace("jitter_dist = \"uniform\"", "jitter_dist = \"pareto\"")).is_err());
    }

    #[test]
    fn the_shipped_scenarios_parse_and_plan() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                let sc = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
                Plan::new(&sc, "lrship").unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 8, "{n} scenarios in {}", dir.display());
    }

    #[test]
    fn a_link_may_give_its_tbf_burst_and_latency() {
        let two = "name = \"t\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\nrate = \"10gbit\"\n";
        let p = Plan::new(&Scenario::parse(&format!("{two}burst = \"4MiB\"\nlatency = \"10ms\"\n")).unwrap(), "lr2")
            .unwrap();
        let c = joined(&p);
        for end in ["a", "b"] {
            let tbf = format!(
                "tc -n lr2-{end} qdisc add dev eth0 root handle 1: tbf rate 10000000000bit burst 4194304 latency 10ms overhead 24"
            );
            assert!(c.contains(&tbf), "{c:?}");
        }
        let l = &p.description.links[0];
        assert_eq!((l.burst_bytes, l.latency_us), (Some(4 << 20), Some(10_000)));
        let p = Plan::new(&Scenario::parse(two).unwrap(), "lr3").unwrap();
        let l = &p.description.links[0];
        assert_eq!((l.burst_bytes, l.latency_us), (Some(2_500_000), Some(20_000)), "2 ms of the rate, 20 ms");
        let p = Plan::new(&Scenario::parse(&two.replace("rate = \"10gbit\"\n", "")).unwrap(), "lr4").unwrap();
        assert_eq!(p.description.links[0].burst_bytes, None, "no rate, no tbf");
        assert_eq!(tc_time(250), "250us");
    }

    #[test]
    fn plans_a_switch_with_guests_and_qos() {
        let sc = Scenario::parse(
            r#"
name = "sw"
[[host]]
name = "g[1..3]"
[[host]]
name = "srv"
[[switch]]
name = "sw0"
subnet = "198.19.0.0/24"
[[link]]
a = "g[1..3]"
b = "sw0"
[[link]]
name = "up"
a = "sw0"
b = "srv"
rate = "10gbit"
shaper = "htb"
[[qos]]
link = "up"
side = "a"
[[qos.class]]
name = "gold"
rate = "2gbit"
dst = "g1"
[[qos]]
link = "up"
side = "b"
ingress = true
[[qos.class]]
name = "gold-in"
rate = "2gbit"
src = "g1"
"#,
        )
        .unwrap();
        let p = Plan::new(&sc, "lrab").unwrap();
        let c = joined(&p);
        assert_eq!(p.namespaces.last().unwrap(), "lrab.sw");
        assert!(c.contains(&"ip -n lrab.sw link add br0 type bridge".to_string()));
        assert!(c.contains(&"ip link add eth0 netns lrab-g2 type veth peer name s0p1 netns lrab.sw".to_string()));
        assert!(c.contains(&"ip -n lrab.sw link set s0p1 master br0".to_string()));
        assert!(c.contains(&"ip -n lrab-g3 addr add 198.19.0.3/24 dev eth0".to_string()));
        assert!(c.contains(&"ip -n lrab-srv addr add 198.19.0.4/24 dev eth0".to_string()));
        // Egress QoS on the switch's uplink port: gold guaranteed, the rest in an implicit class.
        assert!(c.contains(&"tc -n lrab.sw qdisc add dev s0p3 root handle 1: htb default 11".to_string()));
        assert!(c.iter().any(|x| x.starts_with(
            "tc -n lrab.sw class add dev s0p3 parent 1:1 classid 1:10 htb rate 2000000000bit ceil 10000000000bit"
        )));
        assert!(c
            .iter()
            .any(|x| x.starts_with("tc -n lrab.sw class add dev s0p3 parent 1:1 classid 1:11 htb rate 8000000000bit")));
        assert!(c.contains(&"tc -n lrab.sw filter add dev s0p3 parent 1: protocol ip prio 1 u32 match ip dst 198.19.0.1/32 flowid 1:10".to_string()));
        // Ingress QoS on the server through an ifb.
        assert!(c.contains(&"ip -n lrab-srv link add lrifb0 type ifb".to_string()));
        assert!(c.iter().any(|x| x.contains(
            "dev eth0 parent ffff: protocol all prio 1 u32 match u32 0 0 action mirred egress redirect dev lrifb0"
        )));
        assert!(c.contains(&"tc -n lrab-srv filter add dev lrifb0 parent 1: protocol ip prio 1 u32 match ip src 198.19.0.1/32 flowid 1:10".to_string()));
        // The server end keeps its htb link shaper.
        assert!(c
            .iter()
            .any(|x| x.starts_with("tc -n lrab-srv class add dev eth0 parent 1: classid 1:1 htb rate 10000000000bit")));
        assert_eq!(p.guarantees.len(), 2);
        assert_eq!(p.guarantees[0].hosts, ["g1"]);
        assert_eq!(p.server_addr("g2", "srv", None).unwrap(), 0xC613_0004);
    }

    #[test]
    fn several_nics_per_host_get_their_own_subnets_and_names() {
        let sc = Scenario::parse(
            "name = \"m\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\nname = \"l1\"\na = \"a\"\nb = \"b\"\n[[link]]\nname = \"l2\"\na = \"a\"\nb = \"b\"\na_if = \"eth7\"\n",
        )
        .unwrap();
        let p = Plan::new(&sc, "lrx").unwrap();
        let a = &p.hosts["a"];
        assert_eq!(a.ifaces.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["eth0", "eth7"]);
        assert_eq!(fmt_ip(a.ifaces[1].addr), "198.18.2.1");
        assert_eq!(fmt_ip(p.server_addr("a", "b", Some("l2")).unwrap()), "198.18.2.2");
    }

    #[test]
    fn rejects_overcommitted_guarantees_and_clashing_subnets() {
        let base = "name = \"q\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a\"\nb = \"b\"\nrate = \"1gbit\"\n";
        let over = format!("{base}[[qos]]\nlink = \"a-b\"\n[[qos.class]]\nname = \"x\"\nrate = \"2gbit\"\n");
        assert!(Plan::new(&Scenario::parse(&over).unwrap(), "r").unwrap_err().to_string().contains("add up"));
        let clash = format!("{base}subnet = \"198.18.0.0/16\"\n[[link]]\nname = \"l2\"\na = \"a\"\nb = \"b\"\nsubnet = \"198.18.5.0/24\"\n");
        assert!(Plan::new(&Scenario::parse(&clash).unwrap(), "r").unwrap_err().to_string().contains("overlap"));
        let dup = format!("{base}a_addr = \"198.18.1.1\"\nb_addr = \"198.18.1.1\"\n");
        assert!(Plan::new(&Scenario::parse(&dup).unwrap(), "r").is_err());
    }

    #[test]
    fn address_errors_are_exact_and_explicit_addresses_are_reserved_first() {
        let plan = |t: &str| Plan::new(&Scenario::parse(t).unwrap(), "r");
        let err = |t: &str| plan(t).unwrap_err().to_string();
        let two = "name = \"e\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n";
        let l = "[[link]]\na = \"a\"\nb = \"b\"\n";
        // A repeated address is refused before any address is checked against its segment.
        let twice = format!(
            "{two}{l}subnet = \"198.18.1.0/24\"\na_addr = \"198.18.2.1\"\n\
             {l}name = \"l2\"\nsubnet = \"198.18.3.0/24\"\na_addr = \"198.18.3.1\"\nb_addr = \"198.18.3.1\"\n"
        );
        assert_eq!(err(&twice), "scenario: link 'l2': address 198.18.3.1 used twice");
        let bcast = format!("{two}{l}subnet = \"198.18.1.0/24\"\na_addr = \"198.18.1.255\"\n");
        let not_host = "is not a host address of its segment";
        assert_eq!(err(&bcast), format!("scenario: link 'a-b': 198.18.1.255 {not_host} 198.18.1.0/24"));
        // End a's address is checked before end b's interface name.
        let order =
            format!("{two}{l}{l}name = \"l2\"\nsubnet = \"198.18.5.0/24\"\na_addr = \"198.18.6.1\"\nb_if = \"eth0\"\n");
        assert_eq!(err(&order), format!("scenario: link 'l2': 198.18.6.1 {not_host} 198.18.5.0/24"));
        let sw = "name = \"s\"\n[[host]]\nname = \"g[1..3]\"\n[[switch]]\nname = \"sw0\"\n";
        // A /30 holds two hosts.
        let full = format!("{sw}subnet = \"198.18.4.0/30\"\n[[link]]\na = \"g[1..3]\"\nb = \"sw0\"\n");
        assert_eq!(err(&full), "scenario: link 'g3-sw0': segment 198.18.4.0 is full");
        // g1's explicit .1 is reserved before g2 and g3, declared earlier, are given theirs.
        let reserved = format!(
            "{sw}subnet = \"198.18.4.0/29\"\n[[link]]\na = \"g[2..3]\"\nb = \"sw0\"\n\
             [[link]]\na = \"g1\"\nb = \"sw0\"\na_addr = \"198.18.4.1\"\n"
        );
        let p = plan(&reserved).unwrap();
        let addr = |h: &str| fmt_ip(p.hosts[h].ifaces[0].addr);
        assert_eq!([addr("g1"), addr("g2"), addr("g3")], ["198.18.4.1", "198.18.4.2", "198.18.4.3"]);
    }

    #[test]
    fn ingress_qos_follows_the_egress_shaper_through_a_fresh_ifb() {
        let sc = Scenario::parse(
            "name = \"i\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n\
             [[link]]\na = \"a\"\nb = \"b\"\nrate = \"1gbit\"\n\
             [[qos]]\nlink = \"a-b\"\nside = \"b\"\ningress = true\n\
             [[qos.class]]\nname = \"x\"\nrate = \"100mbit\"\nsrc = \"a\"\n",
        )
        .unwrap();
        let c = joined(&Plan::new(&sc, "r").unwrap());
        let start = c.iter().position(|x| x.starts_with("tc -n r-b qdisc add dev eth0 root")).unwrap();
        let (class, rest) = ("tc -n r-b class add dev lrifb0 parent", "burst 250000 cburst 250000 overhead 24");
        assert_eq!(
            c[start..],
            [
                "tc -n r-b qdisc add dev eth0 root handle 1: tbf rate 1000000000bit burst 250000 \
                 latency 20ms overhead 24"
                    .to_string(),
                "ip -n r-b link add lrifb0 type ifb".into(),
                "ip -n r-b link set lrifb0 up".into(),
                "tc -n r-b qdisc add dev eth0 handle ffff: ingress".into(),
                "tc -n r-b filter add dev eth0 parent ffff: protocol all prio 1 u32 match u32 0 0 \
                 action mirred egress redirect dev lrifb0"
                    .into(),
                "tc -n r-b qdisc add dev lrifb0 root handle 1: htb default 11".into(),
                format!("{class} 1: classid 1:1 htb rate 1000000000bit ceil 1000000000bit {rest}"),
                format!("{class} 1:1 classid 1:10 htb rate 100000000bit ceil 1000000000bit {rest}"),
                format!("{class} 1:1 classid 1:11 htb rate 900000000bit ceil 1000000000bit {rest}"),
                "tc -n r-b filter add dev lrifb0 parent 1: protocol ip prio 1 u32 \
                 match ip src 198.18.1.1/32 flowid 1:10"
                    .into(),
            ]
        );
    }
}
