//! A throwaway PostgreSQL cluster, for tests and benchmarks: `initdb` into a
//! fresh directory, the server on a private loopback port and socket
//! directory, gone with the process that started it.
//!
//! The server runs under a small shell that holds a pipe from this process:
//! when this process ends, however it ends (a failed test, `kill -9`), the
//! pipe closes and the shell stops the server and removes its directory. No
//! cluster outlives its tests.
//!
//! PostgreSQL refuses to run as root; a root caller's cluster runs as the
//! `postgres` user where there is one (Debian's package makes it), else as
//! `nobody`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where the server binaries are: `$REIN_PG_BIN`, else the newest of Debian's
/// `/usr/lib/postgresql/*/bin`, else the directory of `initdb` on `PATH`.
pub fn binaries() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("REIN_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, bin)) = debian.pop() {
        return Some(bin);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .find(|d| d.join("initdb").is_file() && d.join("postgres").is_file())
}

/// A running throwaway cluster. Dropping it stops the server and removes its
/// directory.
#[derive(Debug)]
pub struct Scratch {
    port: u16,
    dir: PathBuf,
    /// The shell's end of the pipe: closing it stops the server.
    stop: Option<ChildStdin>,
    shell: Child,
    databases: AtomicU64,
}

/// The superuser of a scratch cluster (trusted on loopback, no password).
pub const SUPERUSER: &str = "rein";

/// The database of a TLS cluster that takes only clients with a certificate.
pub const CERTIFIED: &str = "certified";

static CLUSTERS: AtomicU64 = AtomicU64::new(0);

/// One cluster for the whole process, started on first use: tests share it
/// and take a database each ([`Scratch::database`]). It stops when the
/// process ends.
pub fn shared() -> std::io::Result<&'static Scratch> {
    static SHARED: std::sync::OnceLock<Scratch> = std::sync::OnceLock::new();
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if let Some(s) = SHARED.get() {
        return Ok(s);
    }
    let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = SHARED.get() {
        return Ok(s);
    }
    let started = Scratch::start()?;
    Ok(SHARED.get_or_init(|| started))
}

fn failed(what: &str, e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("scratch PostgreSQL: {what}: {e}"))
}

/// The user a root caller's server runs as: (uid, gid).
fn server_user() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    ["postgres", "nobody"].iter().find_map(|name| {
        nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
    })
}

fn as_server_user(command: &mut Command, user: Option<(u32, u32)>) {
    if let Some((uid, gid)) = user {
        // std drops a root caller's supplementary groups with the uid.
        command.uid(uid).gid(gid);
    }
}

/// A port nothing listens on now.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}

impl Scratch {
    /// Makes a cluster and starts its server; returns once it accepts
    /// connections (about a second).
    pub fn start() -> std::io::Result<Scratch> {
        Scratch::start_with(None)
    }

    /// [`Scratch::start`] with TLS on, the server's certificate and key
    /// those of `certs`, and connections over TCP accepted only with TLS
    /// (`hostssl` in `pg_hba.conf`; the socket stays open without).
    /// The database [`CERTIFIED`] takes only clients with a certificate its
    /// authority signed for their user name.
    pub fn start_tls(certs: &Certificates) -> std::io::Result<Scratch> {
        Scratch::start_with(Some(certs))
    }

