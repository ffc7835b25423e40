//! One `linerate bench` run from its [`Plan`]: connect, wait for `--start-at`, the
//! [`Campaign`], the `linerate.bench/1` document, the report in its [`Format`] and the `--hgrm`
//! files. What it shows is rendered here (through [`crate::text`]) and handed to an [`Output`],
//! which writes it: the CLI, to standard output (or `--logfile`) and standard error.

use crate::campaign::{Agent, Campaign, Observer};
use crate::doc::{document, DocumentConfig};
use crate::hgrm::{self, HgrmFile};
use crate::plan::{span, Format, Plan, PlanError};
use crate::stats::Point;
use crate::{text, BenchClient, BenchClientConfig, LiveInterval, TestResult};
use linerate_model::doc::bench::BenchDocument;
use linerate_model::doc::iperf3::NotIperf3;
use linerate_model::shutdown::Shutdown;
use linerate_net::EngineError;
use linerate_proto::bench::TestSpec;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Where a run's text goes, and what it is told besides.
pub trait Output {
    /// The run's error: the output's own, a session's, a plan's or the run's.
    type Error: From<EngineError> + From<PlanError> + From<RunError>;

    /// Text of the report, each line prefixed and ended with a newline: standard output, or a
    /// log file. An error ends the run (a closed pipe), except under the live interval lines,
    /// whose errors the next [`Output::check_open`] finds.
    fn report(&mut self, text: &str) -> Result<(), Self::Error>;

    /// A line for standard error: a warning, a note, the wait before the start, a file written.
    fn note(&mut self, line: &str) -> Result<(), Self::Error>;

    /// An error once the output has closed (`| head`): the run ends with it after a test.
    fn check_open(&mut self) -> Result<(), Self::Error>;

    /// The run's document, once the tests ran, before the report is printed (the CLI saves it).
    fn document(&mut self, doc: &BenchDocument) -> Result<(), Self::Error>;
}

