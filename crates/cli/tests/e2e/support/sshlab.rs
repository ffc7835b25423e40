//! A two-host lab for `linerate cp` over ssh (issue 5): two network namespaces joined by a veth
//! pair (198.18.67.1 the client, 198.18.67.2 the server), a real sshd in the server namespace with
//! a throwaway host key and user key and its own config, and an ssh_config for the client that
//! names the server `lab`. Everything (processes in both namespaces, the namespaces, the veth
//! pair, the keys) is removed when the lab is dropped, even after a failed assertion.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The client's address.
pub const CLIENT_IP: &str = "198.18.67.1";
/// The server's address (sshd listens here, port 22).
pub const SERVER_IP: &str = "198.18.67.2";
/// The ssh host name of the server in the lab's ssh_config.
pub const HOST: &str = "lab";

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn find(names: &[&str]) -> Option<PathBuf> {
    for n in names {
        if n.contains('/') {
            if Path::new(n).is_file() {
                return Some(PathBuf::from(n));
            }
            continue;
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        for d in std::env::split_paths(&path).chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")]) {
            if d.join(n).is_file() {
                return Some(d.join(n));
            }
        }
    }
    None
}

/// How the server side of a lab differs from the default (root, the sshd's own PATH).
#[derive(Default)]
pub struct Options {
    /// Log in as a new user made for this lab (removed with it), with an empty home beneath the
    /// lab's directory, instead of root.
    pub user: bool,
    /// The remote sessions' PATH (sshd's `SetEnv`), instead of sshd's default.
    pub remote_path: Option<String>,
}

/// A user made for one lab.
pub struct LabUser {
    /// Its name.
    pub name: String,
    /// Its home directory (empty when made).
    pub home: PathBuf,
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
}

/// The lab. Create with [`SshLab::start`].
pub struct SshLab {
    /// The client's namespace.
    pub client_ns: String,
    /// The server's namespace.
    pub server_ns: String,
    /// Scratch directory (keys, configs, and room for trees), removed on drop.
    pub dir: tempfile::TempDir,
    /// The client's ssh_config (`ssh -F` it).
    pub ssh_config: PathBuf,
    /// The client's end of the veth pair (in `client_ns`).
    pub client_dev: String,
    /// The user the client logs in as, when not root ([`Options::user`]).
    pub user: Option<LabUser>,
    sshd: Option<Child>,
    sshd_log: PathBuf,
}

impl SshLab {
    /// Build the lab, for a test that is `#[ignore = "needs root"]`: without root, or without
    /// ssh/sshd/ssh-keygen/ip, the test fails saying why ([`super::require_root`]). CI runs
    /// such tests as root with all of them installed.
    pub fn start() -> SshLab {
        Self::start_with(Options::default())
    }

    /// The lab when this process is root, else `None`: for a test that runs either way (over
    /// the lab's link as root, over loopback without).
    pub fn start_if_root() -> Option<SshLab> {
        rustix::process::geteuid().is_root().then(SshLab::start)
    }