    fn start_with(tls: Option<&Certificates>) -> std::io::Result<Scratch> {
        let bin = binaries().ok_or_else(|| {
            failed(
                "no server binaries",
                "install Debian's `postgresql` package, or set REIN_PG_BIN to the directory holding initdb and postgres",
            )
        })?;
        let user = server_user();
        let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rein-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        if let Some((uid, gid)) = user {
            nix::unistd::chown(
                &dir,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .map_err(|e| failed("cannot hand its directory to the server's user", e))?;
        }
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--locale=C"])
            .args(["--no-sync", "--no-instructions"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        as_server_user(&mut initdb, user);
        let made = initdb
            .output()
            .map_err(|e| failed("cannot run initdb", e))?;
        if !made.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(failed(
                "initdb failed",
                String::from_utf8_lossy(&made.stderr).trim(),
            ));
        }
        if let Some(certs) = tls
            && let Err(e) = Scratch::secure(&data, certs, user)
        {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        let mut last = None;
        for _ in 0..5 {
            match Scratch::serve(&bin, &dir, user, tls.is_some()) {
                Ok((shell, stop, port)) => {
                    return Ok(Scratch {
                        port,
                        dir,
                        stop: Some(stop),
                        shell,
                        databases: AtomicU64::new(0),
                    });
                }
                // Another process took the port between the look and the bind.
                Err(e) => last = Some(e),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(last.unwrap_or_else(|| failed("server did not start", "")))
    }

    /// Puts the certificates and key in the cluster's directory (the key the
    /// server user's alone, as PostgreSQL insists) and lets TCP clients in
    /// only over TLS, to [`CERTIFIED`] only with a client certificate.
    fn secure(data: &Path, certs: &Certificates, user: Option<(u32, u32)>) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let copy = |from: &Path, name: &str, mode: u32| -> std::io::Result<()> {
            let to = data.join(name);
            std::fs::copy(from, &to)
                .map_err(|e| failed(&format!("cannot copy {}", from.display()), e))?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))?;
            if let Some((uid, gid)) = user {
                nix::unistd::chown(
                    &to,
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                )
                .map_err(|e| failed("cannot hand the key to the server's user", e))?;
            }
            Ok(())
        };
        copy(&certs.server, "server.crt", 0o644)?;
        copy(&certs.key, "server.key", 0o600)?;
        copy(&certs.authority, "root.crt", 0o644)?;
        std::fs::write(
            data.join("pg_hba.conf"),
            format!(
                "local all all trust
hostssl {CERTIFIED} all 127.0.0.1/32 cert
hostssl {CERTIFIED} all ::1/128 cert
hostssl all all 127.0.0.1/32 trust
hostssl all all ::1/128 trust
"
            ),
        )
    }

    /// Starts the server under its stopping shell and waits for the line that
    /// says it is ready.
    fn serve(
        bin: &Path,
        dir: &Path,
        user: Option<(u32, u32)>,
        tls: bool,
    ) -> std::io::Result<(Child, ChildStdin, u16)> {
        let port = free_port()?;
        let mut shell = Command::new("sh");
        // The shell reads its stdin until this process closes it, then stops
        // the server at once (a scratch cluster keeps nothing) and removes it.
        shell
            .arg("-c")
            .arg(
                r#"bin="$1"; dir="$2"; shift 2
"$bin/postgres" -D "$dir/data" "$@" </dev/null &
pid=$!
cat >/dev/null
kill -QUIT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$dir""#,
            )
            .arg("sh")
            .arg(bin)
            .arg(dir)
            .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-k"])
            .arg(dir)
            .args(["-c", "max_connections=400", "-c", "shared_buffers=64MB"])
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            .args(if tls {
                &["-c", "ssl=on", "-c", "ssl_ca_file=root.crt"][..]
            } else {
                &["-c", "ssl=off"][..]
            })
            .args([
                "-c",
                "log_min_messages=warning",
                "-c",
                "log_min_error_statement=panic",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        as_server_user(&mut shell, user);
        let mut child = shell
            .spawn()
            .map_err(|e| failed("cannot start the server", e))?;
        let stop = child.stdin.take().ok_or_else(|| failed("no pipe", ""))?;
        let stderr = child.stderr.take().ok_or_else(|| failed("no pipe", ""))?;
        let (ready, told) = std::sync::mpsc::channel::<Result<(), String>>();
        std::thread::spawn(move || {
            let mut said = Vec::new();
            let mut ready = Some(ready);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(tx) = &ready {
                    if line.contains("ready to accept connections") {
                        let _ = tx.send(Ok(()));
                        ready = None;
                    } else {
                        said.push(line);
                    }
                }
            }
            if let Some(tx) = ready {
                let _ = tx.send(Err(said.join("\n")));
            }
        });
        match told.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(())) => Ok((child, stop, port)),
            Ok(Err(said)) => {
                let _ = child.wait();
                Err(failed("the server stopped", said))
            }
            Err(e) => {
                drop(stop);
                let _ = child.wait();
                Err(failed("the server did not become ready", e))
            }
        }
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{name}", self.port)
    }

    /// Makes a new, empty database and returns its URL: one per test, so
    /// tests share a cluster and nothing else.
    pub async fn database(&self) -> std::io::Result<String> {
        let name = self.database_named().await?;
        Ok(self.url(&name))
    }

    /// [`Scratch::database`], returning the new database's name.
    pub async fn database_named(&self) -> std::io::Result<String> {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{n}");
        self.create_database(&name).await?;
        Ok(name)
    }

    /// Makes the database `name` (a plain identifier).
    pub async fn create_database(&self, name: &str) -> std::io::Result<()> {
        // Over the socket, which takes no TLS whatever the cluster's TCP wants.
        let (client, connection) = tokio_postgres::Config::new()
            .host_path(&self.dir)
            .port(self.port)
            .user(SUPERUSER)
            .dbname("postgres")
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| failed("cannot connect", e))?;
        let driver = tokio::spawn(connection);
        let made = client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| failed("cannot create a database", e));
        drop(client);
        let _ = driver.await;
        made
    }

    /// Stops the server (an immediate shutdown: a scratch cluster keeps
    /// nothing) and removes its directory.
    fn stop(&mut self) {
        if let Some(mut stop) = self.stop.take() {
            let _ = stop.flush();
        }
        let _ = self.shell.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Certificates for a TLS cluster, made by `openssl` (Debian's `openssl`
/// package): an authority, a server certificate it signed for `localhost`
/// only (not for `127.0.0.1`), its key, a client certificate it signed for
/// [`SUPERUSER`] and its key, and a second authority that signed nothing.
/// All PEM files in one directory.
#[derive(Debug)]
pub struct Certificates {
    pub authority: PathBuf,
    pub other_authority: PathBuf,
    pub server: PathBuf,
    pub key: PathBuf,
    pub client: PathBuf,
    pub client_key: PathBuf,
}

impl Certificates {
    pub fn make(dir: &Path) -> std::io::Result<Certificates> {
        let openssl = |args: &[&str]| -> std::io::Result<()> {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .map_err(|e| failed("cannot run openssl (install Debian's `openssl`)", e))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(failed(
                    &format!("openssl {}", args.join(" ")),
                    String::from_utf8_lossy(&out.stderr).trim(),
                ))
            }
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        for (ca, name) in [
            ("ca", "/CN=rein test authority"),
            ("other", "/CN=another authority"),
        ] {
            let (key, crt) = (format!("{ca}.key"), format!("{ca}.crt"));
            let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &crt, "-subj", name]);
            args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
            args.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
            openssl(&args)?;
        }
        // A key and a certificate for it that the authority signed, with
        // the extensions `ext` lists.
        let signed = |name: &str, subject: &str, ext: &str| -> std::io::Result<()> {
            let (key, csr, crt, extfile) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            let mut args = vec!["req", "-nodes"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
            openssl(&args)?;
            std::fs::write(dir.join(&extfile), ext)?;
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &crt,
                "-extfile",
                &extfile,
            ])
        };
        signed(
            "server",
            "/CN=localhost",
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )?;
        // A client certificate for the superuser.
        signed(
            "client",
            &format!("/CN={SUPERUSER}"),
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
        )?;
        Ok(Certificates {
            authority: dir.join("ca.crt"),
            other_authority: dir.join("other.crt"),
            server: dir.join("server.crt"),
            key: dir.join("server.key"),
            client: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        })
    }
}

/// A TCP relay on loopback to a server's port that can be cut: what a node
/// sees when the network between it and the database fails (its
/// connections drop, new ones are refused). It runs on the runtime it was
/// made on.
#[derive(Debug)]
pub struct Relay {
    port: u16,
    tasks: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    pub async fn to(server: u16) -> std::io::Result<Relay> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let tasks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&tasks);
        let accepting = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let relayed = tokio::spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", server)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                if let Ok(mut kept) = kept.lock() {
                    kept.push(relayed);
                }
            }
        });
        if let Ok(mut tasks) = tasks.lock() {
            tasks.push(accepting);
        }
        Ok(Relay { port, tasks })
    }

    /// The relay's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        if let Ok(mut tasks) = self.tasks.lock() {
            for task in tasks.drain(..) {
                task.abort();
            }
        }
    }
}
