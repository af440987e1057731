//! TLS to the PostgreSQL server, chosen in the store's URL the way libpq
//! chooses it: `sslmode` and `sslrootcert` in the query string.
//!
//! | `sslmode`           | TLS                      | the server's certificate                    |
//! |---------------------|--------------------------|---------------------------------------------|
//! | `disable`           | never                    | —                                           |
//! | `prefer` (default)  | if the server offers it  | not checked                                 |
//! | `require`           | always                   | not checked (checked as `verify-ca` when `sslrootcert` is given) |
//! | `verify-ca`         | always                   | signed by a trusted authority               |
//! | `verify-full`       | always                   | signed by a trusted authority, for the host |
//!
//! The trusted authorities are the certificates in `sslrootcert` (a PEM file),
//! else the system's (`sslrootcert=system`, libpq's spelling, says the same).
//! A certificate that is "not checked" still proves the handshake (the
//! server holds its key), so the connection is private against anyone who
//! only listens, but not against one who stands in the middle; that is what
//! libpq's `prefer` and `require` promise too. A client certificate is
//! presented when `sslcert` and `sslkey` (PEM files, the key not encrypted)
//! name one; unlike libpq, rein does not look for one in `~/.postgresql`.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much of TLS a store's connections insist on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(text: &str) -> Result<Mode, String> {
        Ok(match text {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported (it tries without TLS first); use prefer, require, verify-ca or verify-full"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "unknown sslmode `{other}`; use disable, prefer, require, verify-ca or verify-full"
                ));
            }
        })
    }

    /// How the URL spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether TLS is tried, and whether it must be.
    fn negotiation(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// A store URL taken apart: the connection settings, and how TLS is made.
pub struct Secured {
    pub config: tokio_postgres::Config,
    pub connector: MakeRustlsConnect,
    pub mode: Mode,
}

impl std::fmt::Debug for Secured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secured")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// Parses `url`, with the TLS settings tokio-postgres does not know taken out
/// of its query string and turned into a connector. Errors name what is wrong
/// (never the password: the caller says which URL).
pub fn secure(url: &str) -> Result<Secured, String> {
    let mut mode = Mode::Prefer;
    let mut root: Option<String> = None;
    let (mut cert, mut cert_key): (Option<String>, Option<String>) = (None, None);
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let rest = match url.split_once('?') {
        Some((base, query)) if is_url => {
            // The other settings are kept exactly as written (tokio-postgres
            // decodes them itself).
            let mut kept = Vec::new();
            for piece in query.split('&').filter(|p| !p.is_empty()) {
                let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
                let decoded = || {
                    percent_encoding::percent_decode_str(value)
                        .decode_utf8_lossy()
                        .into_owned()
                };
                match key {
                    "sslmode" => mode = Mode::parse(&decoded())?,
                    "sslrootcert" => root = Some(decoded()),
                    "sslcert" => cert = Some(decoded()),
                    "sslkey" => cert_key = Some(decoded()),
                    "sslpassword" | "sslcrl" | "sslcrldir" => {
                        return Err(format!(
                            "`{key}` is not supported yet: rein reads neither encrypted keys nor revocation lists"
                        ));
                    }
                    _ => kept.push(piece),
                }
            }
            if kept.is_empty() {
                base.to_owned()
            } else {
                format!("{base}?{}", kept.join("&"))
            }
        }
        // The `key=value` form goes to tokio-postgres as it is (its own
        // `sslmode`: disable, prefer, require, none of them checking).
        _ => url.to_owned(),
    };
    let mut config: tokio_postgres::Config = rest.parse().map_err(|e| format!("{e}"))?;
    if is_url {
        config.ssl_mode(mode.negotiation());
    } else {
        mode = match config.get_ssl_mode() {
            SslMode::Disable => Mode::Disable,
            SslMode::Require => Mode::Require,
            _ => Mode::Prefer,
        };
    }
    if root.is_some() && mode == Mode::Require {
        // libpq: with a root certificate given, `require` checks like `verify-ca`.
        mode = Mode::VerifyCa;
    }
    let client = match (cert, cert_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(client_identity(&cert, &key)?),
        (Some(_), None) => return Err("sslcert needs sslkey, the key of that certificate".into()),
        (None, Some(_)) => return Err("sslkey needs sslcert, the certificate of that key".into()),
    };
    let connector = MakeRustlsConnect::new(client_config(mode, root.as_deref(), client)?);
    Ok(Secured {
        config,
        connector,
        mode,
    })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client certificate (with the chain after it, if the file holds one) and
/// its key.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn client_identity(cert: &str, key: &str) -> Result<Identity, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read sslcert {cert}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("sslcert {cert} holds no PEM certificate"));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read sslkey {key}: {e}; it must be an unencrypted PEM key"))?;
    Ok((chain, key))
}

fn client_config(
    mode: Mode,
    root: Option<&str>,
    client: Option<Identity>,
) -> Result<ClientConfig, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    let chain = match mode {
        Mode::Disable | Mode::Prefer | Mode::Require => None,
        Mode::VerifyCa | Mode::VerifyFull => Some(
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots(root)?), provider.clone())
                .build()
                .map_err(|e| format!("cannot set up TLS: {e}"))?,
        ),
    };
    let verifier = Arc::new(Verifier {
        chain,
        names: mode == Mode::VerifyFull,
        provider,
    });
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match client {
        None => Ok(builder.with_no_client_auth()),
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("cannot use sslcert and sslkey: {e}")),
    }
}