    /// Build a lab as [`SshLab::start`] does, changed by `opts`.
    pub fn start_with(opts: Options) -> SshLab {
        super::require_root("the ssh lab (two network namespaces and an sshd)");
        let (Some(sshd), Some(keygen), Some(_), Some(_)) =
            (find(&["/usr/sbin/sshd", "sshd"]), find(&["ssh-keygen"]), find(&["ssh"]), find(&["ip"]))
        else {
            panic!("the ssh lab needs ssh, sshd, ssh-keygen and ip: install openssh-client, openssh-server and iproute2 (.ci/run does)");
        };
        let id = format!("{}{}", std::process::id() % 100_000, COUNTER.fetch_add(1, Ordering::Relaxed));
        let dir = tempfile::Builder::new().prefix("linerate-sshlab-").tempdir().unwrap();
        let dev = format!("lrsv{id}");
        let mut lab = SshLab {
            client_dev: dev.clone(),
            client_ns: format!("lrsc{id}"),
            server_ns: format!("lrss{id}"),
            ssh_config: dir.path().join("ssh_config"),
            sshd_log: dir.path().join("sshd.log"),
            dir,
            user: None,
            sshd: None,
        };
        // From here on, Drop cleans up whatever was made.
        let peer = format!("{dev}p");
        assert!(ip(&["netns", "add", &lab.client_ns]) && ip(&["netns", "add", &lab.server_ns]));
        assert!(ip(&[
            "link",
            "add",
            &dev,
            "netns",
            &lab.client_ns,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            &lab.server_ns
        ]));
        assert!(ip(&["-n", &lab.client_ns, "addr", "add", &format!("{CLIENT_IP}/30"), "dev", &dev]));
        assert!(ip(&["-n", &lab.server_ns, "addr", "add", &format!("{SERVER_IP}/30"), "dev", &peer]));
        for (ns, d) in [(&lab.client_ns, &dev), (&lab.server_ns, &peer)] {
            assert!(ip(&["-n", ns, "link", "set", "lo", "up"]) && ip(&["-n", ns, "link", "set", d, "up"]));
        }
        let d = lab.dir.path().to_path_buf();
        if opts.user {
            // The lab's directory must be reachable by the user (sshd reads authorized_keys as it).
            fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            let name = format!("lrp{id}");
            let home = d.join(format!("home-{name}"));
            let st = Command::new("useradd")
                .args(["-M", "-N", "-g", "nogroup", "-s", "/bin/sh", "-p", "*", "-d"])
                .arg(&home)
                .arg(&name)
                .status()
                .expect("useradd (package passwd)");
            assert!(st.success(), "useradd {name} failed");
            // From here on, Drop removes the user.
            lab.user = Some(LabUser { name: name.clone(), home: home.clone(), uid: 0, gid: 0 });
            let id = |flag: &str| -> u32 {
                let o = Command::new("id").args([flag, &name]).output().unwrap();
                String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
            };
            let (uid, gid) = (id("-u"), id("-g"));
            lab.user = Some(LabUser { name, home: home.clone(), uid, gid });
            fs::create_dir(&home).unwrap();
            std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        }
        let (hk, uk) = (d.join("host_key"), d.join("user_key"));
        for k in [&hk, &uk] {
            let st = Command::new(&keygen)
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "linerate-sshlab", "-f"])
                .arg(k)
                .status()
                .unwrap();
            assert!(st.success(), "ssh-keygen failed");
        }
        let hpub = fs::read_to_string(d.join("host_key.pub")).unwrap();
        fs::write(d.join("authorized_keys"), fs::read_to_string(d.join("user_key.pub")).unwrap()).unwrap();
        fs::write(d.join("known_hosts"), format!("linerate-sshlab {}\n", hpub.trim())).unwrap();
        fs::write(
            d.join("sshd_config"),
            format!(
                "Port 22\nListenAddress {SERVER_IP}\nHostKey {}\nAuthorizedKeysFile {}\nPidFile none\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 PermitRootLogin prohibit-password\nStrictModes no\nAllowTcpForwarding yes\nSubsystem sftp internal-sftp\nLogLevel ERROR\n\
                 MaxStartups 100\nMaxSessions 100\n{}",
                hk.display(),
                d.join("authorized_keys").display(),
                opts.remote_path.as_ref().map(|p| format!("SetEnv PATH={p}\n")).unwrap_or_default()
            ),
        )
        .unwrap();
        fs::write(
            &lab.ssh_config,
            format!(
                "Host {HOST}\n  HostName {SERVER_IP}\n  User {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
                 UserKnownHostsFile {}\n  HostKeyAlias linerate-sshlab\n  StrictHostKeyChecking yes\n  \
                 BatchMode yes\n  LogLevel ERROR\n  ConnectTimeout 10\n",
                lab.user.as_ref().map_or("root", |u| u.name.as_str()),
                uk.display(),
                d.join("known_hosts").display()
            ),
        )
        .unwrap();
        // sshd insists on its privilege separation directory.
        let _ = fs::create_dir_all("/run/sshd");
        let log = fs::File::create(&lab.sshd_log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.server_ns])
            .arg(&sshd)
            // INFO for its "Server listening" line, which says when it is ready.
            .args(["-D", "-e", "-o", "LogLevel=INFO", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        lab.sshd = Some(child);
        // Ready once it says it listens (awaited as its log is written, bounded); then a login works.
        let listening = || lab.sshd_log().contains("Server listening on");
        let alive = || lab.sshd.as_ref().is_some_and(|c| rustix::process::test_kill_process(pid_of(c)).is_ok());
        let ready = super::await_files(&[d.as_path()], Duration::from_secs(15), alive, listening);
        assert!(ready, "sshd did not start listening: {}", lab.sshd_log());
        let o = lab.ssh().args([HOST, "true"]).stdin(Stdio::null()).output().unwrap();
        assert!(
            o.status.success(),
            "sshd did not accept a login: {}\nsshd: {}",
            String::from_utf8_lossy(&o.stderr),
            lab.sshd_log()
        );
        lab
    }

    /// A program run in the client's namespace.
    pub fn in_client(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.client_ns]).arg(program);
        c
    }

    /// A program run in the server's namespace.
    pub fn in_server(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.server_ns]).arg(program);
        c
    }

    /// `ssh -F <the lab's config>` in the client's namespace (add `lab` and a command).
    pub fn ssh(&self) -> Command {
        let mut c = self.in_client("ssh");
        c.arg("-F").arg(&self.ssh_config);
        c
    }

    /// The `--rsh` value for the lab's ssh.
    pub fn rsh(&self) -> String {
        format!("ssh -F {}", self.ssh_config.display())
    }

    /// `linerate cp --rsh "ssh -F cfg"` in the client's namespace: the remote linerate is found
    /// (or uploaded) by cp itself.
    pub fn cp_bare(&self) -> Command {
        let mut c = self.in_client(env!("CARGO_BIN_EXE_linerate"));
        c.args(["cp", "--no-save", "--rsh", &self.rsh()]);
        c
    }

    /// `linerate cp --rsh "ssh -F cfg" --remote-linerate <this build>` in the client's namespace.
    pub fn cp(&self) -> Command {
        let mut c = self.in_client(env!("CARGO_BIN_EXE_linerate"));
        c.args(["cp", "--no-save", "--rsh", &self.rsh(), "--remote-linerate", env!("CARGO_BIN_EXE_linerate")]);
        c
    }

    /// Process ids in the server's namespace (sshd, its sessions, remote linerates).
    pub fn server_pids(&self) -> Vec<u32> {
        let o = Command::new("ip").args(["netns", "pids", &self.server_ns]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
    }

    /// Cut (`false`) or restore (`true`) the link between the hosts (both directions: the
    /// client's end of the veth pair goes down or up).
    pub fn set_link(&self, up: bool) -> bool {
        ip(&["-n", &self.client_ns, "link", "set", &self.client_dev, if up { "up" } else { "down" }])
    }

    /// What sshd logged so far.
    pub fn sshd_log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = fs::File::open(&self.sshd_log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for SshLab {
    fn drop(&mut self) {
        if let Some(mut c) = self.sshd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Whatever the sshd started and left running in the lab's namespaces (sessions of a failed
        // test, remote linerates) was started by this test: end it by pid.
        for ns in [&self.server_ns, &self.client_ns] {
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                    if let Some(p) = rustix::process::Pid::from_raw(pid) {
                        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                    }
                }
            }
        }
        // Deleting a namespace removes its end of the veth pair, and with it the other end.
        let _ = ip(&["netns", "del", &self.client_ns]);
        let _ = ip(&["netns", "del", &self.server_ns]);
        if let Some(u) = &self.user {
            let _ = Command::new("userdel").arg("-f").arg(&u.name).stderr(Stdio::null()).status();
        }
    }
}

/// stdout and stderr of a finished command, for assertion messages.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Run a command to its end, killing it (by pid) after `limit`.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = match super::exit_within(&mut child, limit) {
        Some(s) => s,
        None => child.wait().unwrap(),
    };
    Output { status, stdout: o.join().unwrap(), stderr: e.join().unwrap() }
}

fn pid_of(c: &Child) -> rustix::process::Pid {
    rustix::process::Pid::from_raw(c.id() as i32).expect("a child's pid")
}