/// Why a run that ran could not give its report or files.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// What ran does not fit iperf3's document (a usage error).
    #[error("--json-iperf3: {0}")]
    Iperf3(NotIperf3),
    /// A document did not encode.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// An `--hgrm` file could not be written after the test.
    #[error("--hgrm: writing {}", hgrm::shown(.path))]
    WriteHgrm {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Plan {
    /// Run the plan against the agent of `cfg`, telling `out`. A stop of `stop` (Ctrl-C, a
    /// closed output) ends a running test in order, as its end would, and the run after it:
    /// what ran is reported and returned. `None`: stopped while waiting for `--start-at`,
    /// before any test.
    pub fn run<O: Output>(
        mut self,
        cfg: BenchClientConfig,
        stop: &Shutdown,
        out: &mut O,
    ) -> Result<Option<Vec<Point>>, O::Error> {
        let mut client = BenchClient::connect(cfg.clone())?;
        // iperf3's datagram size is the control connection's MSS, known only now.
        self.with_control_mss(client.control_mss())?;
        client.cancel_on(stop.clone());
        if let Some((ms, at)) = self.start {
            // A scheduled start (`--start-at`), the one wait here that is a time, not an event; a
            // stop ends it as it would end a test.
            if let Ok(wait) = at.duration_since(SystemTime::now()) {
                if wait >= Duration::from_secs(1) {
                    out.note(&format!(
                        "linerate bench: connected; waiting {} for --start-at {ms} ({}) before the first test",
                        span(wait),
                        linerate_model::time::rfc3339_millis(ms)
                    ))?;
                }
                if stop.wait_timeout(wait) {
                    return Ok(None);
                }
            }
        }
        let c = self.config;
        // The JSON and CSV documents stay machine-readable: no prefixes, no banners or tables.
        let text = c.format == Format::Text;
        let live = text && !c.quiet;
        let mut shown = Shown {
            out,
            title: c.title.filter(|_| text),
            timestamps: c.timestamps && text,
            addr: cfg.addr,
            live,
            lines: live && !c.interval.is_zero(),
            tables: text,
            level: self.repeat.level,
            hgrm_path: c.hgrm.as_deref(),
            hgrm: Vec::new(),
        };
        let mut agent = Agent::new(cfg.clone(), client, stop.clone());
        let done = Campaign::new(self.points, self.repeat, c.link).run(&mut agent, stop, &mut shown)?;
        // `--hgrm`'s files, rendered once the test has run.
        let hgrm = std::mem::take(&mut shown.hgrm);
        let doc_cfg = DocumentConfig {
            addr: cfg.addr,
            tuning: &cfg.tuning,
            level: self.repeat.level,
            width_pct: self.repeat.width_pct,
            version: c.version,
        };
        let doc = document(&done, &doc_cfg);
        shown.out.document(&doc)?;
        let report = match c.format {
            Format::Iperf3 => {
                let i = linerate_model::doc::iperf3::from_bench(&doc).map_err(RunError::Iperf3)?;
                Some(serde_json::to_string_pretty(&i).map_err(RunError::from)?)
            }
            Format::Json => Some(serde_json::to_string(&doc).map_err(RunError::from)?),
            Format::Csv => Some(text::csv(&done).trim_end().to_string()),
            Format::Text => (done.len() > 1).then(|| text::sweep_table(&done)),
        };
        if let Some(r) = report {
            shown.say(&r)?;
        }
        for f in &hgrm {
            hgrm::write_atomically(&f.path, &f.text)
                .map_err(|source| RunError::WriteHgrm { path: f.path.clone(), source })?;
            if !(c.quiet || matches!(c.format, Format::Json | Format::Csv)) {
                let (n, path) = (f.transactions, hgrm::shown(&f.path));
                shown.out.note(&format!("latency histogram ({n} transactions) written to {path}"))?;
            }
        }
        if hgrm.first().is_some_and(|f| f.transactions == 0) {
            let w = "linerate bench: warning: --hgrm: no transaction was timed after the warm-up: the file holds none";
            shown.out.note(w)?;
        }
        Ok(Some(done))
    }
}

/// What a run shows of a campaign as it runs: each point's banner, the live lines, the table
/// after each point and its warnings; and `--hgrm`'s files, rendered from the last point's
/// histograms.
struct Shown<'a, O> {
    out: &'a mut O,
    /// `-T`, on every line of the text report.
    title: Option<String>,
    /// `--timestamps`, on every line of the text report.
    timestamps: bool,
    addr: SocketAddr,
    /// Banners and the agent's grant (not with -q, --json, --csv, --json-iperf3).
    live: bool,
    /// The interval lines and the receiver's (live, and not -i 0).
    lines: bool,
    /// The table of each point (not with a document on stdout).
    tables: bool,
    level: u32,
    hgrm_path: Option<&'a Path>,
    hgrm: Vec<HgrmFile>,
}

impl<O: Output> Shown<'_, O> {
    /// `text` on the report, each line prefixed.
    fn say(&mut self, text: &str) -> Result<(), O::Error> {
        self.out.report(&text::prefixed(text, self.title.as_deref(), self.timestamps))
    }
}

impl<O: Output> Observer for Shown<'_, O> {
    type Error = O::Error;

    fn point(&mut self, labels: &[(String, String)], spec: &TestSpec) -> Result<(), O::Error> {
        if self.live {
            self.say(&text::banner(spec, &self.addr, labels))?;
        }
        Ok(())
    }

    fn admitted(&mut self, spec: &TestSpec) {
        if let Some(l) = text::granted(spec).filter(|_| self.live) {
            let _ = self.say(&l);
        }
    }

    fn interval(&mut self, spec: &TestSpec, iv: &LiveInterval<'_>) {
        if self.lines {
            // A closed pipe stops the test (the output's stop); the error is seen after it. With
            // -P, a line per stream and their sum, written at once.
            let _ = self.say(&text::interval_lines(spec, iv.counts, iv.streams));
        }
    }

    fn run(&mut self, r: &TestResult) -> Result<(), O::Error> {
        let got = text::receiver_lines(r);
        if self.lines && !got.is_empty() {
            self.say(got.trim_end())?;
        }
        self.out.check_open()
    }

    fn point_done(&mut self, p: &Point) -> Result<(), O::Error> {
        if let Some(path) = self.hgrm_path {
            self.hgrm = hgrm::files(path, &p.result);
        }
        if self.tables {
            self.say(&text::table(&p.result, &p.summary, &p.runs, self.level))?;
        }
        text::point_notes(p).iter().try_for_each(|n| self.out.note(n))
    }
}