/// The authorities a checked certificate must come from.
fn roots(root: Option<&str>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match root {
        Some(path) if path != "system" => {
            let path = PathBuf::from(path);
            let certs = CertificateDer::pem_file_iter(&path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("cannot read sslrootcert {}: {e}", path.display()))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!(
                    "sslrootcert {} holds no certificate rein can use; give it the PEM certificate of the authority that signed the server's",
                    path.display()
                ));
            }
        }
        _ => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "this system has no trusted root certificates to check the server's against; give sslrootcert=FILE"
                        .into(),
                );
            }
        }
    }
    Ok(store)
}

/// How a server's certificate is checked: against `chain`'s authorities, if
/// any (`verify-ca`, `verify-full`), and its names too if `names`
/// (`verify-full`); the handshake's signature always, so the server holds
/// the key of the certificate it sent (`prefer` and `require` check nothing
/// else).
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    names: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_come_out_of_the_url() {
        let s = secure("postgres://u@h:5/db?sslmode=verify-full&application_name=x").unwrap();
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(s.config.get_application_name(), Some("x"));
        let s = secure("postgres://u@h:5/db").unwrap();
        assert_eq!(s.mode, Mode::Prefer);
        assert_eq!(s.config.get_ssl_mode(), SslMode::Prefer);
        let s = secure("postgres://u@h:5/db?sslmode=disable").unwrap();
        assert_eq!(s.config.get_ssl_mode(), SslMode::Disable);
    }

    #[test]
    fn bad_settings_are_named() {
        let e = secure("postgres://u@h/db?sslmode=sometimes").err().unwrap();
        assert!(e.contains("unknown sslmode `sometimes`"), "{e}");
        let e = secure("postgres://u@h/db?sslmode=allow").err().unwrap();
        assert!(e.contains("allow is not supported"), "{e}");
        let e = secure("postgres://u@h/db?sslpassword=x").err().unwrap();
        assert!(e.contains("`sslpassword` is not supported yet"), "{e}");
        let e = secure("postgres://u@h/db?sslcert=/c.pem").err().unwrap();
        assert!(e.contains("sslcert needs sslkey"), "{e}");
        let e = secure("postgres://u@h/db?sslcert=/no/c.pem&sslkey=/no/k.pem")
            .err()
            .unwrap();
        assert!(e.contains("cannot read sslcert /no/c.pem"), "{e}");
        let e = secure("postgres://u@h/db?sslmode=verify-ca&sslrootcert=/no/such.pem")
            .err()
            .unwrap();
        assert!(e.contains("cannot read sslrootcert /no/such.pem"), "{e}");
    }

    #[test]
    fn require_with_a_root_checks_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let url = format!(
            "postgres://u@h/db?sslmode=require&sslrootcert={}",
            empty.display()
        );
        // It now reads the file, which holds nothing usable.
        let e = secure(&url).err().unwrap();
        assert!(e.contains("holds no certificate"), "{e}");
    }
}
